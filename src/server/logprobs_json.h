// Log-probabilities in OpenAI's two shapes: chat's `logprobs.content[{token, logprob, bytes,
// top_logprobs}]` and completions' parallel lists `{tokens, token_logprobs, top_logprobs,
// text_offset}`. Token strings are the text each token adds (its bytes, as OpenAI reports).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/offline_generator.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

// -inf (a token the filters removed) is reported as -9999.0, as vLLM does.
double ClampLogprob(float lp);

// How a token is named in log-probs: the text it adds, or with vLLM's
// return_tokens_as_token_ids "token_id:<id>" (for tokens whose bytes are not whole UTF-8).
std::string LogprobToken(const Tokenizer& tok, int32_t id, bool as_token_ids);

// Entries for chat's logprobs.content; `top` is the requested top_logprobs count.
nlohmann::ordered_json ChatLogprobEntries(const Tokenizer& tok,
                                          const std::vector<TokenLogprobs>& lps, int top,
                                          bool as_token_ids = false);

// vLLM's prompt_logprobs list: null for the first prompt token, then per token a map from
// token id (as a string) to {logprob, rank, decoded_token}: the prompt token itself and the
// top `top`. Null when `lps` is absent (not requested).
nlohmann::ordered_json PromptLogprobsJson(const Tokenizer& tok,
                                          const std::vector<TokenLogprobs>& lps, int top);

// Completions' logprobs object, built up step by step.
// Python's len() of a UTF-8 string: its code points, each invalid byte counted as one.
int64_t PythonLen(const std::string& s);

// A token's text as a completion's log-probs show it: vLLM decodes each token alone, so bytes
// that are not whole UTF-8 (a byte-fallback piece) become U+FFFD, one per maximal invalid
// subsequence; the tokens, the top_logprobs keys and text_offset all see that text.
std::string CompletionTokenText(const Tokenizer& tok, int32_t id, bool as_token_ids);

// text_offset runs on from token text to token text, so a stream's chunks carry the offsets
// the whole reply would (vLLM's test_completion_text_offset; its 0.10-0.12 restarted each
// chunk at the length of the text sent, which lags while a stop string holds text back).
class CompletionLogprobs {
 public:
  CompletionLogprobs(const Tokenizer& tok, int top, int64_t initial_offset,
                     bool as_token_ids = false)
      : tok_(tok), top_(top), offset_(initial_offset), as_token_ids_(as_token_ids) {}
  // Each token's top_logprobs: itself, then the top `top` (-1: the constructor's), at most
  // `limit` entries (-1: no limit).
  void Append(const std::vector<TokenLogprobs>& lps, int top = -1, int limit = -1);
  // A token without a score (an echoed first prompt token): null logprob and top_logprobs.
  void AppendUnscored(int32_t token);
  nlohmann::ordered_json ToJson() const;
  // The part added since the last call (for streaming chunks).
  nlohmann::ordered_json TakeDelta();
  bool empty() const { return tokens_.empty(); }
  bool has_delta() const { return tokens_.size() > taken_; }

 private:
  const Tokenizer& tok_;
  int top_;
  int64_t offset_;
  bool as_token_ids_;
  nlohmann::ordered_json tokens_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json token_logprobs_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json top_logprobs_ = nlohmann::ordered_json::array();
  nlohmann::ordered_json text_offset_ = nlohmann::ordered_json::array();
  size_t taken_ = 0;
};

}  // namespace cpm
