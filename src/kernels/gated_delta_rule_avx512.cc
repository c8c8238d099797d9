// AVX-512 recurrent gated delta rule: S's columns in blocks of up to 128 (8 zmm per row), so that
// a head of MiniCPM-V-4.6 (dk = dv = 128) is one block whose rows are read in memory order. A
// decode step reads each head's 64 KiB state once from memory (batch 16: 288 MiB over the 18
// linear-attention layers, more than any cache), so the stream must be sequential for the
// hardware prefetchers to run ahead; the AVX2 form's 32-column blocks walk it with a 512-byte
// stride four times over (kernels_bench BM_GatedDeltaRuleDecode/seqs:16/layers:18, one thread,
// Zen 5: 26.2 → 13.3 ms). Each element's arithmetic is the AVX2 form's, so the two agree to the
// bit (hybrid_kernels_test); the scalar form differs by FMA rounding.
#include <cmath>

#include "kernels/gated_delta_rule_impl.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, gated_delta_rule_avx512_emulated.cc).
#if defined(CPM_EMULATE_AVX512)
namespace cpm::kernels::emulated {
#else
namespace cpm::kernels {
#endif
namespace {

// Columns [c0, c0 + 16·NV) of the rule over all t tokens. Loops over NV are fully unrolled so
// that u and acc stay in registers.
template <int NV>
void RecurrentColumns(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t c0) {
  float* S = h.state + c0;  // row a at S + a·dv
  for (int64_t i = 0; i < t; ++i) {
    const float* q = h.q + i * h.qk_stride;
    const float* k = h.k + i * h.qk_stride;
    const float* v = h.v + i * h.v_stride + c0;
    float* o = h.o + i * h.o_stride + c0;
    const __m512 decay = _mm512_set1_ps(std::exp(h.g[i * h.gb_stride]));
    const __m512 beta = _mm512_set1_ps(h.beta[i * h.gb_stride]);
    // u = (e^g S)ᵀ k. S is only read here: the next pass scales it again (the same product, so
    // the same value) rather than store it twice.
    __m512 u[NV];
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) u[c] = _mm512_setzero_ps();
    for (int64_t a = 0; a < dk; ++a) {
      const float* s = S + a * dv;
      const __m512 ka = _mm512_set1_ps(k[a]);
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) {
        u[c] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_loadu_ps(s + 16 * c), decay), ka, u[c]);
      }
    }
    // δ = β (v − u)
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) {
      u[c] = _mm512_mul_ps(beta, _mm512_sub_ps(_mm512_loadu_ps(v + 16 * c), u[c]));
    }
    // S <- e^g S + k δᵀ and o = Sᵀ q
    __m512 acc[NV];
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t a = 0; a < dk; ++a) {
      float* s = S + a * dv;
      const __m512 ka = _mm512_set1_ps(k[a]), qa = _mm512_set1_ps(q[a]);
#pragma GCC unroll 8
      for (int c = 0; c < NV; ++c) {
        const __m512 x = _mm512_mul_ps(_mm512_loadu_ps(s + 16 * c), decay);
        const __m512 y = _mm512_fmadd_ps(ka, u[c], x);
        _mm512_storeu_ps(s + 16 * c, y);
        acc[c] = _mm512_fmadd_ps(y, qa, acc[c]);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NV; ++c) _mm512_storeu_ps(o + 16 * c, acc[c]);
  }
}

}  // namespace

void GatedDeltaRuleRecurrentAvx512(const GdnHead& h, int64_t t, int64_t dk, int64_t dv) {
  int64_t c0 = 0;
  for (; c0 + 128 <= dv; c0 += 128) RecurrentColumns<8>(h, t, dk, dv, c0);
  switch ((dv - c0) / 16) {
    case 7: return RecurrentColumns<7>(h, t, dk, dv, c0);
    case 6: return RecurrentColumns<6>(h, t, dk, dv, c0);
    case 5: return RecurrentColumns<5>(h, t, dk, dv, c0);
    case 4: return RecurrentColumns<4>(h, t, dk, dv, c0);
    case 3: return RecurrentColumns<3>(h, t, dk, dv, c0);
    case 2: return RecurrentColumns<2>(h, t, dk, dv, c0);
    case 1: return RecurrentColumns<1>(h, t, dk, dv, c0);
    default: return;
  }
}

}  // namespace cpm::kernels (or cpm::kernels::emulated)
