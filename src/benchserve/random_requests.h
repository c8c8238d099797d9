// The synthetic workload of `cpmserve bench serve`: vLLM's "random" dataset (prompts of random
// token ids with lengths drawn around --random-input-len / --random-output-len) and its arrival
// process (all at t = 0 for an infinite rate, else gamma-distributed gaps, Poisson for
// burstiness 1, rescaled so the last arrival falls at num_prompts / rate). Seeded, so a seed
// gives the same prompts and arrivals on every run. Header-only (inline).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
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
};

// Inclusive length range of `len` under `ratio`, at least `min_len`.
inline std::pair<int64_t, int64_t> LengthRange(int64_t len, double ratio, int64_t min_len) {
  const int64_t lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - ratio)));
  const int64_t hi = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + ratio)));
  return {std::max(lo, min_len), std::max(hi, min_len)};
}

// `allowed`: the token ids a prompt may use (e.g. the vocabulary without special tokens).
inline std::vector<SampleRequest> SampleRandomRequests(const RandomDatasetOptions& o,
                                                       const std::vector<int32_t>& allowed) {
  std::mt19937_64 rng(o.seed);
  const auto [in_lo, in_hi] = LengthRange(o.input_len, o.range_ratio, 1);
  const auto [out_lo, out_hi] = LengthRange(o.output_len, o.range_ratio, 1);
  std::uniform_int_distribution<int64_t> in_len(in_lo, in_hi), out_len(out_lo, out_hi);
  std::uniform_int_distribution<size_t> pick(0, allowed.size() - 1);
  std::vector<SampleRequest> out(o.num_prompts);
  for (SampleRequest& r : out) {
    r.prompt.resize(in_len(rng));
    r.output_len = out_len(rng);
  }
  for (SampleRequest& r : out) {
    for (int32_t& t : r.prompt) t = allowed[pick(rng)];
  }
  return out;
}

// Send offsets in seconds from the benchmark start, one per request, non-decreasing.
inline std::vector<double> ArrivalOffsets(int64_t n, double request_rate, double burstiness,
                                          uint64_t seed) {
  std::vector<double> t(n, 0.0);
  if (n == 0 || std::isinf(request_rate)) return t;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (request_rate * burstiness));
  double sum = 0;
  for (double& v : t) v = (sum += gap(rng));
  // Rescale so the arrivals span exactly n / rate (steadier throughput across seeds).
  const double scale = (static_cast<double>(n) / request_rate) / t.back();
  for (double& v : t) v *= scale;
  return t;
}

}  // namespace cpm::benchserve
