// AVX-512 RoPE (NeoX layout): rope_avx2.cc's arithmetic on 16 lanes, a head's last half % 16
// pairs under a mask. Products and sums are separate instructions and this file is built with
// -ffp-contract=off, so results are the scalar reference's to the bit (no FMA). Half the AVX2
// form's instructions for MiniCPM4's 32 pairs a head (two vectors instead of four).
// Compiled with AVX-512 flags; called only when the CPU has them.
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, rope_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {
namespace {

using avx512::FirstLanes;
using avx512::MaskStoreu;
using avx512::MaskzLoadu;

// Every head of every token rotated, the products rounded to bf16 with kRoundProducts and the
// results with kRoundResults (RotatePair's rounding points).
template <bool kRoundResults, bool kRoundProducts>
void RotateRows(float* x, int64_t x_stride, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                int64_t half, const float* cos, const float* sin) {
  const auto rounded = [](__m512 v, bool round) { return round ? avx512::RoundBf16(v) : v; };
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * x_stride + h * head_dim;
      for (int64_t i = 0; i < half; i += 16) {
        const __mmask16 m = FirstLanes(half - i);
        const __m512 a = MaskzLoadu(m, v + i), b = MaskzLoadu(m, v + i + half);
        const __m512 cv = MaskzLoadu(m, c + i), sv = MaskzLoadu(m, s + i);
        const __m512 ac = rounded(_mm512_mul_ps(a, cv), kRoundProducts);
        const __m512 bs = rounded(_mm512_mul_ps(b, sv), kRoundProducts);
        const __m512 bc = rounded(_mm512_mul_ps(b, cv), kRoundProducts);
        const __m512 as = rounded(_mm512_mul_ps(a, sv), kRoundProducts);
        MaskStoreu(v + i, m, rounded(_mm512_sub_ps(ac, bs), kRoundResults));
        MaskStoreu(v + i + half, m, rounded(_mm512_add_ps(bc, as), kRoundResults));
      }
    }
  }
}

}  // namespace

void RopeNeoxAvx512(float* x, int64_t x_stride, int64_t n_tokens, int64_t n_heads,
                    int64_t head_dim, int64_t rot_dim, const float* cos, const float* sin,
                    Round round, bool round_products) {
  const int64_t half = rot_dim / 2;
  if (round != Round::kBf16) {
    return RotateRows<false, false>(x, x_stride, n_tokens, n_heads, head_dim, half, cos, sin);
  }
  (round_products ? RotateRows<true, true> : RotateRows<true, false>)(
      x, x_stride, n_tokens, n_heads, head_dim, half, cos, sin);
}

}  // namespace CPM_AVX512_NAMESPACE
