// AVX2 bidirectional attention (DenseAttention, dense_attention.h) for CPUs without AVX512_BF16
// and for f32 towers: the AVX-512 BF16 kernel's plan on f32 FMAs. One task per 32 query rows of
// a head, the rows in the lanes of four ymm: Sᵀ [n, 32] from each key's dims broadcast against
// the rows' queries (3 keys × 32 rows per tile, 12 chains), read straight from the key rows; the
// exact softmax lane-wise down Sᵀ (P rounded to bf16 with `bf16`); P·V with each value's dims
// broadcast against P's rows (3 dims × 32 rows), read straight from the value rows. Products of
// bf16 values are exact in f32, so with `bf16` the results differ from the AVX-512 kernel's only
// in the order of their f32 sums. Against the matmul kernels per head with an n × n score
// matrix between them (the path it replaced), forced to AVX2 on a Zen 5 (two threads,
// kernels_bench `BM_DenseAttention`): 151 against 71 GFLOP/s over 1024 tokens, 131 against 58
// over 256.
// Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kRows = 32;   // query rows per task: four ymm of lanes
constexpr int kVecs = kRows / 8;
constexpr int kTile = 3;        // keys per score tile, dims per value tile

// acc[c][i] = Σ_s b[s·s_stride + c·c_stride] · lanes[s·32 + 8i ...] over s < steps: the score
// and value tiles' common loop (C broadcast columns against 32 rows: 12 chains, and for the
// registers 12 + 3 broadcasts + 1 load).
template <int C>
[[gnu::always_inline]] inline void RowDots(const float* lanes, const float* b, int64_t s_stride,
                                           int64_t c_stride, int64_t steps,
                                           __m256 (&acc)[C][kVecs]) {
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int i = 0; i < kVecs; ++i) acc[c][i] = _mm256_setzero_ps();
  }
  for (int64_t s = 0; s < steps; ++s) {
    __m256 bc[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) bc[c] = _mm256_broadcast_ss(b + s * s_stride + c * c_stride);
#pragma GCC unroll 4
    for (int i = 0; i < kVecs; ++i) {
      const __m256 a = _mm256_loadu_ps(lanes + s * kRows + 8 * i);
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[c][i] = _mm256_fmadd_ps(a, bc[c], acc[c][i]);
    }
  }
}

// st[j·32 + r] = q_r · k_j for the K keys from j0 (qt[c·32 + r] = q_r[c]; key j's dims at
// k + j·ld); mx[i] takes their max.
template <int K>
void ScoreTile(const float* qt, const float* k, int64_t ld, int64_t d, int64_t j0, float* st,
               __m256 (&mx)[kVecs]) {
  __m256 acc[K][kVecs];
  RowDots<K>(qt, k + j0 * ld, 1, ld, d, acc);
#pragma GCC unroll 4
  for (int j = 0; j < K; ++j) {
#pragma GCC unroll 4
    for (int i = 0; i < kVecs; ++i) {
      _mm256_storeu_ps(st + (j0 + j) * kRows + 8 * i, acc[j][i]);
      mx[i] = _mm256_max_ps(mx[i], acc[j][i]);
    }
  }
}

// The softmax of the rows' scores st [n, 32] (their max in mx) in place into P (bf16 values with
// `bf16`), and each row's 1 / Σ p in inv[r]; the sum in key order.
void Softmax(float* st, int64_t n, float scale, bool bf16, const __m256 (&mx)[kVecs],
             float* inv) {
  const __m256 vs = _mm256_set1_ps(scale);
  for (int i = 0; i < kVecs; ++i) {
    __m256 l = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; ++j) {
      float* s = st + j * kRows + 8 * i;
      const __m256 p = avx2::Exp(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(s), mx[i]), vs));
      l = _mm256_add_ps(l, p);
      _mm256_storeu_ps(s, bf16 ? avx2::RoundBf16(p) : p);
    }
    _mm256_storeu_ps(inv + 8 * i, _mm256_div_ps(_mm256_set1_ps(1.0f), l));
  }
}

// ot[(c0 + c)·32 + r] = inv[r] · Σ_j P[j, r] · v_j[c0 + c] for c < C (rounded with `bf16`).
template <int C>
void ValueTile(const float* pt, const float* v, int64_t ld, int64_t n, int64_t c0,
               const float* inv, bool bf16, float* ot) {
  __m256 acc[C][kVecs];
  RowDots<C>(pt, v + c0, ld, 1, n, acc);
#pragma GCC unroll 4
  for (int c = 0; c < C; ++c) {
#pragma GCC unroll 4
    for (int i = 0; i < kVecs; ++i) {
      const __m256 o = _mm256_mul_ps(acc[c][i], _mm256_loadu_ps(inv + 8 * i));
      _mm256_storeu_ps(ot + (c0 + c) * kRows + 8 * i, bf16 ? avx2::RoundBf16(o) : o);
    }
  }
}

struct RowScratch {
  std::vector<float> qt, st, ot;
  alignas(32) float inv[kRows];
};

// Rows [0, rows) (≤ 32) of q (rows q_ld apart) for one head against its n keys and values
// (rows kv_ld apart, read in place: copies of a head's into rows of their own measured level at
// 1024 tokens and 5-15% slower at 256).
void AttendRows(const float* q, int64_t q_ld, const float* k, const float* v, int64_t kv_ld,
                int64_t rows, int64_t n, int64_t d, float scale, bool bf16, float* out,
                int64_t out_ld, RowScratch& rs) {
  rs.qt.resize(d * kRows), rs.st.resize(n * kRows), rs.ot.resize(d * kRows);
  for (int64_t c = 0; c < d; ++c) {
    for (int64_t r = 0; r < kRows; ++r) rs.qt[c * kRows + r] = r < rows ? q[r * q_ld + c] : 0.0f;
  }
  __m256 mx[kVecs];
  for (__m256& m : mx) m = _mm256_set1_ps(-INFINITY);
  int64_t j0 = 0;
  for (; j0 + kTile <= n; j0 += kTile) {
    ScoreTile<kTile>(rs.qt.data(), k, kv_ld, d, j0, rs.st.data(), mx);
  }
  if (n - j0 == 2) ScoreTile<2>(rs.qt.data(), k, kv_ld, d, j0, rs.st.data(), mx);
  if (n - j0 == 1) ScoreTile<1>(rs.qt.data(), k, kv_ld, d, j0, rs.st.data(), mx);
  Softmax(rs.st.data(), n, scale, bf16, mx, rs.inv);
  int64_t c0 = 0;
  for (; c0 + kTile <= d; c0 += kTile) {
    ValueTile<kTile>(rs.st.data(), v, kv_ld, n, c0, rs.inv, bf16, rs.ot.data());
  }
  if (d - c0 == 2) ValueTile<2>(rs.st.data(), v, kv_ld, n, c0, rs.inv, bf16, rs.ot.data());
  if (d - c0 == 1) ValueTile<1>(rs.st.data(), v, kv_ld, n, c0, rs.inv, bf16, rs.ot.data());
  // Back to rows once every tile is stored (a tile's fresh vector stores would stall the loads).
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < d; ++c) out[r * out_ld + c] = rs.ot[c * kRows + r];
  }
}

}  // namespace

void DenseAttentionAvx2(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                        int64_t heads, int64_t d, float scale, bool bf16, float* out,
                        int64_t out_ld, ThreadPool& pool) {
  const int64_t blocks = (n + kRows - 1) / kRows;
  // Tasks head by head, so that the threads share a head's keys and values in the caches.
  pool.ParallelFor(heads * blocks, [&](int64_t task, int) {
    thread_local RowScratch rs;
    const int64_t h = task / blocks, t0 = task % blocks * kRows;
    AttendRows(q + t0 * ld + h * d, ld, k + h * d, v + h * d, ld, std::min(kRows, n - t0), n, d,
               scale, bf16, out + t0 * out_ld + h * d, out_ld, rs);
  });
}

}  // namespace cpm::kernels
