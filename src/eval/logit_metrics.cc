// Metric arithmetic in double precision; the engine row stays float as the engine produced it.
#include "eval/logit_metrics.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <limits>
#include <numeric>
#include <set>

namespace cpm {
namespace {

// Ids of the k largest entries of `row`, largest first, ties to the lower id (as the sampler's
// TopK and numpy's stable argsort of the negated row in compare_logprobs.py).
std::vector<int32_t> TopIds(std::span<const float> row, size_t k) {
  std::vector<int32_t> idx(row.size());
  std::iota(idx.begin(), idx.end(), 0);
  k = std::min(k, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return row[a] > row[b] || (row[a] == row[b] && a < b);
  });
  idx.resize(k);
  return idx;
}

double Overlap(std::span<const std::pair<int32_t, double>> ref, const std::vector<int32_t>& eng,
               size_t k) {
  std::set<int32_t> a;
  for (size_t i = 0; i < k; ++i) a.insert(ref[i].first);
  size_t common = 0;
  for (size_t i = 0; i < k; ++i) common += a.count(eng[i]);
  return static_cast<double>(common) / static_cast<double>(k);
}

// log Σ exp(x_i), stable.
double LogSumExp(const std::vector<double>& x) {
  const double m = *std::max_element(x.begin(), x.end());
  if (!std::isfinite(m)) return m;
  double s = 0;
  for (double v : x) s += std::exp(v - m);
  return m + std::log(s);
}

// Rest masses below this are rounding noise of float32 log-probs summed over K entries.
constexpr double kRestNoise = 1e-6;
constexpr double kRestFloor = 1e-12;

// 1 − exp(lse) for lse <= 0, without cancellation; 0 when rounding made lse positive.
double RestMass(double lse) { return lse >= 0 ? 0.0 : -std::expm1(lse); }

// The raw logits are the log-probs as each side wrote them (not renormalised) plus that side's
// log-sum-exp, which was taken over the same raw row.
LogitDiff ComputeLogitDiff(std::span<const std::pair<int32_t, double>> ref_top,
                           std::span<const float> eng, double ref_lse, double eng_lse) {
  LogitDiff d;
  for (const auto& [id, lp_ref] : ref_top) {
    if (id < 0 || id >= static_cast<int32_t>(eng.size())) continue;
    const double ref = lp_ref + ref_lse;
    const double diff = std::abs(static_cast<double>(eng[id]) + eng_lse - ref);
    d.max_abs = std::max(d.max_abs, diff);
    d.sum_abs += diff;
    d.sum_abs_ref += std::abs(ref);
    ++d.ids;
  }
  return d;
}

}  // namespace

RowMetrics ComputeRowMetrics(std::span<const std::pair<int32_t, double>> ref_top,
                             std::span<const float> eng, std::optional<double> ref_logsumexp,
                             std::optional<double> eng_logsumexp) {
  RowMetrics m;
  if (ref_logsumexp && eng_logsumexp) {
    m.logit_diff = ComputeLogitDiff(ref_top, eng, *ref_logsumexp, *eng_logsumexp);
  }
  const size_t k_all = ref_top.size();
  const size_t k20 = std::min<size_t>({20, k_all, eng.size()});
  const size_t k5 = std::min<size_t>(5, k20);
  const std::vector<int32_t> eng_top = TopIds(eng, k20);
  m.ref_top1 = ref_top[0].first;
  m.eng_top1 = eng_top[0];
  m.top1 = m.ref_top1 == m.eng_top1;
  m.top5_overlap = Overlap(ref_top, eng_top, k5);
  m.top20_overlap = Overlap(ref_top, eng_top, k20);

  // Both rows renormalised in double where they are whole: a float32 log-softmax sums to 1 only
  // within ~1e-7, which alone would read as a KL of that size (the engine's row always; the
  // reference's when its top-K is the whole vocabulary).
  const double eng_lse = LogSumExp(std::vector<double>(eng.begin(), eng.end()));
  double ref_lse = 0;
  if (k_all >= eng.size()) {
    std::vector<double> all;
    for (const auto& e : ref_top) all.push_back(e.second);
    ref_lse = LogSumExp(all);
  }
  const auto eng_lp = [&](int32_t id) {
    return id >= 0 && id < static_cast<int32_t>(eng.size())
               ? static_cast<double>(eng[id]) - eng_lse
               : -std::numeric_limits<double>::infinity();
  };
  for (size_t i = 0; i < k20; ++i) {
    const int32_t id = ref_top[i].first;
    const double lp_ref = ref_top[i].second - ref_lse, lp_eng = eng_lp(id);
    const double p_ref = std::exp(lp_ref), p_eng = std::exp(lp_eng);
    m.rel.push_back(std::abs(p_eng - p_ref) / p_ref);
    m.max_abs_logprob = std::max(m.max_abs_logprob, std::abs(lp_eng - lp_ref));
  }

  std::vector<double> lr, le;
  double kl = 0;
  for (const auto& [id, lp_raw] : ref_top) {
    const double lp_ref = lp_raw - ref_lse, lp_eng = eng_lp(id);
    lr.push_back(lp_ref);
    le.push_back(lp_eng);
    kl += std::exp(lp_ref) * (lp_ref - lp_eng);
  }
  const double p_rest = RestMass(LogSumExp(lr));
  const double q_rest = RestMass(LogSumExp(le));
  // When the top-K holds (almost) the whole vocabulary the rest masses are float32 rounding
  // noise (a sum of K rounded probabilities), not probability: no bucket then. Otherwise the
  // engine's rest is floored so that a rounding-level zero gives a large, finite term.
  if (p_rest > kRestNoise) kl += p_rest * std::log(p_rest / std::max(q_rest, kRestFloor));
  // Rounding in a reference written with few digits can push the sum a hair below zero.
  m.kl = std::max(0.0, kl);
  return m;
}

LogitsSummary SummarizeRows(std::span<const RowMetrics> rows) {
  LogitsSummary s;
  s.rows = static_cast<int64_t>(rows.size());
  if (rows.empty()) return s;
  double rel_sum = 0;
  int64_t rel_n = 0;
  LogitDiff all;
  bool all_have_logits = true;
  for (const RowMetrics& r : rows) {
    if (r.logit_diff) {
      all.max_abs = std::max(all.max_abs, r.logit_diff->max_abs);
      all.sum_abs += r.logit_diff->sum_abs;
      all.sum_abs_ref += r.logit_diff->sum_abs_ref;
      all.ids += r.logit_diff->ids;
    } else {
      all_have_logits = false;
    }
    s.top1 += r.top1 ? 1 : 0;
    s.top5_overlap += r.top5_overlap;
    s.top20_overlap += r.top20_overlap;
    for (double e : r.rel) {
      s.max_rel_err = std::max(s.max_rel_err, e);
      rel_sum += e;
      ++rel_n;
    }
    s.max_abs_logprob = std::max(s.max_abs_logprob, r.max_abs_logprob);
    s.kl_mean += r.kl;
    s.kl_max = std::max(s.kl_max, r.kl);
  }
  const double n = static_cast<double>(rows.size());
  s.top1 /= n;
  s.top5_overlap /= n;
  s.top20_overlap /= n;
  s.kl_mean /= n;
  s.mean_rel_err = rel_n ? rel_sum / static_cast<double>(rel_n) : 0;
  if (all_have_logits && all.ids > 0) {
    s.max_abs_logit_diff = all.max_abs;
    s.mean_abs_logit_diff = all.sum_abs / static_cast<double>(all.ids);
    // All-zero reference logits (a degenerate row) leave the ratio undefined unless Δ is 0 too.
    s.logit_rel_err = all.sum_abs_ref > 0 ? all.sum_abs / all.sum_abs_ref
                      : all.sum_abs > 0   ? std::numeric_limits<double>::infinity()
                                          : 0.0;
  }
  return s;
}

std::vector<std::string> CheckLogitsBounds(const LogitsSummary& s, const LogitsBounds& b) {
  std::vector<std::string> fails;
  if (s.rows == 0) {
    if (b.any()) fails.push_back("no prompts compared");
    return fails;
  }
  // `!(x >= bound)` so that a NaN metric fails rather than slipping through.
  if (b.min_top1 && !(s.top1 >= *b.min_top1))
    fails.push_back(fmt::format("top-1 agreement {:.4f} < {}", s.top1, *b.min_top1));
  if (b.min_top5_overlap && !(s.top5_overlap >= *b.min_top5_overlap))
    fails.push_back(fmt::format("top-5 overlap {:.4f} < {}", s.top5_overlap, *b.min_top5_overlap));
  if (b.min_top20_overlap && !(s.top20_overlap >= *b.min_top20_overlap))
    fails.push_back(fmt::format("top-20 overlap {:.4f} < {}", s.top20_overlap, *b.min_top20_overlap));
  if (b.max_rel_err && !(s.max_rel_err <= *b.max_rel_err))
    fails.push_back(fmt::format("max relative error {:.4g} > {}", s.max_rel_err, *b.max_rel_err));
  if (b.max_mean_rel_err && !(s.mean_rel_err <= *b.max_mean_rel_err))
    fails.push_back(
        fmt::format("mean relative error {:.4g} > {}", s.mean_rel_err, *b.max_mean_rel_err));
  if (b.max_kl && !(s.kl_max <= *b.max_kl))
    fails.push_back(fmt::format("KL divergence (max) {:.4g} > {}", s.kl_max, *b.max_kl));
  if (b.max_logit_diff && !s.max_abs_logit_diff) {
    fails.push_back(
        "max logit diff: not known, the reference has no logsumexp (dump it with `cpmserve eval "
        "dump` or scripts/hf_reference_dump.py)");
  } else if (b.max_logit_diff && !(*s.max_abs_logit_diff <= *b.max_logit_diff)) {
    fails.push_back(
        fmt::format("max logit diff {:.4g} > {}", *s.max_abs_logit_diff, *b.max_logit_diff));
  }
  return fails;
}

}  // namespace cpm
