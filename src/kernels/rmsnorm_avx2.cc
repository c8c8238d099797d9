// AVX2 RMSNorm: 8-lane sum of squares (avx2::SumSquares), then the same per-element rounding
// points as the reference. Built with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cmath>

#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {

void RmsNormAvx2(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride,
                 int64_t rows, int64_t dim, const RmsNormParams& p) {
  const int64_t d8 = dim & ~int64_t{7};
  const bool round_out = p.round == Round::kBf16;
  const __m256 offset = _mm256_set1_ps(p.weight_offset);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    const float ss = avx2::SumSquares(xr, dim);
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + p.eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    int64_t j = 0;
    for (; j < d8; j += 8) {
      __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + j), vinv);
      if (p.round_normalized) v = avx2::RoundBf16(v);
      v = _mm256_mul_ps(v, _mm256_add_ps(offset, _mm256_loadu_ps(w + j)));
      if (round_out) v = avx2::RoundBf16(v);
      _mm256_storeu_ps(yr + j, v);
    }
    for (; j < dim; ++j) {
      float v = xr[j] * inv;
      if (p.round_normalized) v = RoundBf16(v);
      v *= (p.weight_offset + w[j]);
      yr[j] = round_out ? RoundBf16(v) : v;
    }
  }
}

}  // namespace cpm::kernels
