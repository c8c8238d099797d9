// A request's rules over the logits beside sampling proper: OpenAI's `logit_bias` and vLLM's
// `allowed_token_ids` and `bad_words`. Applied to each logits row before the penalties, in
// vLLM's order (its v1 sampler: the allowed-token mask, bad words, then the logit bias; the
// min-tokens mask it applies between the last two only sets -inf, so it commutes with them).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace cpm {

struct LogitsRules {
  // Token ids that may be drawn at all; empty: every token.
  std::vector<int32_t> allowed_token_ids;
  // Token sequences that must not be generated: the last token of one is banned wherever the
  // output so far ends with the others (a one-token word is banned everywhere). vLLM's
  // bad_words, each word tokenized as it would start the text and as it would follow a space.
  std::vector<std::vector<int32_t>> bad_words;
  // (token, bias) added to the token's logit; the bias already clamped to [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;

  bool empty() const {
    return allowed_token_ids.empty() && bad_words.empty() && logit_bias.empty();
  }
};

// Applies `rules` to one logits row [vocab] given the tokens generated so far (not the
// prompt's: vLLM matches bad words against the output only). Ids at or past `vocab` are
// skipped (the server has checked them against the tokenizer's vocabulary).
void ApplyLogitsRules(const LogitsRules& rules, std::span<const int32_t> output, float* row,
                      int64_t vocab);

}  // namespace cpm
