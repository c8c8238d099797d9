// Agreement of one next-token distribution with a reference's top-K dump, and the aggregate over
// prompts: the seed document's table (top-1, top-5/top-20 overlap, relative error over the
// reference's top-20 probabilities, KL), and where both sides know their log-sum-exp the raw
// logits' differences of the porting guide's step 3 (max / mean |Δlogit|, relative error).
// Definitions follow tests/reference/compare_logprobs.py.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace cpm {

// |logit_eng − logit_ref| over the reference's top-K ids, logit = logprob + logsumexp on each
// side: the porting guide's "Max logit diff" / "Mean logit diff" / "Relative error" (mean |Δ|
// over mean |logit_ref|), restricted to the ids a top-K dump holds (all of them when K = vocab).
struct LogitDiff {
  double max_abs = 0;      // max |Δlogit|
  double sum_abs = 0;      // Σ |Δlogit|
  double sum_abs_ref = 0;  // Σ |logit_ref|
  int64_t ids = 0;         // how many ids the sums run over
};

struct RowMetrics {
  bool top1 = false;           // argmax of the engine row == the reference's first id
  double top5_overlap = 0;     // |ref top-5 ∩ engine top-5| / 5
  double top20_overlap = 0;    // |ref top-20 ∩ engine top-20| / 20
  std::vector<double> rel;     // |p_eng - p_ref| / p_ref for each of the reference's top-20 ids
  double max_abs_logprob = 0;  // max |lp_eng - lp_ref| over the reference's top-20 ids
  // KL(ref || eng) over the reference's top-K ids plus one bucket for all other tokens (see
  // ComputeRowMetrics). Equals the full-vocabulary KL when K = vocab, a lower bound otherwise.
  double kl = 0;
  std::optional<LogitDiff> logit_diff;  // when both log-sum-exps are known
  int32_t ref_top1 = -1;
  int32_t eng_top1 = -1;
};

// `ref_top`: the reference's top-K (id, log-prob), best first, K >= 1. `eng_logprobs`: the
// engine's full log_softmax row. Sizes below 5 / 20 shrink to K (or the vocabulary).
// `ref_logsumexp` / `eng_logsumexp`: each row's raw-logit log-sum-exp, for `logit_diff`.
//
// KL from a top-K dump: with S the reference's top-K ids, P_S = Σ_S p_ref and Q_S = Σ_S p_eng,
//   KL = Σ_{i∈S} p_ref(i) (lp_ref(i) − lp_eng(i)) + (1−P_S) log((1−P_S) / (1−Q_S)),
// i.e. the exact KL of both distributions coarsened to S ∪ {rest}. 1−P is computed as
// −expm1(logsumexp(lp_S)) so that tiny tails keep their precision. A reference rest mass under
// 1e-6 is float32 rounding noise (K ≈ vocab) and gets no bucket; the engine's rest is floored
// at 1e-12 so a rounding-level zero yields a large but finite KL.
RowMetrics ComputeRowMetrics(std::span<const std::pair<int32_t, double>> ref_top,
                             std::span<const float> eng_logprobs,
                             std::optional<double> ref_logsumexp = std::nullopt,
                             std::optional<double> eng_logsumexp = std::nullopt);

struct LogitsSummary {
  int64_t rows = 0;
  double top1 = 0;            // fraction of prompts whose top-1 agrees
  double top5_overlap = 0;    // mean over prompts
  double top20_overlap = 0;   // mean over prompts
  double max_rel_err = 0;     // max over prompts and the reference's top-20 ids
  double mean_rel_err = 0;    // mean over all (prompt, top-20 id) pairs, as compare_logprobs.py
  double max_abs_logprob = 0;
  double kl_mean = 0;
  double kl_max = 0;
  // Raw-logit figures, set only when every row has its LogitDiff (the reference carries
  // `logsumexp`): max over all ids, mean over all (prompt, id) pairs, and Σ|Δ| / Σ|logit_ref|.
  std::optional<double> max_abs_logit_diff;
  std::optional<double> mean_abs_logit_diff;
  std::optional<double> logit_rel_err;
};

LogitsSummary SummarizeRows(std::span<const RowMetrics> rows);

// Optional bounds of `eval logits`; unset ones are not checked.
struct LogitsBounds {
  std::optional<double> min_top1;           // fraction, e.g. 1.0
  std::optional<double> min_top5_overlap;   // fraction (the seed's Top-5 一致性 row)
  std::optional<double> min_top20_overlap;  // fraction
  std::optional<double> max_rel_err;        // fraction, e.g. 0.01 for the seed's "< 1%"
  std::optional<double> max_mean_rel_err;
  std::optional<double> max_kl;             // checked against kl_max
  std::optional<double> max_logit_diff;     // checked against max_abs_logit_diff
  bool any() const {
    return min_top1 || min_top5_overlap || min_top20_overlap || max_rel_err || max_mean_rel_err ||
           max_kl || max_logit_diff;
  }
};

// One human-readable line per failed bound; empty when everything holds (or nothing is set).
std::vector<std::string> CheckLogitsBounds(const LogitsSummary& s, const LogitsBounds& b);

}  // namespace cpm
