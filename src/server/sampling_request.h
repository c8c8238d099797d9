// Turns a request's sampling fields into engine parameters: server defaults for absent fields
// (generation config, then vLLM's), range checks with vLLM's messages, and the context-length
// checks with vLLM's exact 400 texts.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "sampling/logits_rules.h"
#include "sampling/sampling_params.h"
#include "sampling/thinking_budget.h"
#include "server/generation_defaults.h"
#include "server/protocol.h"
#include "structured/constraint.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

inline constexpr int64_t kMaxLogprobs = 20;  // vLLM's --max-logprobs default
// Bound on n, and on the engine requests one completion request makes (prompts × n, where vLLM
// has no bound): vLLM's VLLM_MAX_N_SEQUENCES sets it here too (ServerContext::max_n_sequences),
// whose default is 16384. Ours is lower: each choice holds its own copy of an image request's
// embeddings (~5 MB a sliced image) and of its sampling state, and its HTTP thread walks the
// open choices on every event.
inline constexpr int64_t kDefaultMaxNSequences = 1024;
// Bound on a completion request's prompts (vLLM's VLLM_MAX_COMPLETION_PROMPTS default).
inline constexpr int64_t kMaxCompletionPrompts = 1024;

struct ResolvedSampling {
  SamplingParams params;  // params.seed: the request's seed (choice i uses seed + i)
  int64_t n = 1;
  std::optional<int64_t> max_tokens;  // as requested
  // generation_config.json's max_new_tokens: a server-wide cap applied after the request's
  // own value has been checked against the context (ResolveMaxTokens), as vLLM does.
  std::optional<int64_t> max_tokens_cap;
  int64_t min_tokens = 0;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  int32_t logprobs = -1;  // -1: none; k >= 0: the chosen token and the top k
  int32_t prompt_logprobs = -1;  // -1: none; k >= 0: each prompt token's and the top k
  std::shared_ptr<const structured::Constraint> constraint;  // structured output; null: none
  std::shared_ptr<const LogitsRules> logits_rules;  // logit_bias etc.; null: none
  // Log-probs name tokens "token_id:<id>" (the request's return_tokens_as_token_ids, else the
  // server's --return-tokens-as-token-ids; set by ServerContext::ApplyServerSampling).
  bool return_tokens_as_token_ids = false;
  // thinking_token_budget, checked here; its markers come from the server's reasoning parser
  // (ServerContext::ApplyServerSampling), without which it stays null.
  std::optional<int64_t> thinking_token_budget;
  std::shared_ptr<const ThinkingBudget> thinking_budget;
  // use_beam_search: n is the beam width (GenerationRun runs server/beam_search.h).
  bool beam_search = false;
  float length_penalty = 1.0f;
  int64_t priority = 0;  // lower runs first under --scheduling-policy priority (checked there)
  std::string cache_salt;  // protocol::SamplingFields::cache_salt
};

// `logprobs`: -1 for none, else the number of top log-probs wanted (checked here against
// `max_logprobs`, the server's --max-logprobs; so is prompt_logprobs).
// Token ids (stop_token_ids, logit_bias, allowed_token_ids) must be below `vocab_size`;
// bad_words are tokenized by `tokenizer` (required when the request has any).
StatusOr<ResolvedSampling> ResolveSampling(const protocol::SamplingFields& fields,
                                           const GenerationDefaults& defaults,
                                           int64_t logprobs, int32_t vocab_size,
                                           const Tokenizer* tokenizer = nullptr,
                                           int64_t max_logprobs = kMaxLogprobs);

// vLLM's bad_words as token sequences: each word (leading spaces dropped) as `tokenizer`
// encodes it alone, and again after a space where that gives a different first token and
// as many tokens (a word mid-text).
std::vector<std::vector<int32_t>> BadWordsTokenIds(const std::vector<std::string>& words,
                                                   const Tokenizer& tokenizer);

// Chat's logprobs/top_logprobs pair -> the count for ResolveSampling (-1: none), vLLM's checks:
// top_logprobs -1 is the whole vocabulary; 0 needs no `logprobs`.
StatusOr<int64_t> ChatLogprobsCount(bool logprobs, std::optional<int64_t> top_logprobs,
                                    int32_t vocab_size);

// A completion request's `logprobs` -> ResolveSampling's count (-1: none); a negative one is
// vLLM's 400 (unlike chat's top_logprobs, completions have no -1 for the whole vocabulary).
StatusOr<int64_t> CompletionLogprobsCount(std::optional<int64_t> logprobs);

// vLLM's least positive temperature (_MAX_TEMP): lower positive ones are raised to it.
inline constexpr double kMinTemperature = 0.01;

// vLLM's truncate_prompt_tokens: keeps `k` tokens of `ids` (k = -1: max_model_len; 0 keeps
// them all, as vLLM's slice ids[-0:] does), the last ones or with `keep_first` (truncation_side
// "right") the first. k below -1 or above max_model_len is a 400 with vLLM's text; so is
// cutting a multimodal prompt (`multimodal`), whose placeholders the encoder's rows point into.
// `specials` = {leading, trailing}: special tokens the tokenizer added around a text prompt's
// own, which stay while the text's tokens make room, as Hugging Face's truncation=True,
// max_length=k keeps them (vLLM tokenizes text prompts so); token-id prompts are plain slices.
struct SpecialTokenCounts {
  size_t leading = 0, trailing = 0;
};
// `text_tokens`: a multimodal prompt's length as vLLM truncates it (its text, each image or
// video one placeholder token); only a cut into that is refused.
Status TruncatePrompt(std::optional<int64_t> k, bool keep_first, int64_t max_model_len,
                      bool multimodal, std::vector<int32_t>* ids,
                      SpecialTokenCounts specials = {}, int64_t text_tokens = -1);

// Checks `num_prompt_tokens` and the requested max_tokens against the context length with
// vLLM's texts, and returns the number of tokens to generate at most (then held to `cap`);
// `min_tokens` above that is vLLM's 400.
StatusOr<int64_t> ResolveMaxTokens(int64_t num_prompt_tokens,
                                   std::optional<int64_t> requested_max_tokens,
                                   int64_t max_model_len,
                                   std::optional<int64_t> cap = std::nullopt,
                                   int64_t min_tokens = 0);

// A prompt with images or videos, in vLLM's order: the request was checked (ResolveMaxTokens)
// against the prompt's text tokens, each item one placeholder token as its chat template writes
// it, before the processor expanded the placeholders; the expanded prompt (`prompt_tokens`)
// must then leave room for a token (vLLM's engine-side "decoder prompt" 400), and generation
// stops where the context ends (vLLM's length cap, finish_reason "length").
StatusOr<int64_t> LimitToExpandedPrompt(int64_t max_tokens, int64_t prompt_tokens,
                                        int64_t max_model_len);

}  // namespace cpm
