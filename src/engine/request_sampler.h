// Per-request sampling and stop rules for one logits row: log-probs of the model's logits
// under the structured output's mask (what vLLM reports), then the request's logits rules
// (allowed tokens, bad words, logit bias), penalties over prompt and output, min_tokens' mask
// of stop tokens and EOS, the structured output's mask, a thinking budget's forced end marker,
// then a draw from the request's own generator; and the finish checks (stop tokens, EOS unless
// ignore_eos, min_tokens, max_tokens, max_model_len). Engine thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/request_state.h"

namespace cpm {

struct SampledToken {
  int32_t token = 0;
  std::optional<TokenLogprobs> logprobs;  // when the request asked for them
};

// `row` [vocab] is modified in place (penalties). `scratch` is resized as needed.
SampledToken SampleForRequest(RequestState& r, float* row, int64_t vocab, std::vector<float>* scratch);

// The draws of one step for `r`, appended to r.tokens as they are made: row j of `rows`
// ([count, vocab], modified) follows r's tokens and the first j tokens of r.draft. A draft
// token stands when the draw at its row is that very token, so the step goes on while draws
// match the draft and ends at the first that does not (it replaces that draft token), after
// the row past the last draft token, or at a token that ends the request. Every draw is the
// one decoding without a draft would make at that point (same logits rows, rules, penalties
// and generator), so outputs do not depend on drafts; for sampled requests this is also the
// exact speculative acceptance rule for a draft proposed with certainty (accept with
// probability p(draft), else draw from p without it).
std::vector<SampledToken> SampleWithDraft(RequestState& r, float* rows, int64_t count,
                                          int64_t vocab, int64_t max_model_len,
                                          std::vector<float>* scratch);

// vLLM's scheduler keeps a structured-output request's draft only up to the first token its
// grammar would not take next (grammar.validate_tokens), so no verification row goes to a
// token that cannot stand and the acceptance counters see only drafts that could. An end token
// stands only on a complete text, and nothing after it. Outputs are the same either way.
void TrimDraftToConstraint(RequestState& r, std::vector<int32_t>* draft);

// A prompt_logprobs entry: `token`'s log-prob under the raw logits `row`, its 1-based rank as
// vLLM's (the number of tokens at least as likely, itself included: tied tokens share the worse
// rank) and the top `k`.
TokenLogprobs ScoreToken(const float* row, int64_t vocab, int32_t token, int32_t k,
                         std::vector<float>* scratch);

struct FinishDecision {
  bool finished = false;
  std::string reason;                 // "stop" or "length"
  std::optional<int32_t> stop_token;  // set when a stop_token_ids entry ended it (not EOS)
};

// Decides whether `r` ends after its newest output token (already appended to r.tokens).
FinishDecision CheckFinish(const RequestState& r, int64_t max_model_len);

}  // namespace cpm
