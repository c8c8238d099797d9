// AVX2 gated delta rule: the recurrent form one block of S's columns at a time (columns of S
// evolve independently, so a [dk, 32] block stays in L1 across all tokens), and the chunked
// form's primitives: register-tiled products, 8×8 transposes, vector decays.
#include <immintrin.h>

#include <cmath>

#include "kernels/gated_delta_rule_chunked.h"
#include "kernels/gated_delta_rule_impl.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {
namespace {

// Columns [c0, c0 + 8·NV) of the recurrent rule over all t tokens. Loops over NV are fully
// unrolled so that u and acc stay in registers (else GCC keeps them on the stack and every FMA
// waits for a store to be forwarded).
template <int NV>
void RecurrentColumns(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t c0) {
  float* S = h.state + c0;  // row a at S + a·dv
  for (int64_t i = 0; i < t; ++i) {
    const float* q = h.q + i * h.qk_stride;
    const float* k = h.k + i * h.qk_stride;
    const float* v = h.v + i * h.v_stride + c0;
    float* o = h.o + i * h.o_stride + c0;
    const __m256 decay = _mm256_set1_ps(std::exp(h.g[i * h.gb_stride]));
    const __m256 beta = _mm256_set1_ps(h.beta[i * h.gb_stride]);
    // u = (e^g S)ᵀ k. S is only read here: the next pass scales it again (the same product, so
    // the same value) rather than store it twice.
    __m256 u[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) u[c] = _mm256_setzero_ps();
    for (int64_t a = 0; a < dk; ++a) {
      const float* s = S + a * dv;
      const __m256 ka = _mm256_broadcast_ss(k + a);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) {
        u[c] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_loadu_ps(s + 8 * c), decay), ka, u[c]);
      }
    }
    // δ = β (v − u)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) {
      u[c] = _mm256_mul_ps(beta, _mm256_sub_ps(_mm256_loadu_ps(v + 8 * c), u[c]));
    }
    // S <- e^g S + k δᵀ and o = Sᵀ q
    __m256 acc[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t a = 0; a < dk; ++a) {
      float* s = S + a * dv;
      const __m256 ka = _mm256_broadcast_ss(k + a), qa = _mm256_broadcast_ss(q + a);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) {
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + 8 * c), decay);
        const __m256 y = _mm256_fmadd_ps(ka, u[c], x);
        _mm256_storeu_ps(s + 8 * c, y);
        acc[c] = _mm256_fmadd_ps(y, qa, acc[c]);
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(o + 8 * c, acc[c]);
  }
}

// Y[R rows, 8·C cols] = beta · Y + alpha · X[R, k] · B[k, 8·C], accumulated in registers: every
// loop over the tile is fully unrolled, else GCC keeps `acc` in memory (a load and a store per
// FMA).
template <int R, int C>
void Tile(const float* X, int64_t xs, int64_t k, const float* B, int64_t bs, float* Y, int64_t ys,
          float alpha, float beta) {
  __m256 acc[R][C];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  }
  for (int64_t a = 0; a < k; ++a) {
    __m256 b[C];
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) b[c] = _mm256_loadu_ps(B + a * bs + 8 * c);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 x = _mm256_broadcast_ss(X + r * xs + a);
#pragma GCC unroll 2
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(x, b[c], acc[r][c]);
    }
  }
  const __m256 al = _mm256_set1_ps(alpha), be = _mm256_set1_ps(beta);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) {
      float* y = Y + r * ys + 8 * c;
      _mm256_storeu_ps(y, _mm256_fmadd_ps(al, acc[r][c], _mm256_mul_ps(be, _mm256_loadu_ps(y))));
    }
  }
}

template <int R>
void Rows(const float* X, int64_t xs, int64_t k, const float* B, int64_t bs, float* Y, int64_t ys,
          int64_t n, float alpha, float beta) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) Tile<R, 2>(X, xs, k, B + j, bs, Y + j, ys, alpha, beta);
  for (; j + 8 <= n; j += 8) Tile<R, 1>(X, xs, k, B + j, bs, Y + j, ys, alpha, beta);
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (int64_t a = 0; a < k; ++a) s += X[r * xs + a] * B[a * bs + j];
      // The tiles' rounding, written out: beta · y rounded, then one fused multiply-add.
      float& y = Y[r * ys + j];
      y = std::fma(alpha, s, beta * y);
    }
  }
}

}  // namespace

void GatedDeltaRuleRecurrentAvx2(const GdnHead& h, int64_t t, int64_t dk, int64_t dv) {
  int64_t c0 = 0;
  for (; c0 + 32 <= dv; c0 += 32) RecurrentColumns<4>(h, t, dk, dv, c0);
  for (; c0 + 8 <= dv; c0 += 8) RecurrentColumns<1>(h, t, dk, dv, c0);
}

namespace {

// 8×8 block: dst[c, r] = src[r, c] for r, c < 8.
inline void Transpose8x8(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m256 r[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
  avx2::Transpose8x8(r);
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) _mm256_storeu_ps(dst + i * ds, r[i]);
}

// The chunked form's primitives (gated_delta_rule_chunked.h), AVX2.
struct Avx2Ops {
  // 6×16 tiles (12 accumulator chains: more than FMA latency × ports) where rows allow. Each Y
  // element is one chain over k from zero whatever the tile, so heights do not change results.
  static void MatAcc(const float* X, int64_t xs, int64_t m, int64_t k, const float* B, int64_t bs,
                     float* Y, int64_t ys, int64_t n, float alpha, float beta = 1.0f) {
    int64_t i = 0;
    for (; i + 6 <= m; i += 6) Rows<6>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha, beta);
    for (; i + 4 <= m; i += 4) Rows<4>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha, beta);
    for (; i < m; ++i) Rows<1>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha, beta);
  }

  static void Scale(const float* src, int64_t n, float a, float* dst) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      _mm256_storeu_ps(dst + i, _mm256_mul_ps(va, _mm256_loadu_ps(src + i)));
    }
    for (; i < n; ++i) dst[i] = a * src[i];
  }

  static void Transpose(const float* src, int64_t ss, int64_t rows, int64_t cols, float* dst,
                        int64_t ds) {
    const int64_t r8 = rows & ~int64_t{7}, c8 = cols & ~int64_t{7};
    for (int64_t r = 0; r < r8; r += 8)
      for (int64_t c = 0; c < c8; c += 8) Transpose8x8(src + r * ss + c, ss, dst + c * ds + r, ds);
    for (int64_t r = 0; r < rows; ++r) {  // the edges
      for (int64_t c = r < r8 ? c8 : 0; c < cols; ++c) dst[c * ds + r] = src[r * ss + c];
    }
  }

  static void DecayMasks(const float* gam, const float* bet, int64_t n, int64_t C, float* A,
                         float* P) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t i = 0; i < n; ++i) {
      const __m256 gi = _mm256_set1_ps(gam[i]), bi = _mm256_set1_ps(bet[i]);
      const __m256i diag = _mm256_set1_epi32(static_cast<int32_t>(i));
      float* a = A + i * C;
      float* p = P + i * C;
      for (int64_t j = 0; j < n; j += 8) {
        // Lanes j..j+7 inside n; D up to the diagonal (j ≤ i) for P, strictly below it for A.
        const __m256i col = _mm256_add_epi32(_mm256_set1_epi32(static_cast<int32_t>(j)), lane);
        const __m256i valid = avx2::FirstLanes(n - j);
        const __m256 below = _mm256_castsi256_ps(_mm256_cmpgt_epi32(diag, col));
        const __m256 on_or_below =
            _mm256_or_ps(below, _mm256_castsi256_ps(_mm256_cmpeq_epi32(diag, col)));
        const __m256 gj = _mm256_maskload_ps(gam + j, valid);
        const __m256 d = _mm256_and_ps(avx2::Exp(_mm256_sub_ps(gi, gj)), on_or_below);
        const __m256 pv = _mm256_mul_ps(_mm256_maskload_ps(p + j, valid), d);
        const __m256 ad = _mm256_mul_ps(_mm256_maskload_ps(a + j, valid), d);
        const __m256 av = _mm256_and_ps(_mm256_mul_ps(ad, bi), below);
        if (j + 8 <= n) {  // a masked store is microcoded on AMD
          _mm256_storeu_ps(p + j, pv);
          _mm256_storeu_ps(a + j, av);
        } else {
          _mm256_maskstore_ps(p + j, valid, pv);
          _mm256_maskstore_ps(a + j, valid, av);
        }
      }
    }
  }
};

}  // namespace

void GatedDeltaRuleChunkedAvx2(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t chunk,
                               float* scratch) {
  GdnChunked<Avx2Ops>(h, t, dk, dv, chunk, scratch);
}

void GdnScaleAvx2(const float* src, int64_t n, float a, float* dst) {
  Avx2Ops::Scale(src, n, a, dst);
}

void GdnTransposeAvx2(const float* src, int64_t ss, int64_t rows, int64_t cols, float* dst,
                      int64_t ds) {
  Avx2Ops::Transpose(src, ss, rows, cols, dst, ds);
}

void GdnDecayMasksAvx2(const float* gam, const float* bet, int64_t n, int64_t C, float* A,
                       float* P) {
  Avx2Ops::DecayMasks(gam, bet, n, C, A, P);
}

}  // namespace cpm::kernels
