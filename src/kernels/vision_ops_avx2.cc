// AVX2 tanh-GELU for the vision tower: 0.5·x·(1 + tanh(z)) = x · sigmoid(2z) = x / (1 + e^(−2z)),
// z = √(2/π)(x + 0.044715x³), with the polynomial e^x (≤ 2 ulp from expf). Large |x| saturate
// correctly: e^(−2z) → 0 gives x, → the clamp (~1e38) gives −0.
#include <immintrin.h>

#include <cmath>

#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

void GeluTanhAvx2(float* x, int64_t n, Round round) {
  const bool rb = round == Round::kBf16;
  const __m256 one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(0.044715f);
  const __m256 minus_two_k = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(c, v), _mm256_mul_ps(v, v), v);  // x + cx³
    __m256 g = _mm256_div_ps(v, _mm256_add_ps(one, avx2::Exp(_mm256_mul_ps(minus_two_k, inner))));
    if (rb) g = avx2::RoundBf16(g);
    _mm256_storeu_ps(x + i, g);
  }
  for (; i < n; ++i) {
    const float v = x[i];
    const float g = v / (1.0f + std::exp(-2.0f * 0.7978845608028654f * (v + 0.044715f * v * v * v)));
    x[i] = rb ? RoundBf16(g) : g;
  }
}

}  // namespace cpm::kernels
