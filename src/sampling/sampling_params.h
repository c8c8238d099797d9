// Per-request sampling parameters, as vLLM's SamplingParams (the subset the sampler uses).
#pragma once

#include <cstdint>
#include <optional>

namespace cpm {

struct SamplingParams {
  float temperature = 1.0f;  // < 1e-5 means greedy (vLLM's _SAMPLING_EPS)
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // 0 or -1: off
  float min_p = 0.0f;        // [0, 1]
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::optional<uint64_t> seed;  // per-request generator seed

  bool greedy() const { return temperature < 1e-5f; }
};

}  // namespace cpm
