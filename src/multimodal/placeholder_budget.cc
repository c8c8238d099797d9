// A prompt's image and video placeholder tokens against max_model_len (see placeholder_budget.h).
#include "multimodal/placeholder_budget.h"

#include <string>

namespace cpm {

Status PlaceholderBudget::Take(int64_t tokens) {
  used_ += tokens;
  if (max_model_len_ <= 0 || used_ < max_model_len_) return OkStatus();
  // vLLM's wording (ResolveMaxTokens' in the server), so that clients matching "maximum context
  // length" see what they expect; "at least": the prompt's text is not tokenized yet.
  return InvalidArgument("This model's maximum context length is " + std::to_string(max_model_len_) +
                         " tokens. However, your request has at least " + std::to_string(used_) +
                         " input tokens (the placeholders of its images and videos alone). Please "
                         "reduce the number or the size of the images, or the mm_processor_kwargs' "
                         "max_slice_nums or scale_resolution.");
}

}  // namespace cpm
