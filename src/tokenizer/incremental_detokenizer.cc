// Streaming detokenization (see incremental_detokenizer.h).
#include "tokenizer/incremental_detokenizer.h"

namespace cpm {
namespace {

// Prompt ids kept for context: enough to cover a multi-token character before the first
// generated id, as vLLM's initial offset of 5 does.
constexpr size_t kPromptContext = 6;
// Ids before the window are dropped once this many accumulate, so memory stays bounded.
constexpr size_t kCompactAfter = 1024;

bool EndsWithReplacementChar(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

}  // namespace

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer,
                                               bool skip_special_tokens,
                                               std::span<const int32_t> prompt_ids)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {
  const size_t keep = std::min(prompt_ids.size(), kPromptContext);
  ids_.assign(prompt_ids.end() - keep, prompt_ids.end());
  read_offset_ = ids_.size();
}

std::string IncrementalDetokenizer::Push(int32_t id) {
  // Decode drops skipped specials before its decoders run, so they are as good as absent; not
  // keeping them also stops a run of them from growing the window.
  if (skip_special_tokens_ && tokenizer_.IsSpecial(id)) return std::string();
  ids_.push_back(id);
  return Advance(/*final=*/false);
}

std::string IncrementalDetokenizer::Flush() { return Advance(/*final=*/true); }

std::string IncrementalDetokenizer::Advance(bool final) {
  if (read_offset_ >= ids_.size()) return std::string();
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text =
      tokenizer_.Decode(all.subspan(prefix_offset_, read_offset_ - prefix_offset_),
                        skip_special_tokens_);
  const std::string new_text =
      tokenizer_.Decode(all.subspan(prefix_offset_), skip_special_tokens_);
  if (new_text.size() <= prefix_text.size() || (!final && EndsWithReplacementChar(new_text))) {
    if (final) read_offset_ = ids_.size();
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
