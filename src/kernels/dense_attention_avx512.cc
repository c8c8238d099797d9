// AVX-512 BF16 bidirectional attention (DenseAttention with bf16 values, dense_attention.h):
// one task per 32 query rows of a head, the rows in the lanes of two zmm. A task's scores
// Sᵀ [n, 32] come from bf16 dot products of its query pairs with each key's pairs broadcast,
// 8 keys × 32 rows per tile (16 chains); the softmax is then lane-wise down Sᵀ's rows (the max,
// the exps and their sum per query row, with no horizontal reduction), and P's bf16 pairs of
// consecutive keys are two rows of Sᵀ merged. P·V broadcasts each value pair of 8 dims against
// P's 32 rows, so a head of 72 dims (SigLIP's) fills its tiles exactly where panels of 32
// output columns would pad it to 96. Sᵀ and P (128 + 64 KiB at 1024 keys) and the head's
// packed keys and values stay in L2; only q, k, v and the output cross DRAM.
// Against the matmul kernels per head with an n × n score matrix between them (the tower's
// previous path), MiniCPM-V-4.6's tower on a 448² slice (Zen 5, 2 threads): its attention 2.7×
// faster over 1024 tokens and 3.0× over 256, the slice's encode 1.23-1.30× (3 interleaved
// rounds).
// Compiled with AVX-512 flags; called only when the CPU has AVX512_BF16.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"
#include "tensor/dtype.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512,
// dense_attention_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {
namespace {

constexpr int64_t kRows = 32;      // query rows per task: two zmm of lanes
constexpr int64_t kKeyTile = 8;    // keys per score tile
constexpr int64_t kDimTile = 8;    // value dims per P·V tile

// Keys a head's packed keys and a task's scores hold: n rounded up to whole score tiles.
constexpr int64_t PaddedKeys(int64_t n) { return (n + kKeyTile - 1) / kKeyTile * kKeyTile; }

// Bf16PairOf (tensor/dtype.h) lane by lane.
inline __m512i PairsOf(__m512 lo, __m512 hi) {
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  return _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(lo), 16),
                         _mm512_and_si512(_mm512_castps_si512(hi), high_half));
}

// One head's keys and values as bf16 pairs (a view into the call's scratch):
// keys[j·(d/2) + p] = (k_j[2p], k_j[2p+1]) for j < n rounded up to 8 (zero keys past n);
// values[i·d + c] = (v_2i[c], v_2i+1[c]) for i < ⌈n/2⌉ (v_n = 0): both rows of a token pair
// merged lane by lane, and a P·V tile's broadcasts for one pair are neighbours.
struct HeadPairs {
  uint32_t* keys;
  uint32_t* values;
};

void PackHead(const float* k, const float* v, int64_t ld, int64_t n, int64_t d, HeadPairs hp) {
  const int64_t dp = d / 2, keys = PaddedKeys(n);
  for (int64_t j = 0; j < keys; ++j) {
    uint32_t* kj = hp.keys + j * dp;
    const float* k0 = k + j * ld;
    for (int64_t p = 0; p < dp; ++p) kj[p] = j < n ? Bf16PairOf(k0[2 * p], k0[2 * p + 1]) : 0;
  }
  for (int64_t i = 0; i < (n + 1) / 2; ++i) {
    const float* v0 = v + 2 * i * ld;
    const bool odd = 2 * i + 1 == n;  // the last token has no partner
    uint32_t* vi = hp.values + i * d;
    for (int64_t c = 0; c < d; c += 16) {
      const __mmask16 m = avx512::FirstLanes(d - c);
      const __m512 hi = odd ? _mm512_setzero_ps() : avx512::MaskzLoadu(m, v0 + ld + c);
      const __m512i pairs = PairsOf(avx512::MaskzLoadu(m, v0 + c), hi);
      avx512::MaskStoreu(reinterpret_cast<float*>(vi + c), m, _mm512_castsi512_ps(pairs));
    }
  }
}

// acc[c][h] = Σ_s b[s·s_stride + c·c_stride] · lanes[s·32 + 16h ...] over steps s < steps, as
// bf16 pair dot products (32 rows in the lanes, N broadcast columns): the score and value tiles'
// common loop.
template <int N>
[[gnu::always_inline]] inline void PairDots(const uint32_t* lanes, const uint32_t* b,
                                            int64_t s_stride, int64_t c_stride, int64_t steps,
                                            __m512 (&acc)[N][2]) {
#pragma GCC unroll 8
  for (int c = 0; c < N; ++c) acc[c][0] = acc[c][1] = _mm512_setzero_ps();
  for (int64_t i = 0; i < steps; ++i) {
    const __m512i a0 = _mm512_loadu_si512(lanes + i * kRows);
    const __m512i a1 = _mm512_loadu_si512(lanes + i * kRows + 16);
#pragma GCC unroll 8
    for (int c = 0; c < N; ++c) {
      const __m512i bc = _mm512_set1_epi32(static_cast<int>(b[i * s_stride + c * c_stride]));
      acc[c][0] = _mm512_dpbf16_ps(acc[c][0], (__m512bh)a0, (__m512bh)bc);
      acc[c][1] = _mm512_dpbf16_ps(acc[c][1], (__m512bh)a1, (__m512bh)bc);
    }
  }
}

// st[j·32 + r] = q_r · k_j for keys [j0, j0 + 8): qt holds the rows' query pairs, pair p of
// row r at qt[p·32 + r]. mx[h] (rows 16h..16h+15) takes the max of the scores of keys < n.
void ScoreTile(const uint32_t* qt, const uint32_t* keys, int64_t dp, int64_t j0, int64_t n,
               float* st, __m512 (&mx)[2]) {
  __m512 acc[kKeyTile][2];
  PairDots(qt, keys + j0 * dp, 1, dp, dp, acc);
#pragma GCC unroll 8
  for (int j = 0; j < kKeyTile; ++j) {
    _mm512_storeu_ps(st + (j0 + j) * kRows, acc[j][0]);
    _mm512_storeu_ps(st + (j0 + j) * kRows + 16, acc[j][1]);
    if (j0 + j < n) {
      mx[0] = _mm512_max_ps(mx[0], acc[j][0]);
      mx[1] = _mm512_max_ps(mx[1], acc[j][1]);
    }
  }
}

// The softmax of the rows' scores st [n, 32] (their max in mx) down to P's pairs
// pt[i·32 + r] = (P_2i, P_2i+1) of row r (bf16, 0 past n), and each row's 1 / Σ p in inv[r].
// The sum runs in key order.
void Softmax(const float* st, int64_t n, float scale, const __m512 (&mx)[2], uint32_t* pt,
             float* inv) {
  for (int h = 0; h < 2; ++h) {
    const float* s = st + 16 * h;
    const __m512 m = mx[h];
    const __m512 vs = _mm512_set1_ps(scale);
    const auto exp_at = [&](int64_t j) {
      return avx512::Exp(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j * kRows), m), vs));
    };
    const auto p_of = [&](int64_t j) { return j < n ? exp_at(j) : _mm512_setzero_ps(); };
    __m512 l = _mm512_setzero_ps();
    int64_t i = 0;
    // Four pairs of keys at a time while they are all below n: their eight e^x, chains of ~25
    // dependent operations each, side by side, which the core overlaps where one pair at a time
    // left it waiting on their latency. The same sums in the same order. kernels_bench, Zen 5,
    // 3 interleaved rounds: 1024 tokens 0.89-0.98x the time, 256 0.97-1.0x; eight pairs no
    // better.
    for (; 2 * i + 8 <= n; i += 4) {
      __m512 p[8];
#pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) p[k] = exp_at(2 * i + k);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        l = _mm512_add_ps(_mm512_add_ps(l, p[2 * k]), p[2 * k + 1]);
        const __m512i pk = PairsOf(avx512::RoundBf16(p[2 * k]), avx512::RoundBf16(p[2 * k + 1]));
        _mm512_storeu_si512(pt + (i + k) * kRows + 16 * h, pk);
      }
    }
    for (; i < (n + 1) / 2; ++i) {
      const __m512 p0 = p_of(2 * i), p1 = p_of(2 * i + 1);
      l = _mm512_add_ps(_mm512_add_ps(l, p0), p1);
      _mm512_storeu_si512(pt + i * kRows + 16 * h,
                          PairsOf(avx512::RoundBf16(p0), avx512::RoundBf16(p1)));
    }
    _mm512_storeu_ps(inv + 16 * h, _mm512_div_ps(_mm512_set1_ps(1.0f), l));
  }
}

// ot[c0 + c, r] = bf16(inv[r] · Σ_i pt[i, r] · values[i, c0 + c]) for c < CT (all 32 rows).
template <int CT>
void ValueTile(const uint32_t* pt, const uint32_t* values, int64_t pairs, int64_t d, int64_t c0,
               const float* inv, float* ot) {
  __m512 acc[CT][2];
  PairDots(pt, values + c0, d, 1, pairs, acc);
  const __m512 inv0 = _mm512_loadu_ps(inv), inv1 = _mm512_loadu_ps(inv + 16);
#pragma GCC unroll 8
  for (int c = 0; c < CT; ++c) {
    _mm512_storeu_ps(ot + (c0 + c) * kRows, avx512::RoundBf16(_mm512_mul_ps(acc[c][0], inv0)));
    _mm512_storeu_ps(ot + (c0 + c) * kRows + 16,
                     avx512::RoundBf16(_mm512_mul_ps(acc[c][1], inv1)));
  }
}

// out[r, c] = ot[c, r] for r < rows, c < d, once every value tile is done: read back at once, a
// tile's vector stores stalled the scalar loads (perf: ~18% of the tiles' samples).
void ValueTiles(const uint32_t* pt, const uint32_t* values, int64_t pairs, int64_t d,
                const float* inv, float* ot, int64_t rows, float* out, int64_t out_ld) {
  int64_t c0 = 0;
  for (; c0 + kDimTile <= d; c0 += kDimTile) {
    ValueTile<kDimTile>(pt, values, pairs, d, c0, inv, ot);
  }
  switch (d - c0) {  // d is even
    case 2: ValueTile<2>(pt, values, pairs, d, c0, inv, ot); break;
    case 4: ValueTile<4>(pt, values, pairs, d, c0, inv, ot); break;
    case 6: ValueTile<6>(pt, values, pairs, d, c0, inv, ot); break;
    default: break;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < d; ++c) out[r * out_ld + c] = ot[c * kRows + r];
  }
}

// A task's scratch, per thread: the rows' query pairs, Sᵀ, P's pairs, the output tiles and
// 1 / Σ p.
struct RowScratch {
  std::vector<uint32_t> qt, pt;
  std::vector<float> st, ot;
  alignas(64) float inv[kRows];
};

// Rows [0, rows) (≤ 32) of q for one head against all n keys of hp, into out.
void AttendRows(const float* q, int64_t ld, int64_t rows, HeadPairs hp, int64_t n, int64_t d,
                float scale, float* out, int64_t out_ld, RowScratch& rs) {
  const int64_t dp = d / 2, keys = PaddedKeys(n), pairs = (n + 1) / 2;
  rs.qt.resize(dp * kRows), rs.st.resize(keys * kRows), rs.pt.resize(pairs * kRows);
  rs.ot.resize(d * kRows);
  for (int64_t p = 0; p < dp; ++p) {
    for (int64_t r = 0; r < kRows; ++r) {  // rows past `rows`: zero queries
      rs.qt[p * kRows + r] =
          r < rows ? Bf16PairOf(q[r * ld + 2 * p], q[r * ld + 2 * p + 1]) : 0;
    }
  }
  __m512 mx[2] = {_mm512_set1_ps(-INFINITY), _mm512_set1_ps(-INFINITY)};
  for (int64_t j0 = 0; j0 < keys; j0 += kKeyTile) {
    ScoreTile(rs.qt.data(), hp.keys, dp, j0, n, rs.st.data(), mx);
  }
  Softmax(rs.st.data(), n, scale, mx, rs.pt.data(), rs.inv);
  ValueTiles(rs.pt.data(), hp.values, pairs, d, rs.inv, rs.ot.data(), rows, out, out_ld);
}

}  // namespace

void DenseAttentionBf16Avx512(const float* q, const float* k, const float* v, int64_t ld,
                              int64_t n, int64_t heads, int64_t d, float scale, float* out,
                              int64_t out_ld, ThreadPool& pool) {
  const int64_t keys = PaddedKeys(n), pairs = (n + 1) / 2;
  const int64_t head_elems = keys * (d / 2) + d * pairs;
  // The caller's scratch, kept (one caller at a time: ParallelFor is not reentrant).
  thread_local std::vector<uint32_t> scratch;
  scratch.resize(heads * head_elems);
  uint32_t* const packed = scratch.data();  // in a pool task the name is that thread's variable
  const auto head_pairs = [&](int64_t h) {
    uint32_t* base = packed + h * head_elems;
    return HeadPairs{base, base + keys * (d / 2)};
  };
  pool.ParallelFor(heads, [&](int64_t h, int) {
    PackHead(k + h * d, v + h * d, ld, n, d, head_pairs(h));
  });
  // Tasks head by head, so that the threads share a head's pairs while they are in the caches.
  const int64_t blocks = (n + kRows - 1) / kRows;
  pool.ParallelFor(heads * blocks, [&](int64_t task, int) {
    thread_local RowScratch rs;
    const int64_t h = task / blocks, t0 = task % blocks * kRows;
    AttendRows(q + t0 * ld + h * d, ld, std::min(kRows, n - t0), head_pairs(h), n, d, scale,
               out + t0 * out_ld + h * d, out_ld, rs);
  });
}

}  // namespace CPM_AVX512_NAMESPACE
