// numpy-style statistics for `cpmserve bench serve`'s metrics (CalculateMetrics itself is a
// template in the header).
#include "benchserve/serve_metrics.h"

namespace cpm::benchserve {

double Mean(const std::vector<double>& x) {
  if (x.empty()) return 0;
  double s = 0;
  for (double v : x) s += v;
  return s / static_cast<double>(x.size());
}

double Std(const std::vector<double>& x) {
  if (x.empty()) return 0;
  const double m = Mean(x);
  double s = 0;
  for (double v : x) s += (v - m) * (v - m);
  return std::sqrt(s / static_cast<double>(x.size()));
}

double Percentile(std::vector<double> x, double p) {
  if (x.empty()) return 0;
  std::sort(x.begin(), x.end());
  const double rank = p / 100.0 * static_cast<double>(x.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, x.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return x[lo] + (x[hi] - x[lo]) * frac;
}

MetricStats StatsMs(const std::vector<double>& seconds, const std::vector<double>& pcts) {
  MetricStats s;
  s.mean_ms = Mean(seconds) * 1000;
  s.median_ms = Percentile(seconds, 50) * 1000;
  s.std_ms = Std(seconds) * 1000;
  for (double p : pcts) s.percentiles_ms.emplace_back(p, Percentile(seconds, p) * 1000);
  return s;
}

BenchmarkMetrics CalculateMetrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                  const std::vector<double>& percentiles, const GoodputSlos& slos) {
  return CalculateMetrics(outputs, duration_s, percentiles, slos,
                          [&](size_t i) { return outputs[i].chunks; });
}

}  // namespace cpm::benchserve
