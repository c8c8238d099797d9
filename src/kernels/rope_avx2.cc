// AVX2 RoPE (NeoX layout). Products and sums are separate instructions and this file is built
// with -ffp-contract=off, so results are bit-identical to the reference (no FMA).
#include <immintrin.h>

#include "kernels/ops_avx2.h"
#include "kernels/rope_pair.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {

void RopeNeoxAvx2(float* x, int64_t x_stride, int64_t n_tokens, int64_t n_heads,
                  int64_t head_dim, int64_t rot_dim, const float* cos, const float* sin,
                  Round round, bool round_products) {
  const int64_t half = rot_dim / 2, h8 = half & ~int64_t{7};
  const bool rb = round == Round::kBf16;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * x_stride + h * head_dim;
      int64_t i = 0;
      for (; i < h8; i += 8) {
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + i + half);
        const __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
        __m256 ac = _mm256_mul_ps(a, cv), bs = _mm256_mul_ps(b, sv);
        __m256 bc = _mm256_mul_ps(b, cv), as = _mm256_mul_ps(a, sv);
        if (round_products) {
          ac = avx2::RoundBf16(ac);
          bs = avx2::RoundBf16(bs);
          bc = avx2::RoundBf16(bc);
          as = avx2::RoundBf16(as);
        }
        __m256 y0 = _mm256_sub_ps(ac, bs);
        __m256 y1 = _mm256_add_ps(bc, as);
        if (rb) {
          y0 = avx2::RoundBf16(y0);
          y1 = avx2::RoundBf16(y1);
        }
        _mm256_storeu_ps(v + i, y0);
        _mm256_storeu_ps(v + i + half, y1);
      }
      for (; i < half; ++i) RotatePair(v, i, half, c[i], s[i], rb, round_products);
    }
  }
}

}  // namespace cpm::kernels
