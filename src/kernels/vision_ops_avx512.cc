// AVX-512 tanh-GELU for the vision tower: GeluTanhAvx2's arithmetic on 16 lanes (the shared e^x
// polynomial, the same operations in the same order), so that the two agree to the bit
// (vision_ops_test, natively and over SIMDe) and no result depends on the ISA; the last < 16
// elements go to GeluTanhAvx2 itself. Compiled with AVX-512 flags; called only when the CPU has
// them.
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, vision_ops_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {

void GeluTanhAvx512(float* x, int64_t n, Round round) {
  const bool rb = round == Round::kBf16;
  const __m512 one = _mm512_set1_ps(1.0f), c = _mm512_set1_ps(0.044715f);
  const __m512 minus_two_k = _mm512_set1_ps(-2.0f * 0.7978845608028654f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    // x + cx³, then x / (1 + e^(−2k(x + cx³)))
    const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(c, v), _mm512_mul_ps(v, v), v);
    const __m512 e = avx512::Exp(_mm512_mul_ps(minus_two_k, inner));
    __m512 g = _mm512_div_ps(v, _mm512_add_ps(one, e));
    if (rb) g = avx512::RoundBf16(g);
    _mm512_storeu_ps(x + i, g);
  }
  if (i < n) cpm::kernels::GeluTanhAvx2(x + i, n - i, round);
}

}  // namespace CPM_AVX512_NAMESPACE
