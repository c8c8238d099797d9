// Server-wide default sampling parameters: vLLM's --generation-config. `auto` reads the model's
// generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty and
// max_new_tokens, which becomes a hard cap); `vllm` ignores it; a folder reads that folder's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"

namespace cpm {

struct GenerationDefaults {
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> max_tokens;  // from max_new_tokens

  bool empty() const {
    return !temperature && !top_p && !top_k && !min_p && !repetition_penalty && !max_tokens;
  }
  // "{'repetition_penalty': 1.02, 'temperature': 0.7}" as vLLM logs the dict.
  std::string ToPythonDict() const;
};

// vLLM's --override-generation-config: the JSON object's fields (temperature, top_p, top_k,
// min_p, repetition_penalty, max_new_tokens) replace or add to `d`'s; others are ignored.
Status ApplyGenerationOverrides(const std::string& json, GenerationDefaults* d);

// `choice` is the flag value. A missing generation_config.json is no error (no defaults); a
// malformed one is.
StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& choice,
                                                    const std::string& model_dir);

}  // namespace cpm
