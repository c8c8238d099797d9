// Sampling ops: dispatch to AVX2 where available, scalar references otherwise. Top-k keeps a
// small sorted buffer and only looks at elements above its current k-th value (a SIMD scan).
#include "kernels/sampling_ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"

namespace cpm::kernels {
namespace {

bool Simd() { return ActiveIsa() != Isa::kScalar; }

double SumExp(const float* x, int64_t n, float shift) {
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

int64_t TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values) {
  k = std::min(k, n);
  if (k <= 0) return 0;
  // Sorted descending buffer of (value, index); a new element enters only if it beats the
  // last entry strictly (equal values keep the earlier index, scanning forward).
  int64_t size = 0;
  int64_t i = 0;
  for (;;) {
    const float threshold = size < k ? -INFINITY : values[k - 1];
    i = size < k ? i : FindGreater(x, i, n, threshold);
    if (i >= n) break;
    const float v = x[i];
    if (!(v > threshold) && !(size < k && v == -INFINITY)) {  // NaN, or -inf once full
      ++i;
      continue;
    }
    int64_t pos = std::min(size, k - 1);
    while (pos > 0 && values[pos - 1] < v) {
      values[pos] = values[pos - 1];
      indices[pos] = indices[pos - 1];
      --pos;
    }
    values[pos] = v;
    indices[pos] = static_cast<int32_t>(i);
    size = std::min(size + 1, k);
    ++i;
  }
  return size;
}

}  // namespace cpm::kernels
