#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>

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

// The draw's walk: tokens offered in turn with their weights; the first at which the running
// weight passes r is the draw, else the last one offered (rounding carried r past their sum).
struct DrawWalk {
  double r;
  double acc = 0.0;
  int64_t last = -1;  // the last token offered; -1 if none
  bool Offer(int64_t i, float w) {  // true: i is the draw
    acc += w;
    last = i;
    return r < acc;
  }
};

// The walk within slice b: its tokens that `keeps`, in index order, from mass `r` into it.
template <typename Keeps>
int64_t DrawInSlice(const int16_t* slices, int64_t n, int16_t b, const float* w, double r,
                    Keeps keeps) {
  DrawWalk walk{r};
  for (int64_t i = kernels::FindEqual(slices, 0, n, b); i < n;
       i = kernels::FindEqual(slices, i + 1, n, b)) {
    if (keeps(i) && walk.Offer(i, w[i])) break;
  }
  return walk.last;
}

// A draw from the tokens that min-p and top-p keep of the whole vocabulary, when that is more
// than the first candidates. Top-p's set is the shortest prefix, in rank order, whose mass
// reaches top_p: a histogram of the mass over kMassSlices equal slices of the logits' top range
// finds the slice where it ends (every token above that slice is in, every one below out); only
// that slice's tokens are ordered (PrefixByMass). The draw then walks the set's slices from the
// top by their kept mass to the one it lands in, and only that slice's tokens in index order
// (the same distribution as a walk over the sorted prefix). Each token's slice is computed once,
// on 8 lanes (kernels::MassSlices), and a slice's tokens are found by a SIMD search.
// 73448 logits of a nearly flat distribution (normal, σ 0.001-1; dummy weights make such):
// 1.37-1.46 ms a token with halving selections over the whole vocabulary → 0.46-0.51 ms with
// the histogram → 0.42 with each slice kept (thirty-third session) → 0.14-0.15 with the slices
// computed on 8 lanes and the draw's walk over slices, not tokens (thirty-fourth; σ 0.5 rows
// from memory, whole SampleToken: 0.43-0.46 ms before it in the same minutes).
// w: the tokens' unnormalised probabilities, e^((x − mx)·t) (ExpsOf).
int32_t SampleSelected(const float* x, int64_t n, const float* w, float mx, float t,
                       const SamplingParams& p, Rng& rng) {
  // Without a finite largest logit, one slice holds all the finite ones.
  const bool finite = std::isfinite(mx);
  const float lo = finite ? std::max(mx - kMassRange / t, kernels::MinFinite(x, n)) : 0.0f;
  const float scale = finite && mx > lo ? kMassSlices / (mx - lo) : 0.0f;
  thread_local std::vector<int16_t> slices;
  slices.resize(static_cast<size_t>(n));
  kernels::MassSlices(x, n, lo, scale, kMassSlices, slices.data());
  // Slice b's mass at b + 1 (b = -1 for -inf ... kMassSlices for +inf), and of it what min-p's
  // floor keeps (the largest w is 1).
  thread_local std::vector<double> mass(kMassSlices + 2), floored(kMassSlices + 2);
  std::fill(mass.begin(), mass.end(), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (slices[i] != kernels::kNanSlice) mass[slices[i] + 1] += w[i];
  }
  if (p.min_p > 0.0f) {
    std::fill(floored.begin(), floored.end(), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      if (slices[i] != kernels::kNanSlice && w[i] >= p.min_p) floored[slices[i] + 1] += w[i];
    }
  }
  const std::vector<double>& kept_mass = p.min_p > 0.0f ? floored : mass;
  int boundary = -2;  // every slice above it is in the set (with -2, every token)
  thread_local std::vector<uint64_t> edge;  // the boundary slice's tokens, its set's first
  edge.clear();
  size_t edge_end = 0;
  if (p.top_p < 1.0f) {
    // Top-p's share of what min-p kept (vLLM renormalises after min-p's floor): the floored
    // tokens are a prefix in rank order, so the boundary's set below ends within them.
    double whole = 0.0;
    for (const double m : kept_mass) whole += m;
    const double need = p.top_p * whole;
    double above = 0.0;  // the mass of the slices above the boundary
    for (boundary = kMassSlices; boundary >= -1 && above + kept_mass[boundary + 1] < need;
         --boundary) {
      above += kept_mass[boundary + 1];
    }
    if (boundary >= -1) {  // else rounding left need out of reach: every token
      const int16_t b = static_cast<int16_t>(boundary);
      for (int64_t i = kernels::FindEqual(slices.data(), 0, n, b); i < n;
           i = kernels::FindEqual(slices.data(), i + 1, n, b)) {
        edge.push_back(kernels::RankKey(x[i], i));
      }
      edge_end = PrefixByMass(edge, w, need - above);
    }
  }
  const auto floor_keeps = [&](int64_t i) { return w[i] >= p.min_p; };
  double total = 0.0;  // the kept mass: the slices above the boundary, then its set
  for (int b = kMassSlices; b > boundary; --b) total += kept_mass[b + 1];
  for (size_t j = 0; j < edge_end; ++j) {
    const int32_t i = kernels::RankKeyIndex(edge[j]);
    if (floor_keeps(i)) total += w[i];
  }
  if (!(total > 0.0)) return static_cast<int32_t>(kernels::ArgMax(x, n));  // +inf or NaN logits
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng);
  int64_t drawn = -1;
  int last_slice = boundary;  // the lowest slice above the boundary that keeps any mass
  for (int b = kMassSlices; b > boundary; --b) {
    const double m = kept_mass[b + 1];
    if (m <= 0.0) continue;
    if (r < m) {
      drawn = DrawInSlice(slices.data(), n, static_cast<int16_t>(b), w, r, floor_keeps);
      break;
    }
    r -= m;
    last_slice = b;
  }
  if (drawn < 0) {  // else the boundary's set, in its array's order
    DrawWalk walk{r};
    for (size_t j = 0; j < edge_end; ++j) {
      const int32_t i = kernels::RankKeyIndex(edge[j]);
      if (floor_keeps(i) && walk.Offer(i, w[i])) break;
    }
    drawn = walk.last;
  }
  if (drawn < 0 && last_slice > boundary) {  // rounding carried r past the kept mass
    drawn = DrawInSlice(slices.data(), n, static_cast<int16_t>(last_slice), w, INFINITY,
                        floor_keeps);
  }
  return static_cast<int32_t>(drawn >= 0 ? drawn : kernels::ArgMax(x, n));
}

// A draw from softmax(x·t) over the whole vocabulary: the same distribution as a draw over the
// sorted candidates, without sorting them (at 73448 entries 0.1 ms against the sort's 14 ms,
// per sampled token). Each block of kDrawBlock tokens' weights are computed into a per-thread
// buffer that stays in L1, for their sum alone; the draw walks the blocks by those sums, then
// computes its block's weights again (the same values: the same kernel on the same block) and
// walks them. Where it wrote the whole vocabulary's weights and added every one of them after
// the other (a dependent f64 chain): 73448 logits at temperature 0.7 50-60 → 19-21 µs a token,
// MiniCPM-V-4.6's 248320 (which its generation config samples so) 169-172 → 66-75 (thirty-
// fourth session, interleaved). A block's sum is ExpScaled's f32 one; should rounding leave r
// past the walk's f64 sum of the same weights, the block's last token is the draw.
constexpr int64_t kDrawBlock = 1024;
int32_t SampleAll(const float* x, int64_t n, float t, Rng& rng) {
  const float mx = kernels::Max(x, n);
  // A +inf logit takes all the mass (the SIMD exps give it and NaNs the smallest normal weight,
  // not NaN): the first one is the draw.
  if (mx == INFINITY) return static_cast<int32_t>(kernels::ArgMax(x, n));
  thread_local std::vector<float> w(kDrawBlock);
  thread_local std::vector<double> block_mass;
  block_mass.resize(static_cast<size_t>((n + kDrawBlock - 1) / kDrawBlock));
  const auto block_weights = [&](size_t b) {  // into w; returns their sum
    const int64_t b0 = static_cast<int64_t>(b) * kDrawBlock;
    return kernels::ExpScaled(x + b0, std::min(kDrawBlock, n - b0), mx, t, w.data());
  };
  double total = 0.0;
  for (size_t b = 0; b < block_mass.size(); ++b) total += block_mass[b] = block_weights(b);
  if (!(total > 0.0) || !std::isfinite(total)) return static_cast<int32_t>(kernels::ArgMax(x, n));
  std::uniform_real_distribution<double> u(0.0, total);
  double r = u(rng);
  // The block the draw lands in: the last one with any mass if rounding carries r past them.
  int64_t block = -1;
  bool landed = false;
  for (size_t b = 0; b < block_mass.size() && !landed; ++b) {
    if (block_mass[b] <= 0.0) continue;
    block = static_cast<int64_t>(b);
    landed = r < block_mass[b];
    if (!landed) r -= block_mass[b];
  }
  if (block < 0) return static_cast<int32_t>(kernels::ArgMax(x, n));
  if (!landed) r = INFINITY;
  block_weights(static_cast<size_t>(block));
  const int64_t b0 = block * kDrawBlock, len = std::min(kDrawBlock, n - b0);
  DrawWalk walk{r};  // over the tokens that can be drawn (not one of weight 0 or NaN)
  for (int64_t i = 0; i < len; ++i) {
    if (w[i] != 0.0f && !std::isnan(x[b0 + i]) && walk.Offer(b0 + i, w[i])) break;
  }
  return static_cast<int32_t>(walk.last >= 0 ? walk.last : kernels::ArgMax(x, n));
}

}  // namespace

float LogSoftmax(const float* logits, int64_t n, float* out) {
  return kernels::LogSoftmax(logits, n, out);
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
  const bool repetition = p.repetition_penalty != 1.0f;
  if (p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && !repetition) return;
  // Each distinct token once, from per-thread tables that the same list clears again: the work
  // is the prompt's and the output's length, not the vocabulary's (a 1000-token prompt with 200
  // outputs, 73448 logits: 47-50 µs a token with a bit set over the vocabulary and a hash map
  // of counts, 6-7 µs so).
  thread_local std::vector<uint8_t> seen;
  thread_local std::vector<int32_t> output_count;
  thread_local std::vector<int32_t> distinct;
  if (static_cast<int64_t>(seen.size()) < n) {
    seen.resize(static_cast<size_t>(n), 0);
    output_count.resize(static_cast<size_t>(n), 0);
  }
  distinct.clear();
  const auto mark = [&](int32_t t) {
    if (t < 0 || t >= n) return false;
    if (!seen[t]) {
      seen[t] = 1;
      distinct.push_back(t);
    }
    return true;
  };
  for (int32_t t : output_tokens) {
    if (mark(t)) ++output_count[t];
  }
  if (repetition) {
    for (int32_t t : prompt_tokens) mark(t);
  }
  for (int32_t t : distinct) {
    // vLLM's order: the repetition penalty (prompt and output tokens), then frequency and
    // presence (output tokens).
    if (repetition) {
      logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty
                                : logits[t] * p.repetition_penalty;
    }
    if (output_count[t] > 0) {
      logits[t] -= p.frequency_penalty * static_cast<float>(output_count[t]) + p.presence_penalty;
    }
    seen[t] = 0;
    output_count[t] = 0;
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
  const VocabExps exps = k < n ? VocabExps{nullptr, 0.0} : ExpsOf(logits, n, mx, inv_t);
  // Top-p alone: each candidate weighs at most the largest logit's 1, so when the first
  // candidates' count is below top_p × the vocabulary's mass, top-p's set cannot end within
  // them (EndsWithin would say so after sorting them). Flat rows, as dummy weights make, skip
  // the top-k there: the same draws; kernels_bench BM_SampleToken/flat:1 101-106 → 82-84 µs.
  if (k == n && p.min_p <= 0.0f && kFirstCandidates < p.top_p * exps.sum) {
    return SampleSelected(logits, n, exps.w, mx, inv_t, p, rng);
  }
  // vLLM's top-k masks the logits below the k-th only, so the tokens tied with it stay
  // candidates (top_k 1 excepted: newer vLLM's argmax, the lowest index of a tie): one more
  // candidate shows whether the k-th has a tie to gather (a finite one: -inf weighs nothing).
  const bool ties = k > 1 && k < n;
  std::vector<std::pair<int32_t, float>> cand =
      TopK(logits, n, ties ? k + 1 : k < n ? k : kFirstCandidates);
  if (cand.empty()) return 0;  // every logit NaN (a broken model): any token, no crash
  if (ties && static_cast<int64_t>(cand.size()) > k) {
    const float kth = cand[k - 1].second;
    if (cand[k].second == kth && std::isfinite(kth)) {
      cand = TopK(logits, n, CountAtLeast(logits, n, kth));
    } else {
      cand.resize(static_cast<size_t>(k));
    }
  }
  std::vector<double> probs(cand.size());
  double sum = 0.0;
  for (size_t i = 0; i < cand.size(); ++i) {
    sum += probs[i] = std::exp(static_cast<double>((cand[i].second - mx) * inv_t));
  }
  const double norm = k < n ? sum : exps.sum;
  for (double& q : probs) q /= norm;
  if (k == n && static_cast<int64_t>(cand.size()) < n && !EndsWithin(probs, sum / norm, p)) {
    return SampleSelected(logits, n, exps.w, mx, inv_t, p, rng);
  }
  size_t keep = probs.size();
  double kept = 1.0;  // the mass top-p takes its share of (vLLM renormalises after min-p)
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * probs[0];
    keep = std::find_if(probs.begin(), probs.end(), [&](double q) { return q < floor; }) -
           probs.begin();
    if (keep < probs.size() || k < n) {
      kept = 0.0;
      for (size_t i = 0; i < keep; ++i) kept += probs[i];
    } else {
      // Every candidate is above the floor (their mass reached top_p): the floor lies beyond
      // them, among the whole vocabulary's weights.
      kept = 0.0;
      for (int64_t i = 0; i < n; ++i) kept += exps.w[i] >= p.min_p ? exps.w[i] : 0.0f;
      kept /= exps.sum;
    }
  }
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t i = 0;
    // Keep the smallest prefix whose mass reaches top_p of the kept mass (at least one token).
    for (; i < keep; ++i) {
      cum += probs[i];
      if (cum >= p.top_p * kept) {
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
