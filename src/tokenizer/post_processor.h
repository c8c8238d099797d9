// tokenizer.json post-processors for a single sequence: TemplateProcessing (BOS/EOS around the
// text), Roberta/Bert (cls + text + sep), ByteLevel (ids unchanged) and Sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace cpm {

class PostProcessor {
 public:
  // A template: ids before the text, then ids after it.
  PostProcessor(std::vector<int32_t> prefix, std::vector<int32_t> suffix)
      : prefix_(std::move(prefix)), suffix_(std::move(suffix)) {}

  // Wraps `ids` (the text's tokens) with the template's special tokens.
  void Apply(std::vector<int32_t>* ids) const;
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }

 private:
  std::vector<int32_t> prefix_;
  std::vector<int32_t> suffix_;
};

// Reads a tokenizer.json "post_processor" object (null gives an empty template). Every
// supported processor reduces to "prefix ids + text + suffix ids" for one sequence.
StatusOr<PostProcessor> ParsePostProcessor(const nlohmann::json& j);

}  // namespace cpm
