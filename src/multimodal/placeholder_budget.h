// What a prompt's images and videos may take of the model's context (max_model_len), counted
// from their slice plans before any pixel is resized. A prompt whose placeholder tokens alone
// fill the context would be refused after tokenization anyway (vLLM's "maximum context length"
// 400); refusing it while only its plans exist means its pixels are never allocated, whatever
// its images and its mm_processor_kwargs (a large max_slice_nums or scale_resolution) make of
// them. So the slices one prompt holds stay under max_model_len placeholder tokens' worth of
// pixels (16x mode: 16 patches of 14² pixels, 37 KB of normalized floats, per token).
#pragma once

#include <cstdint>

#include "base/status.h"

namespace cpm {

class PlaceholderBudget {
 public:
  // `max_model_len` <= 0: no limit (a prompt that is only counted, as /tokenize's).
  explicit PlaceholderBudget(int64_t max_model_len = 0) : max_model_len_(max_model_len) {}

  // Counts one image's (or video frame's) placeholder tokens. InvalidArgument with vLLM's
  // context-length text once the placeholders alone reach max_model_len: the whole prompt,
  // which holds more, would leave no room for a generated token.
  Status Take(int64_t tokens);

  int64_t used() const { return used_; }

 private:
  int64_t max_model_len_;
  int64_t used_ = 0;
};

}  // namespace cpm
