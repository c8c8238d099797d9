// Sampling ops: dispatch to AVX2 where available (ExpScaled and SumExp to AVX-512 where that is,
// with the same results), scalar references otherwise. Top-k looks only at elements above a
// threshold that rises towards the k-th value (a SIMD scan).
#include "kernels/sampling_ops.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"

namespace cpm::kernels {
namespace {

bool Simd() { return ActiveIsa() != Isa::kScalar; }

double SumExp(const float* x, int64_t n, float shift) {
  if (ActiveIsa() == Isa::kAvx512) return SumExpAvx512(x, n, shift);
  if (Simd()) return SumExpAvx2(x, n, shift);
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) s += std::exp(x[i] - shift);
  return s;
}

int64_t FindGreater(const float* x, int64_t begin, int64_t n, float threshold) {
  if (Simd()) return FindGreaterAvx2(x, begin, n, threshold);
  for (int64_t i = begin; i < n; ++i) {
    if (x[i] > threshold) return i;
  }
  return n;
}

}  // namespace

float Max(const float* x, int64_t n) {
  if (Simd()) return MaxAvx2(x, n);
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float MinFinite(const float* x, int64_t n) {
  if (Simd()) return MinFiniteAvx2(x, n);
  float m = INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::isfinite(x[i]) && x[i] < m ? x[i] : m;
  return m;
}

int64_t ArgMax(const float* x, int64_t n) {
  const float mx = Max(x, n);
  // The first element ≥ the largest float below mx, which is mx itself.
  const int64_t i = FindGreater(x, 0, n, std::nextafter(mx, -INFINITY));
  if (i < n) return i;
  for (int64_t j = 0; j < n; ++j) {  // mx = -inf: every element -inf or NaN
    if (x[j] == mx) return j;
  }
  return 0;
}

int64_t CountAtLeast(const float* x, int64_t n, float threshold) {
  if (Simd()) return CountAtLeastAvx2(x, n, threshold);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += x[i] >= threshold;
  return count;
}

void MassSlices(const float* x, int64_t n, float lo, float scale, int count, int16_t* out) {
  if (Simd()) return MassSlicesAvx2(x, n, lo, scale, count, out);
  const float top = static_cast<float>(count - 1);
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (std::isnan(v)) {
      out[i] = kNanSlice;
    } else if (std::isinf(v)) {
      out[i] = static_cast<int16_t>(v < 0.0f ? -1 : count);
    } else {
      // vmaxps/vminps's operand order: a NaN product (0 · inf) becomes 0.
      float f = (v - lo) * scale;
      f = f > 0.0f ? f : 0.0f;
      f = f < top ? f : top;
      out[i] = static_cast<int16_t>(f);
    }
  }
}

int64_t FindEqual(const int16_t* x, int64_t begin, int64_t n, int16_t v) {
  if (Simd()) return FindEqualAvx2(x, begin, n, v);
  for (int64_t i = begin; i < n; ++i) {
    if (x[i] == v) return i;
  }
  return n;
}

float LogSoftmax(const float* x, int64_t n, float* out) {
  const float mx = Max(x, n);
  const float log_z = static_cast<float>(std::log(SumExp(x, n, mx)));
  const float shift = mx + log_z;
  if (Simd()) {
    SubAvx2(x, n, shift, out);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] - shift;
  }
  return shift;
}

float ExpScaled(const float* x, int64_t n, float shift, float scale, float* out) {
  if (ActiveIsa() == Isa::kAvx512) return ExpScaledAvx512(x, n, shift, scale, out);
  if (Simd()) return ExpScaledAvx2(x, n, shift, scale, out);
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += out[i] = std::exp((x[i] - shift) * scale);
  return s;
}

void Softmax(const float* x, int64_t n, float* out) {
  const float mx = Max(x, n);
  const float inv = static_cast<float>(1.0 / SumExp(x, n, mx));
  for (int64_t i = 0; i < n; ++i) out[i] = std::exp(x[i] - mx) * inv;
}

namespace {

// A first threshold for TopK from a strided sample of x: the j-th largest of kSample values,
// j set so that ~2k + 3·n/kSample elements of x lie above it on average. Then the scan pushes
// a few hundred candidates, where from -inf it pushed the first 4k elements one FindGreater
// call each and pruned them over and over as t rose. -inf where x is too short to sample or k
// too large a share of it.
float SampledThreshold(const float* x, int64_t n, int64_t k) {
  constexpr int64_t kSample = 1024;
  if (n < 8 * kSample || 8 * k > n) return -INFINITY;
  thread_local std::vector<float> sample;
  sample.clear();
  const int64_t stride = n / kSample;
  for (int64_t i = 0; i < kSample; ++i) {
    const float v = x[i * stride];
    if (!std::isnan(v)) sample.push_back(v);
  }
  const int64_t j = 2 * k * kSample / n + 3;
  if (j > static_cast<int64_t>(sample.size())) return -INFINITY;
  std::nth_element(sample.begin(), sample.begin() + (j - 1), sample.end(), std::greater<float>());
  return sample[j - 1];
}

}  // namespace

int64_t TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) {
  k = std::min(k, n);
  if (k <= 0) return 0;
  // Candidates above a threshold t gather unsorted, as rank keys; when 4k have, the first k in
  // TopK's order are kept and t becomes the k-th's value: no later element that is not above it
  // can enter (an equal one ranks after it by index). Each candidate costs O(1) where a sorted
  // buffer moved ~k/2 entries per insertion: 73448 logits, k = 256 (top-p's candidates),
  // ~110 µs → ~25 µs. t starts at a sampled guess (SampledThreshold): if at least k lie above
  // it they hold the top k (anything else is not above it); if not, the scan runs again from
  // -inf (rarely: ~0.3% of rows for k = 20 or 256 at 73448 logits, by a binomial estimate).
  thread_local std::vector<uint64_t> keys;
  const size_t cap = 4 * static_cast<size_t>(k);
  const auto keep_first_k = [&] {
    std::nth_element(keys.begin(), keys.begin() + (k - 1), keys.end());
    keys.resize(static_cast<size_t>(k));
  };
  const auto scan = [&](float t) {  // NaNs are never above t, nor -infs
    keys.clear();
    for (int64_t i = FindGreater(x, 0, n, t); i < n; i = FindGreater(x, i + 1, n, t)) {
      keys.push_back(RankKey(x[i], i));
      if (keys.size() == cap) {
        keep_first_k();
        t = x[RankKeyIndex(keys[k - 1])];
      }
    }
  };
  const float guess = SampledThreshold(x, n, k);
  scan(guess);
  if (static_cast<int64_t>(keys.size()) < k && guess != -INFINITY) scan(-INFINITY);
  // Fewer than k above -inf: the -infs rank next, the lowest indices first.
  for (int64_t i = 0; static_cast<int64_t>(keys.size()) < k && i < n; ++i) {
    if (x[i] == -INFINITY) keys.push_back(RankKey(x[i], i));
  }
  if (static_cast<int64_t>(keys.size()) > k) keep_first_k();
  std::sort(keys.begin(), keys.end());
  for (size_t j = 0; j < keys.size(); ++j) {
    indices[j] = RankKeyIndex(keys[j]);
    values[j] = x[indices[j]];
  }
  return static_cast<int64_t>(keys.size());
}

}  // namespace cpm::kernels
