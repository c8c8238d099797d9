// AVX2 gated RMSNorm, per-head L2 norm and sigmoid gate: 8 lanes, sums of squares as RMSNorm's
// (avx2::SumSquares), SiLU and sigmoid through the vector exp, and the scalar reference's
// rounding points (gated_norm.cc); a row's last dim % 8 elements take the scalar formulas.
// Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cmath>

#include "kernels/gated_norm_impl.h"
#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {

using avx2::DivOnePlusExpNeg;

void GatedRmsNormAvx2(const float* x, int64_t x_stride, const float* z, int64_t z_stride,
                      const float* w, float* y, int64_t y_stride, int64_t rows, int64_t dim,
                      float eps, Round round) {
  const bool rb = round == Round::kBf16;
  const int64_t d8 = dim & ~int64_t{7};
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    const float* zr = z + r * z_stride;
    float* yr = y + r * y_stride;
    const float inv = 1.0f / std::sqrt(avx2::SumSquares(xr, dim) / static_cast<float>(dim) + eps);
    const __m256 vinv = _mm256_set1_ps(inv);
    int64_t j = 0;
    for (; j < d8; j += 8) {
      __m256 n = _mm256_mul_ps(_mm256_loadu_ps(xr + j), vinv);
      const __m256 wj = _mm256_loadu_ps(w + j);
      n = rb ? avx2::RoundBf16(_mm256_mul_ps(wj, avx2::RoundBf16(n))) : _mm256_mul_ps(n, wj);
      const __m256 zj = _mm256_loadu_ps(zr + j);
      const __m256 v = _mm256_mul_ps(n, DivOnePlusExpNeg(zj, zj));
      _mm256_storeu_ps(yr + j, rb ? avx2::RoundBf16(v) : v);
    }
    GatedRmsNormElements(xr, zr, w, yr, j, dim, inv, rb);  // the scalar tail
  }
}

void L2NormHeadsAvx2(float* x, int64_t x_stride, int64_t rows, int64_t heads, int64_t dim,
                     float eps, float scale) {
  const int64_t d8 = dim & ~int64_t{7};
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * x_stride + h * dim;
      const float f = scale / std::sqrt(avx2::SumSquares(v, dim) + eps);
      const __m256 vf = _mm256_set1_ps(f);
      int64_t j = 0;
      for (; j < d8; j += 8) _mm256_storeu_ps(v + j, _mm256_mul_ps(_mm256_loadu_ps(v + j), vf));
      for (; j < dim; ++j) v[j] *= f;
    }
  }
}

float SumSquaresAvx2(const float* x, int64_t n) { return avx2::SumSquares(x, n); }

void SigmoidMulAvx2(float* x, int64_t x_stride, const float* gate, int64_t gate_stride,
                    int64_t rows, int64_t dim, Round round) {
  const bool rb = round == Round::kBf16;
  const int64_t d8 = dim & ~int64_t{7};
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * x_stride;
    const float* gr = gate + r * gate_stride;
    int64_t j = 0;
    for (; j < d8; j += 8) {
      __m256 s = DivOnePlusExpNeg(_mm256_set1_ps(1.0f), _mm256_loadu_ps(gr + j));
      if (rb) s = avx2::RoundBf16(s);
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xr + j), s);
      _mm256_storeu_ps(xr + j, rb ? avx2::RoundBf16(v) : v);
    }
    SigmoidMulElements(xr, gr, j, dim, rb);  // the scalar tail
  }
}

}  // namespace cpm::kernels
