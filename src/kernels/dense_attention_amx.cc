// AMX bidirectional attention (DenseAttention with bf16 values, dense_attention.h) for the
// vision tower: one task per 32 query rows of a head, as the AVX-512 BF16 kernel, with its two
// products on AMX tiles (TDPBF16PS: 16 rows × 32 bf16 against 16 pairs × 16 columns). The scores
// S [32, n] are Q [32, d] times the head's keys laid out as tile columns, the exact softmax runs
// down each row of S, and P·V is P's bf16 pairs [32, n] times the values' pairs. Both products
// use one tile configuration (every tile 16 rows of 64 bytes): tiles 0-3 the sums of rows
// [0, 16) and [16, 32) × two column tiles, 4 and 5 the rows' operand, 6 and 7 the columns'.
// Their k runs over d's pairs (scores) or n's key pairs (P·V), padded with zero pairs to whole
// tiles, which add exact zeros; padded keys are left out of the max and get P = 0.
// Numerics as the AVX-512 kernel's (bf16 products, f32 sums, P rounded to bf16, the output
// bf16(Σ P·v / Σ p)), the sums in the tiles' order: each output within the tests' tolerance of
// the reference, not bitwise the AVX-512 kernel's (a slice is always encoded whole, by one
// kernel on a given machine, so no batch invariance is at stake). Built with CPM_AVX512_FLAGS
// plus -mamx-tile -mamx-bf16; called only where AmxChoice().on.
// kernels_bench BM_DenseAttention (16 heads of 72 dims, as the V-4.6 tower), 2 vCPUs of a Xeon
// with AMX, 3 interleaved rounds against the AVX-512 kernel (CPM_AMX=0): 1024 tokens 25.5-26.0
// -> 9.95-10.0 ms, 256 tokens 1.85-1.90 -> 0.92; `cpmserve bench` at V-4.6's dimensions, a
// 448-pixel slice's encode 536-545 -> 418-435 ms. perf then puts ~40% of the kernel in the tile
// instructions and ~30% in the softmax.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/amx.h"
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kRows = 32;  // query rows per task: two tiles of 16
constexpr int64_t kTile = 16;  // a tile's rows, columns and pairs

constexpr int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// One head's sizes: d's pairs padded to whole tiles (dp_pad), keys padded to two column tiles of
// scores (n_pad, also P·V's k: 16 key pairs a step), value dims padded to two column tiles.
struct Dims {
  int64_t n, d, dp, dp_pad, n_pad, d_pad;
};
Dims MakeDims(int64_t n, int64_t d) {
  return {n, d, d / 2, RoundUp(d / 2, kTile), RoundUp(n, 2 * kTile), RoundUp(d, 2 * kTile)};
}

// One head's keys and values in the tiles' column layouts (a view into the call's scratch):
// keys[(b·dp_pad + p)·16 + j] = (k_t[2p], k_t[2p+1]) for key t = 16b + j, so that a block of 16
// keys and 16 pairs is one tile of 64-byte rows; values[i·d_pad + c] = (v_2i[c], v_2i+1[c]),
// key pair i's row of every dim. Zero past n and past d.
struct HeadTiles {
  uint32_t* keys;
  uint32_t* values;
};

void PackHead(const float* k, const float* v, int64_t ld, const Dims& dm, HeadTiles ht) {
  for (int64_t t = 0; t < dm.n_pad; ++t) {
    uint32_t* col = ht.keys + (t / kTile) * dm.dp_pad * kTile + t % kTile;
    const float* kt = k + std::min(t, dm.n - 1) * ld;  // read only below n and dp
    for (int64_t p = 0; p < dm.dp_pad; ++p) {
      col[p * kTile] = t < dm.n && p < dm.dp ? Bf16PairOf(kt[2 * p], kt[2 * p + 1]) : 0;
    }
  }
  const __m512i high_half = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t i = 0; i < dm.n_pad / 2; ++i) {
    const bool has0 = 2 * i < dm.n, has1 = 2 * i + 1 < dm.n;
    const float* v0 = v + (has0 ? 2 * i : 0) * ld;
    uint32_t* row = ht.values + i * dm.d_pad;
    for (int64_t c = 0; c < dm.d_pad; c += 16) {
      const __mmask16 m = avx512::FirstLanes(dm.d - c);
      const __m512 lo = has0 ? avx512::MaskzLoadu(m, v0 + c) : _mm512_setzero_ps();
      const __m512 hi = has1 ? avx512::MaskzLoadu(m, v0 + ld + c) : _mm512_setzero_ps();
      const __m512i pairs = _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(lo), 16),
                                            _mm512_and_si512(_mm512_castps_si512(hi), high_half));
      _mm512_storeu_si512(row + c, pairs);
    }
  }
}

// A task's scratch, per thread: the rows' query pairs [32][dp_pad], S [32][n_pad], P's pairs
// [32][n_pad / 2], the outputs [32][d_pad] and each row's 1 / Σ p.
struct RowScratch {
  std::vector<uint32_t> qa, pa;
  std::vector<float> s, o;
  alignas(64) float inv[kRows];
};

// Tiles 0-3 += rows [0, 32) of `a` (pairs `as` bytes apart) × the two column tiles at b0 and b1
// (rows `bs` bytes apart), over `steps` steps of 16 pairs (a step: `a_step` and `b_step` bytes).
void Products(const char* a, int64_t as, int64_t a_step, const char* b0, const char* b1,
              int64_t bs, int64_t b_step, int64_t steps) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, a + s * a_step, as);
    _tile_loadd(5, a + s * a_step + kTile * as, as);
    _tile_loadd(6, b0 + s * b_step, bs);
    _tile_loadd(7, b1 + s * b_step, bs);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
}

// Tiles 0-3 into c ([32][…] f32, rows `cs` bytes apart), at columns [0, 32).
void StoreProducts(float* c, int64_t cs) {
  char* base = reinterpret_cast<char*>(c);
  _tile_stored(0, base, cs);
  _tile_stored(1, base + 64, cs);
  _tile_stored(2, base + kTile * cs, cs);
  _tile_stored(3, base + kTile * cs + 64, cs);
}

// Row r's softmax over its scores s[0, n) (the max of those only): P's bf16 pairs into
// pa[0, n_pad / 2) (zero past n), 1 / Σ p into *inv.
void SoftmaxRow(const float* s, const Dims& dm, float scale, uint32_t* pa, float* inv) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < dm.n; j += 16) {
    mx = _mm512_max_ps(mx, _mm512_mask_loadu_ps(mx, avx512::FirstLanes(dm.n - j), s + j));
  }
  const __m512 m = _mm512_set1_ps(_mm512_reduce_max_ps(mx)), vs = _mm512_set1_ps(scale);
  __m512 l = _mm512_setzero_ps();
  for (int64_t j = 0; j < dm.n_pad; j += 32) {
    const __mmask16 m0 = avx512::FirstLanes(dm.n - j), m1 = avx512::FirstLanes(dm.n - j - 16);
    const __m512 p0 = _mm512_maskz_mov_ps(
        m0, avx512::Exp(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j), m), vs)));
    const __m512 p1 = _mm512_maskz_mov_ps(
        m1, avx512::Exp(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(s + j + 16), m), vs)));
    l = _mm512_add_ps(l, _mm512_add_ps(p0, p1));
    // bf16 of keys j..j+31 in order, round to nearest even: pair u = keys (j + 2u, j + 2u + 1).
    _mm512_storeu_si512(pa + j / 2, (__m512i)_mm512_cvtne2ps_pbh(p1, p0));
  }
  *inv = 1.0f / _mm512_reduce_add_ps(l);
}

// Rows [0, rows) (≤ 32) of q for one head against all keys of ht, into out.
void AttendRows(const float* q, int64_t ld, int64_t rows, const Dims& dm, HeadTiles ht,
                float scale, float* out, int64_t out_ld, RowScratch& rs) {
  const int64_t kp = dm.n_pad / 2;  // P's pairs per row
  rs.qa.resize(kRows * dm.dp_pad);
  rs.s.resize(kRows * dm.n_pad);
  rs.pa.resize(kRows * kp);
  rs.o.resize(kRows * dm.d_pad);
  for (int64_t r = 0; r < kRows; ++r) {  // rows past `rows`: zero queries
    for (int64_t p = 0; p < dm.dp_pad; ++p) {
      rs.qa[r * dm.dp_pad + p] =
          r < rows && p < dm.dp ? Bf16PairOf(q[r * ld + 2 * p], q[r * ld + 2 * p + 1]) : 0;
    }
  }
  // S, 32 keys (two blocks of 16) at a time.
  const char* qa = reinterpret_cast<const char*>(rs.qa.data());
  const int64_t block = dm.dp_pad * kTile * 4;  // bytes of a block of 16 keys
  for (int64_t j = 0; j < dm.n_pad; j += 2 * kTile) {
    const char* k0 = reinterpret_cast<const char*>(ht.keys) + j / kTile * block;
    Products(qa, dm.dp_pad * 4, kTile * 4, k0, k0 + block, kTile * 4, kTile * kTile * 4,
             dm.dp_pad / kTile);
    StoreProducts(rs.s.data() + j, dm.n_pad * 4);
  }
  for (int64_t r = 0; r < kRows; ++r) {
    if (r < rows) {
      SoftmaxRow(rs.s.data() + r * dm.n_pad, dm, scale, rs.pa.data() + r * kp, &rs.inv[r]);
    } else {
      std::fill_n(rs.pa.data() + r * kp, kp, 0u);
    }
  }
  // P·V, 32 value dims at a time.
  const char* pa = reinterpret_cast<const char*>(rs.pa.data());
  const char* values = reinterpret_cast<const char*>(ht.values);
  for (int64_t c = 0; c < dm.d_pad; c += 2 * kTile) {
    Products(pa, kp * 4, kTile * 4, values + c * 4, values + (c + kTile) * 4, dm.d_pad * 4,
             kTile * dm.d_pad * 4, kp / kTile);
    StoreProducts(rs.o.data() + c, dm.d_pad * 4);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const __m512 inv = _mm512_set1_ps(rs.inv[r]);
    for (int64_t c = 0; c < dm.d; c += 16) {
      const __m512 o = _mm512_loadu_ps(rs.o.data() + r * dm.d_pad + c);
      avx512::MaskStoreu(out + r * out_ld + c, avx512::FirstLanes(dm.d - c),
                         avx512::RoundBf16(_mm512_mul_ps(o, inv)));
    }
  }
}

}  // namespace

void DenseAttentionBf16Amx(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                           int64_t heads, int64_t d, float scale, float* out, int64_t out_ld,
                           ThreadPool& pool) {
  const Dims dm = MakeDims(n, d);
  const int64_t head_elems = dm.n_pad * dm.dp_pad + dm.n_pad / 2 * dm.d_pad;
  // The caller's scratch, kept (one caller at a time: ParallelFor is not reentrant).
  thread_local std::vector<uint32_t> scratch;
  scratch.resize(heads * head_elems);
  uint32_t* const packed = scratch.data();  // in a pool task the name is that thread's variable
  const auto head_tiles = [&](int64_t h) {
    uint32_t* base = packed + h * head_elems;
    return HeadTiles{base, base + dm.n_pad * dm.dp_pad};
  };
  pool.ParallelFor(heads, [&](int64_t h, int) {
    PackHead(k + h * d, v + h * d, ld, dm, head_tiles(h));
  });
  const AmxTileConfig config = TilesOf64Bytes(kTile);
  // Tasks head by head, so that the threads share a head's tiles while they are in the caches.
  const int64_t blocks = (n + kRows - 1) / kRows;
  pool.ParallelFor(heads * blocks, [&](int64_t task, int) {
    thread_local RowScratch rs;
    const int64_t h = task / blocks, t0 = task % blocks * kRows;
    UseTileConfig(config);  // a load only where the thread's tiles had another shape
    AttendRows(q + t0 * ld + h * d, ld, std::min(kRows, n - t0), dm, head_tiles(h), scale,
               out + t0 * out_ld + h * d, out_ld, rs);
  });
}

}  // namespace cpm::kernels
