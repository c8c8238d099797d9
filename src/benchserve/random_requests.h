// The synthetic workload of `cpmserve bench serve`: vLLM's "random" dataset (prompts of random
// token ids with lengths drawn around --random-input-len / --random-output-len) and its arrival
// process (all at t = 0 for an infinite rate, else gamma-distributed gaps, Poisson for
// burstiness 1, rescaled so the last arrival falls at num_prompts / rate). Seeded, so a seed
// gives the same prompts and arrivals on every run.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace cpm::benchserve {

struct SampleRequest {
  std::vector<int32_t> prompt;  // token ids
  int64_t output_len = 0;       // max_tokens
};

struct RandomDatasetOptions {
  int64_t num_prompts = 1000;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  double range_ratio = 0.0;  // lengths uniform in [⌊L·(1−r)⌋, ⌈L·(1+r)⌉], r in [0, 1)
  uint64_t seed = 0;
  int64_t prefix_len = 0;  // random tokens every prompt starts with (--random-prefix-len)
};

// Inclusive length range of `len` under `ratio`, at least `min_len`.
std::pair<int64_t, int64_t> LengthRange(int64_t len, double ratio, int64_t min_len);

// `allowed`: the token ids a prompt may use (e.g. the vocabulary without special tokens).
std::vector<SampleRequest> SampleRandomRequests(const RandomDatasetOptions& o,
                                                const std::vector<int32_t>& allowed);

// Send offsets in seconds from the benchmark start, one per request, non-decreasing.
std::vector<double> ArrivalOffsets(int64_t n, double request_rate, double burstiness,
                                   uint64_t seed);

}  // namespace cpm::benchserve
