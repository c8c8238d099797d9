// vLLM's random dataset and arrival process for `cpmserve bench serve`.
#include "benchserve/random_requests.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace cpm::benchserve {

std::pair<int64_t, int64_t> LengthRange(int64_t len, double ratio, int64_t min_len) {
  const int64_t lo = static_cast<int64_t>(std::floor(static_cast<double>(len) * (1.0 - ratio)));
  const int64_t hi = static_cast<int64_t>(std::ceil(static_cast<double>(len) * (1.0 + ratio)));
  return {std::max(lo, min_len), std::max(hi, min_len)};
}

std::vector<SampleRequest> SampleRandomRequests(const RandomDatasetOptions& o,
                                                const std::vector<int32_t>& allowed) {
  std::mt19937_64 rng(o.seed);
  const auto [in_lo, in_hi] = LengthRange(o.input_len, o.range_ratio, 1);
  const auto [out_lo, out_hi] = LengthRange(o.output_len, o.range_ratio, 1);
  std::uniform_int_distribution<int64_t> in_len(in_lo, in_hi), out_len(out_lo, out_hi);
  std::uniform_int_distribution<size_t> pick(0, allowed.size() - 1);
  std::vector<int32_t> prefix(o.prefix_len);
  for (int32_t& t : prefix) t = allowed[pick(rng)];
  std::vector<SampleRequest> out(o.num_prompts);
  for (SampleRequest& r : out) {
    r.prompt.resize(in_len(rng));
    r.output_len = out_len(rng);
  }
  for (SampleRequest& r : out) {
    for (int32_t& t : r.prompt) t = allowed[pick(rng)];
    r.prompt.insert(r.prompt.begin(), prefix.begin(), prefix.end());
  }
  return out;
}

std::vector<double> ArrivalOffsets(int64_t n, double request_rate, double burstiness,
                                   uint64_t seed) {
  std::vector<double> t(n, 0.0);
  if (n == 0 || std::isinf(request_rate)) return t;
  if (std::isinf(burstiness)) {  // no randomness at all: evenly spaced, as vLLM's
    for (int64_t i = 0; i < n; ++i) t[i] = static_cast<double>(i + 1) / request_rate;
    return t;
  }
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
