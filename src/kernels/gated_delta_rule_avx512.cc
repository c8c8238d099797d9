// AVX-512 recurrent gated delta rule: S's columns in blocks of up to 128 (8 zmm per row), so that
// a head of MiniCPM-V-4.6 (dk = dv = 128) is one block whose rows are read in memory order. A
// decode step reads each head's 64 KiB state once from memory (batch 16: 288 MiB over the 18
// linear-attention layers, more than any cache), so the stream must be sequential for the
// hardware prefetchers to run ahead; the AVX2 form's 32-column blocks walk it with a 512-byte
// stride four times over (kernels_bench BM_GatedDeltaRuleDecode/seqs:16/layers:18, one thread,
// Zen 5: 26.2 → 13.3 ms). Each element's arithmetic is the AVX2 form's, so the two agree to the
// bit (hybrid_kernels_test); the scalar form differs by FMA rounding. Below it, the chunked
// form's products on 16 lanes (the bulk of a prefill chunk's work), bitwise the AVX2 ones too.
#include <cmath>

#include "kernels/gated_delta_rule_chunked.h"
#include "kernels/gated_delta_rule_impl.h"
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512,
// gated_delta_rule_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {
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

// Y[R rows, 16·C cols] = beta · Y + alpha · X[R, k] · B[k, 16·C], one chain per element over k
// from zero (as the AVX2 tiles, so that the products are theirs to the bit), the last vector of
// columns masked to `last` lanes. Loops over the tile fully unrolled, so that acc stays in registers.
template <int R, int C>
void Tile(const float* X, int64_t xs, int64_t k, const float* B, int64_t bs, float* Y, int64_t ys,
          float alpha, float beta, __mmask16 last) {
  __m512 acc[R][C];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
  }
  for (int64_t a = 0; a < k; ++a) {
    __m512 b[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      b[c] = c + 1 < C ? _mm512_loadu_ps(B + a * bs + 16 * c)
                       : avx512::MaskzLoadu(last, B + a * bs + 16 * c);
    }
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(X[r * xs + a]);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(x, b[c], acc[r][c]);
    }
  }
  const __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      float* y = Y + r * ys + 16 * c;
      if (c + 1 < C) {
        _mm512_storeu_ps(y, _mm512_fmadd_ps(al, acc[r][c], _mm512_mul_ps(be, _mm512_loadu_ps(y))));
      } else {
        const __m512 old = _mm512_mul_ps(be, avx512::MaskzLoadu(last, y));
        avx512::MaskStoreu(y, last, _mm512_fmadd_ps(al, acc[r][c], old));
      }
    }
  }
}

// R rows of Y over all n columns: 64 at a time, then 32, then 16 (the last possibly partial).
template <int R>
void Rows(const float* X, int64_t xs, int64_t k, const float* B, int64_t bs, float* Y, int64_t ys,
          int64_t n, float alpha, float beta) {
  int64_t j = 0;
  for (; j + 64 <= n; j += 64) Tile<R, 4>(X, xs, k, B + j, bs, Y + j, ys, alpha, beta, 0xffff);
  for (; j + 32 <= n; j += 32) Tile<R, 2>(X, xs, k, B + j, bs, Y + j, ys, alpha, beta, 0xffff);
  for (; j < n; j += 16) {
    Tile<R, 1>(X, xs, k, B + j, bs, Y + j, ys, alpha, beta, avx512::FirstLanes(n - j));
  }
}

// The chunked form's primitives (gated_delta_rule_chunked.h): the products on 16 lanes in 6 × 64
// tiles (24 chains; rows and columns in tiles as the AVX2 form's, whose 6 × 16 tiles have 12),
// the rest (a small share of the work) as the AVX2 form has them.
struct Avx512Ops {
  static void MatAcc(const float* X, int64_t xs, int64_t m, int64_t k, const float* B, int64_t bs,
                     float* Y, int64_t ys, int64_t n, float alpha, float beta = 1.0f) {
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) Rows<6>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha, beta);
    for (; i + 4 <= m; i += 4) Rows<4>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha, beta);
    for (; i < m; ++i) Rows<1>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha, beta);
  }
  static void Scale(const float* src, int64_t n, float a, float* dst) {
    GdnScaleAvx2(src, n, a, dst);
  }
  static void Transpose(const float* src, int64_t ss, int64_t rows, int64_t cols, float* dst,
                        int64_t ds) {
    GdnTransposeAvx2(src, ss, rows, cols, dst, ds);
  }
  static void DecayMasks(const float* gam, const float* bet, int64_t n, int64_t C, float* A,
                         float* P) {
    GdnDecayMasksAvx2(gam, bet, n, C, A, P);
  }
};

}  // namespace

void GatedDeltaRuleChunkedAvx512(const GdnHead& h, int64_t t, int64_t dk, int64_t dv,
                                 int64_t chunk, float* scratch) {
  GdnChunked<Avx512Ops>(h, t, dk, dv, chunk, scratch);
}

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

}  // namespace CPM_AVX512_NAMESPACE
