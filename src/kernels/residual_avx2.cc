// AVX2 residual updates, scaling and bf16 rounding: elementwise, bit-identical to the reference.
#include <immintrin.h>

#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {

void AddScaledAvx2(float* h, int64_t h_stride, const float* d, int64_t d_stride, int64_t rows,
                   int64_t dim, float scale, Round round) {
  const bool rb = round == Round::kBf16;
  const int64_t d8 = dim & ~int64_t{7};
  const __m256 vs = _mm256_set1_ps(scale);
  for (int64_t r = 0; r < rows; ++r) {
    float* hr = h + r * h_stride;
    const float* dr = d + r * d_stride;
    int64_t j = 0;
    for (; j < d8; j += 8) {
      __m256 s = _mm256_mul_ps(_mm256_loadu_ps(dr + j), vs);
      if (rb) s = avx2::RoundBf16(s);
      __m256 v = _mm256_add_ps(_mm256_loadu_ps(hr + j), s);
      if (rb) v = avx2::RoundBf16(v);
      _mm256_storeu_ps(hr + j, v);
    }
    for (; j < dim; ++j) {
      float s = dr[j] * scale;
      if (rb) s = RoundBf16(s);
      const float v = hr[j] + s;
      hr[j] = rb ? RoundBf16(v) : v;
    }
  }
}

void ScaleAvx2(float* x, int64_t n, float scale, Round round) {
  const bool rb = round == Round::kBf16;
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    if (rb) v = avx2::RoundBf16(v);
    _mm256_storeu_ps(x + i, v);
  }
  for (; i < n; ++i) {
    const float v = x[i] * scale;
    x[i] = rb ? RoundBf16(v) : v;
  }
}

void RoundBf16InPlaceAvx2(float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, avx2::RoundBf16(_mm256_loadu_ps(x + i)));
  for (; i < n; ++i) x[i] = RoundBf16(x[i]);
}

}  // namespace cpm::kernels
