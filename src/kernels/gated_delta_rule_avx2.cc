// AVX2 gated delta rule: the recurrent form one block of S's columns at a time (columns of S
// evolve independently, so a [dk, 32] block stays in L1 across all tokens), and a register-tiled
// row-times-matrix product for the chunked form.
#include <immintrin.h>

#include <cmath>

#include "kernels/gated_delta_rule_impl.h"

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
    // S <- e^g S and u = Sᵀ k
    __m256 u[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) u[c] = _mm256_setzero_ps();
    for (int64_t a = 0; a < dk; ++a) {
      float* s = S + a * dv;
      const __m256 ka = _mm256_broadcast_ss(k + a);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) {
        const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(s + 8 * c), decay);
        _mm256_storeu_ps(s + 8 * c, x);
        u[c] = _mm256_fmadd_ps(x, ka, u[c]);
      }
    }
    // δ = β (v − u)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) {
      u[c] = _mm256_mul_ps(beta, _mm256_sub_ps(_mm256_loadu_ps(v + 8 * c), u[c]));
    }
    // S <- S + k δᵀ and o = Sᵀ q
    __m256 acc[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t a = 0; a < dk; ++a) {
      float* s = S + a * dv;
      const __m256 ka = _mm256_broadcast_ss(k + a), qa = _mm256_broadcast_ss(q + a);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) {
        const __m256 x = _mm256_fmadd_ps(ka, u[c], _mm256_loadu_ps(s + 8 * c));
        _mm256_storeu_ps(s + 8 * c, x);
        acc[c] = _mm256_fmadd_ps(x, qa, acc[c]);
      }
    }
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) _mm256_storeu_ps(o + 8 * c, acc[c]);
  }
}

// Y[R rows, 8·C cols] += alpha · X[R, k] · B[k, 8·C], accumulated in registers: every loop
// over the tile is fully unrolled, else GCC keeps `acc` in memory (a load and a store per FMA).
template <int R, int C>
void Tile(const float* X, int64_t xs, int64_t k, const float* B, int64_t bs, float* Y, int64_t ys,
          float alpha) {
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
  const __m256 al = _mm256_set1_ps(alpha);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int c = 0; c < C; ++c) {
      float* y = Y + r * ys + 8 * c;
      _mm256_storeu_ps(y, _mm256_fmadd_ps(al, acc[r][c], _mm256_loadu_ps(y)));
    }
  }
}

template <int R>
void Rows(const float* X, int64_t xs, int64_t k, const float* B, int64_t bs, float* Y, int64_t ys,
          int64_t n, float alpha) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) Tile<R, 2>(X, xs, k, B + j, bs, Y + j, ys, alpha);
  for (; j + 8 <= n; j += 8) Tile<R, 1>(X, xs, k, B + j, bs, Y + j, ys, alpha);
  for (; j < n; ++j) {
    for (int r = 0; r < R; ++r) {
      float s = 0.0f;
      for (int64_t a = 0; a < k; ++a) s += X[r * xs + a] * B[a * bs + j];
      Y[r * ys + j] += alpha * s;
    }
  }
}

}  // namespace

void GatedDeltaRuleRecurrentAvx2(const GdnHead& h, int64_t t, int64_t dk, int64_t dv) {
  int64_t c0 = 0;
  for (; c0 + 32 <= dv; c0 += 32) RecurrentColumns<4>(h, t, dk, dv, c0);
  for (; c0 + 8 <= dv; c0 += 8) RecurrentColumns<1>(h, t, dk, dv, c0);
}

void MatAccAvx2(const float* X, int64_t xs, int64_t m, int64_t k, const float* B, int64_t bs,
                float* Y, int64_t ys, int64_t n, float alpha) {
  // 6×16 tiles (12 accumulator chains: more than FMA latency × ports) where rows allow. Each
  // Y element is one chain over k from zero whatever the tile, so heights do not change results.
  int64_t i = 0;
  for (; i + 6 <= m; i += 6) Rows<6>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha);
  for (; i + 4 <= m; i += 4) Rows<4>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha);
  for (; i < m; ++i) Rows<1>(X + i * xs, xs, k, B, bs, Y + i * ys, ys, n, alpha);
}

}  // namespace cpm::kernels
