#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "kernels/sampling_ops.h"

namespace cpm {
namespace {

// Candidates sorted first when min-p or top-p filter the whole vocabulary: a trained model's
// kept prefix usually ends within them; otherwise the whole vocabulary is selected from.
constexpr int64_t kFirstCandidates = 256;

// w_i = exp((x_i − mx)·t) over the vocabulary (mx = max x: unnormalised probabilities),
// vectorised into a per-thread buffer, and their sum.
struct VocabExps {
  const float* w;
  double sum;
};
VocabExps ExpsOf(const float* x, int64_t n, float mx, float t) {
  thread_local std::vector<float> w;
  w.resize(n);
  const double sum = kernels::ExpScaled(x, n, mx, t, w.data());
  return {w.data(), sum};
}

// Whether the kept prefix of sorted candidates `probs` (normalised; together `mass` of the
// distribution) ends within them: min-p's floor or top-p's mass is reached before their end.
bool EndsWithin(const std::vector<double>& probs, double mass, const SamplingParams& p) {
  if (p.min_p > 0.0f && probs.back() < p.min_p * probs[0]) return true;
  return p.top_p < 1.0f && mass >= p.top_p;
}

// The end of the shortest prefix, in rank order, of `keys` (rank keys of tokens of weight w)
// whose weight reaches `need` (all of them if none does): halving with a selection each round
// until 64 are left, then sorting those, O(n) against a sort's O(n log n). keys[0, end) holds the
// prefix afterwards, unsorted but for its last part.
size_t PrefixByMass(std::vector<uint64_t>& keys, const float* w, double need) {
  const auto mass = [&](size_t b, size_t e) {
    double m = 0.0;
    for (size_t i = b; i < e; ++i) m += w[kernels::RankKeyIndex(keys[i])];
    return m;
  };
  size_t lo = 0, hi = keys.size();  // the prefix's last token lies in [lo, hi)
  while (hi - lo > 64) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(keys.begin() + lo, keys.begin() + mid, keys.begin() + hi);
    const double left = mass(lo, mid);
    if (left >= need) {
      hi = mid;
    } else {
      need -= left;
      lo = mid;
    }
  }
  std::sort(keys.begin() + lo, keys.begin() + hi);
  size_t end = lo;
  while (end < hi) {
    need -= w[kernels::RankKeyIndex(keys[end++])];
    if (need <= 0.0) break;
  }
  return end;
}

// Slices of the logits' top range in which SampleSelected finds where top-p's set ends, and
// that range: from the smallest finite logit, or from kMassRange · temperature below the
// largest, where a token's weight falls to e^-30 (~1e-13) of the largest's, if that is higher
// (every token below it then shares the lowest slice).
constexpr int kMassSlices = 4096;
constexpr float kMassRange = 30.0f;

// A draw from the tokens that min-p and top-p keep of the whole vocabulary, when that is more
// than the first candidates. Top-p's set is the shortest prefix, in rank order, whose mass
// reaches top_p: a histogram of the mass over kMassSlices equal slices of the logits' top range
// finds the slice where it ends (every token above that slice is in, every one below out); only
// that slice's tokens are ordered (PrefixByMass), and the draw then walks the vocabulary in
// index order over the set's tokens that min-p's floor keeps (the same distribution as over
// the sorted prefix). 73448 logits of a nearly flat distribution (normal, σ 0.001-1; dummy
// weights make such): 1.37-1.46 ms a token → 0.46-0.51 ms, where halving selections over the
// whole vocabulary took the 1.4 (the histogram's pass ~0.15 ms of it); each token's slice kept
// from the histogram's pass for the others, which computed it again: σ 0.5, 0.67-0.80 ms →
// 0.42 on a slower minute (thirty-third session), the same tokens drawn.
// w: the tokens' unnormalised probabilities, e^((x − mx)·t) (ExpsOf).
int32_t SampleSelected(const float* x, int64_t n, const float* w, float mx, float t,
                       const SamplingParams& p, Rng& rng) {
  // The slice of a non-NaN logit: -1 for -inf (no weight), kMassSlices for +inf. Without a
  // finite largest logit, one slice holds all the finite ones.
  const bool finite = std::isfinite(mx);
  const float lo = finite ? std::max(mx - kMassRange / t, kernels::MinFinite(x, n)) : 0.0f;
  const float scale = finite && mx > lo ? kMassSlices / (mx - lo) : 0.0f;
  const auto slice = [lo, scale](float v) -> int {
    if (v == -INFINITY) return -1;
    if (v == INFINITY) return kMassSlices;
    return std::clamp(static_cast<int>((v - lo) * scale), 0, kMassSlices - 1);
  };
  // Each token's slice, once (the passes below read it rather than compute it again); a NaN's
  // is kNan, in no slice.
  constexpr int16_t kNan = -2;
  thread_local std::vector<int16_t> slices;
  slices.resize(static_cast<size_t>(n));
  thread_local std::vector<double> mass(kMassSlices + 2);  // slice b's at b + 1
  std::fill(mass.begin(), mass.end(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int16_t b = std::isnan(x[i]) ? kNan : static_cast<int16_t>(slice(x[i]));
    slices[i] = b;
    if (b != kNan) mass[b + 1] += w[i];
  }
  double above = 0.0;  // the mass of the slices above the boundary
  for (const double m : mass) above += m;
  int boundary = -2;    // every slice above it is in the set (with -2, every token)
  uint64_t last = 0;    // the boundary slice's tokens in the set: rank keys up to this one
  if (p.top_p < 1.0f) {
    const double need = p.top_p * above;
    above = 0.0;
    for (boundary = kMassSlices; boundary >= -1 && above + mass[boundary + 1] < need; --boundary) {
      above += mass[boundary + 1];
    }
    if (boundary >= -1) {  // else rounding left need out of reach: every token
      thread_local std::vector<uint64_t> edge;
      edge.clear();
      for (int64_t i = 0; i < n; ++i) {
        if (slices[i] == boundary) edge.push_back(kernels::RankKey(x[i], i));
      }
      const size_t end = PrefixByMass(edge, w, need - above);
      last = *std::max_element(edge.begin(), edge.begin() + end);
      for (size_t j = 0; j < end; ++j) above += w[kernels::RankKeyIndex(edge[j])];
    }
  }
  const auto kept = [&](int64_t i) {
    const int b = slices[i];
    if (b == kNan || w[i] < p.min_p) return false;  // min-p: the largest w is 1
    return b > boundary || (b == boundary && kernels::RankKey(x[i], i) <= last);
  };
  double total = above;  // the kept mass
  if (p.min_p > 0.0f) {
    total = 0.0;
    for (int64_t i = 0; i < n; ++i) total += kept(i) ? w[i] : 0.0;
  }
  if (!(total > 0.0)) return static_cast<int32_t>(kernels::ArgMax(x, n));  // +inf or NaN logits
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng), acc = 0.0;
  int64_t drawn = -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!kept(i)) continue;
    acc += w[i];
    drawn = i;
    if (r < acc) break;
  }
  return static_cast<int32_t>(drawn >= 0 ? drawn : kernels::ArgMax(x, n));
}

// A draw from softmax(x·t) over the whole vocabulary, in index order: the same distribution as
// a draw over the sorted candidates, without sorting them (at 73448 entries 0.1 ms against the
// sort's 14 ms, per sampled token).
int32_t SampleAll(const float* x, int64_t n, float t, Rng& rng) {
  const auto [w, mass] = ExpsOf(x, n, kernels::Max(x, n), t);
  std::uniform_real_distribution<double> u(0.0, mass);
  double r = u(rng), acc = 0.0;
  int64_t last = 0;  // the last token that can be drawn (a token of probability 0 cannot)
  for (int64_t i = 0; i < n; ++i) {
    if (w[i] == 0.0f) continue;
    acc += w[i];
    last = i;
    if (r < acc) return static_cast<int32_t>(i);
  }
  return static_cast<int32_t>(last);
}

}  // namespace

void LogSoftmax(const float* logits, int64_t n, float* out) {
  kernels::LogSoftmax(logits, n, out);
}

int64_t CountAtLeast(const float* values, int64_t n, float threshold) {
  return kernels::CountAtLeast(values, n, threshold);
}

std::vector<std::pair<int32_t, float>> TopK(const float* values, int64_t n, int64_t k) {
  // kernels::TopK gathers its candidates above a threshold rising to the k-th value: O(n) plus
  // a selection per 4k candidates, faster at every k than selecting over all n rank keys (73448
  // normal logits: k = 1000 124 µs against 832, k = n 4.7 ms against 10.3).
  k = std::min(k, n);
  std::vector<int32_t> idx(std::max<int64_t>(k, 0));
  std::vector<float> val(idx.size());
  k = kernels::TopK(values, n, k, idx.data(), val.data());
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) out.emplace_back(idx[i], val[i]);
  return out;
}

void ApplyPenalties(float* logits, int64_t n, const SamplingParams& p,
                    std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens) {
  if (p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && p.repetition_penalty == 1.0f)
    return;
  std::unordered_map<int32_t, int32_t> out_counts;
  for (int32_t t : output_tokens) ++out_counts[t];
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(n, false);
    for (int32_t t : prompt_tokens) seen[t] = true;
    for (const auto& [t, c] : out_counts) seen[t] = true;
    for (int64_t i = 0; i < n; ++i) {
      if (!seen[i]) continue;
      logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty : logits[i] * p.repetition_penalty;
    }
  }
  for (const auto& [t, c] : out_counts) {
    logits[t] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
  }
}

int32_t SampleToken(const float* logits, int64_t n, const SamplingParams& p, Rng& rng) {
  // Greedy: the lowest index of the largest logit (at 73448 entries 0.25 ms with
  // std::max_element, 3 µs with the two SIMD passes over a row in cache).
  if (p.greedy()) return static_cast<int32_t>(kernels::ArgMax(logits, n));
  const float inv_t = 1.0f / p.temperature;
  const int64_t k = (p.top_k > 0 && p.top_k < n) ? p.top_k : n;
  if (k == n && p.top_p >= 1.0f && p.min_p <= 0.0f) return SampleAll(logits, n, inv_t, rng);
  // Candidates sorted by logit (descending), then filtered by top-k, min-p and top-p. Without
  // top-k: the first candidates if the kept prefix ends within them, with probabilities
  // normalised over the whole vocabulary, else a selection over all of it (SampleSelected).
  const float mx = kernels::Max(logits, n);
  std::vector<std::pair<int32_t, float>> cand = TopK(logits, n, k < n ? k : kFirstCandidates);
  if (cand.empty()) return 0;  // every logit NaN (a broken model): any token, no crash
  std::vector<double> probs(cand.size());
  double sum = 0.0;
  for (size_t i = 0; i < cand.size(); ++i) {
    sum += probs[i] = std::exp(static_cast<double>((cand[i].second - mx) * inv_t));
  }
  const VocabExps exps = k < n ? VocabExps{nullptr, sum} : ExpsOf(logits, n, mx, inv_t);
  const double norm = exps.sum;
  for (double& q : probs) q /= norm;
  if (k == n && static_cast<int64_t>(cand.size()) < n && !EndsWithin(probs, sum / norm, p)) {
    return SampleSelected(logits, n, exps.w, mx, inv_t, p, rng);
  }
  size_t keep = probs.size();
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * probs[0];
    keep = std::find_if(probs.begin(), probs.end(), [&](double q) { return q < floor; }) -
           probs.begin();
  }
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t i = 0;
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    for (; i < keep; ++i) {
      cum += probs[i];
      if (cum >= p.top_p) {
        ++i;
        break;
      }
    }
    keep = std::max<size_t>(1, std::min(keep, i));
  }
  keep = std::max<size_t>(1, keep);
  double mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += probs[i];
  std::uniform_real_distribution<double> u(0.0, mass);
  double r = u(rng), acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return cand[i].first;
  }
  return cand[keep - 1].first;
}

}  // namespace cpm
