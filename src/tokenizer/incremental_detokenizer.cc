// Streaming detokenization (see incremental_detokenizer.h).
#include "tokenizer/incremental_detokenizer.h"

namespace cpm {
namespace {

// The prompt ids the stream is primed with: as vLLM's FastIncrementalDetokenizer, the shortest
// suffix of kMinPrime to kMaxPrime ids whose text is whole characters, so that a character the
// prompt leaves unfinished is emitted whole once the generated ids finish it. When none is,
// vLLM primes with the whole prompt; here the last kMaxPrime ids, since priming a prompt whose
// text never completes decodes a growing window at every id (quadratic in its length).
constexpr size_t kMinPrime = 4, kMaxPrime = 23;
// Ids before the window are dropped once this many accumulate, so memory stays bounded.
constexpr size_t kCompactAfter = 1024;

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

bool EndsWithReplacementChar(const std::string& s) { return s.ends_with(kReplacementChar); }

std::span<const int32_t> PrimingSuffix(const Tokenizer& tokenizer,
                                       std::span<const int32_t> prompt_ids) {
  if (prompt_ids.size() <= kMinPrime) return prompt_ids;
  for (size_t n = kMinPrime; n <= std::min(prompt_ids.size(), kMaxPrime); ++n) {
    const std::span<const int32_t> suffix = prompt_ids.last(n);
    // tokenizers' Tokenizer.decode, as vLLM calls it, skips special tokens by default.
    if (tokenizer.Decode(suffix, true).find(kReplacementChar) == std::string::npos) return suffix;
  }
  return prompt_ids.last(std::min(prompt_ids.size(), kMaxPrime));
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               bool skip_special_tokens,
                                               std::span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  // The prompt's text is not output: what priming emits is dropped, and what it holds back (an
  // unfinished character) comes out with the first generated id that finishes it.
  for (int32_t id : PrimingSuffix(tokenizer, prompt_ids)) Push(id);
}

std::string IncrementalDetokenizer::Push(int32_t id) {
  // Decode drops skipped specials before its decoders run, so they are as good as absent; not
  // keeping them also stops a run of them from growing the window.
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return std::string();
  ids_.push_back(id);
  return Advance();
}

std::string IncrementalDetokenizer::Advance() {
  if (read_offset_ >= ids_.size()) return std::string();
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_.Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_),
                        skip_special_tokens_);
  const std::string new_text =
      tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_tokens_);
  if (new_text.size() <= prefix_text.size() || EndsWithReplacementChar(new_text)) {
    return std::string();
  }
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  if (prefix_offset_ >= kCompactAfter) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(prefix_offset_));
    read_offset_ -= prefix_offset_;
    prefix_offset_ = 0;
  }
  return delta;
}

}  // namespace cpm
