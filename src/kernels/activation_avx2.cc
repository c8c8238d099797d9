// AVX2 SiLU-and-multiply: silu(g) = g / (1 + e^-g) with a polynomial e^x (≤ 2 ulp from expf),
// rounded at the same points as the reference.
#include <immintrin.h>

#include <cmath>

#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {

void SiluMulAvx2(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                 float* out, int64_t out_stride, int64_t rows, int64_t dim, Round round) {
  const bool rb = round == Round::kBf16;
  const int64_t d8 = dim & ~int64_t{7};
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * gate_stride;
    const float* u = up + r * up_stride;
    float* o = out + r * out_stride;
    int64_t j = 0;
    for (; j < d8; j += 8) {
      const __m256 gv = _mm256_loadu_ps(g + j);
      __m256 s = avx2::DivOnePlusExpNeg(gv, gv);
      if (rb) s = avx2::RoundBf16(s);
      __m256 v = _mm256_mul_ps(s, _mm256_loadu_ps(u + j));
      if (rb) v = avx2::RoundBf16(v);
      _mm256_storeu_ps(o + j, v);
    }
    for (; j < dim; ++j) {
      float s = g[j] / (1.0f + std::exp(-g[j]));
      if (rb) s = RoundBf16(s);
      const float v = s * u[j];
      o[j] = rb ? RoundBf16(v) : v;
    }
  }
}

}  // namespace cpm::kernels
