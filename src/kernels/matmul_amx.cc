// AMX (Intel's Advanced Matrix Extensions, Sapphire Rapids and later) for the bf16 pair panels:
// TDPBF16PS multiplies a 16-row × 32-bf16 tile of x by a 16-pair × 16-column tile of weights
// into 16 × 16 f32 sums, 16384 FLOPs per instruction. Built with CPM_AVX512_FLAGS plus
// -mamx-tile -mamx-bf16; run only where AmxUsable() (amx.h) said so.
//
// Both operands are already in AMX's layouts: a row of Avx512X's pair array is a row of bf16 x
// in k order (tile A), and kPanel32Bf16Pairs's panel row kk holds (k = 2kk, 2kk + 1) of its 32
// columns, 128 bytes, so 16 consecutive pair rows at stride 128 are tile B for columns 0-15, and
// the same at +64 bytes for columns 16-31.
#include <immintrin.h>

#include <algorithm>
#include <array>

#include "base/aligned_buffer.h"
#include "kernels/amx.h"
#include "kernels/matmul_impl.h"
#include "kernels/prefetch.h"
#include "kernels/simd_avx512.h"

namespace cpm::kernels {
namespace {

// Tiles: 0, 1 the sums of rows [0, 16) × columns [0, 16), [16, 32); 2, 3 the same for rows
// [16, 32); 4, 5 x's rows [0, 16) and [16, 32); 6, 7 the weights of columns [0, 16), [16, 32).
// `rows0`, `rows1`: the block's rows in each half (rows1 may be 0: tiles 2, 3, 5 unused);
// `pairs`: the k pairs one step takes (16, or the tail).
constexpr AmxTileConfig MakeConfig(int rows0, int rows1, int pairs) {
  AmxTileConfig c;
  for (int t : {0, 1, 2, 3}) c.colsb[t] = 64;
  c.rows[0] = c.rows[1] = static_cast<uint8_t>(rows0);
  c.rows[2] = c.rows[3] = static_cast<uint8_t>(rows1);
  c.colsb[4] = c.colsb[5] = static_cast<uint16_t>(4 * pairs);
  c.rows[4] = static_cast<uint8_t>(rows0);
  c.rows[5] = static_cast<uint8_t>(rows1);
  c.colsb[6] = c.colsb[7] = 64;
  c.rows[6] = c.rows[7] = static_cast<uint8_t>(pairs);
  for (int t : {2, 3, 5}) {
    if (rows1 == 0) c.colsb[t] = 0;
  }
  return c;
}

// Weights requested this far ahead of the tile loads in decode-sized calls (one row block, which
// streams each panel from memory once). A tile load waits for all 16 of its lines; the hardware
// prefetchers alone left MiniCPM4-0.5B's batch-1 decode at ~20 GB/s of the 35 two threads read
// (2 vCPUs of a Xeon with AMX); 8 KiB ahead: +8-15% (interleaved runs). Prefill's tall calls
// are compute-bound and reuse each panel from L2: no requests there.
constexpr int64_t kPrefetchBytes = 8192;
// Calls of several rows also request the weights into L2 this far ahead: their tile products
// take long enough that the 8 KiB above no longer hide DRAM's latency. A decode step's matmuls
// at 16 rows: 32.8 -> 34.5 GB/s of ~36 (interleaved runs); at 1 and 4 rows level, so not there.
constexpr int64_t kPrefetchL2Bytes = 24576;

// Which of those requests a call's steps make: none (prefill's tall calls), the L1 ones (one
// row), both (2-32 rows).
enum class Prefetch { kNone, kL1, kL1AndL2 };

// Sums of a block of up to 32 rows (x rows `xs` bytes apart) × one panel's 32 columns over the
// `steps` 16-pair steps from `x` and `panel` on (a tail step: the pairs the tiles are configured
// for), added to tiles 0-3 (kTwo: both row halves). The weights' pair rows are 128 bytes apart.
template <bool kTwo, Prefetch kPrefetch>
void Steps(const char* x, int64_t xs, const char* panel, int64_t steps) {
  for (int64_t s = 0; s < steps; ++s) {
    const char* b = panel + s * 16 * 128;
    const char* a = x + s * 64;
    if constexpr (kPrefetch != Prefetch::kNone) {
      for (int j = 0; j < 32; ++j) PrefetchL1(b + kPrefetchBytes + j * 64);
    }
    if constexpr (kPrefetch == Prefetch::kL1AndL2) {
      for (int j = 0; j < 32; ++j) PrefetchL2(b + kPrefetchL2Bytes + j * 64);
    }
    _tile_loadd(6, b, 128);
    _tile_loadd(7, b + 64, 128);
    _tile_loadd(4, a, xs);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kTwo) {
      _tile_loadd(5, a + 16 * xs, xs);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
}

// Tiles 0-3 to/from the block's 32 × 32 f32 scratch (row stride 128 bytes).
void StoreSums(float (*c)[32], bool two) {
  _tile_stored(0, &c[0][0], 128);
  _tile_stored(1, &c[0][16], 128);
  if (two) {
    _tile_stored(2, &c[16][0], 128);
    _tile_stored(3, &c[16][16], 128);
  }
}

void LoadSums(float (*c)[32], bool two) {
  _tile_loadd(0, &c[0][0], 128);
  _tile_loadd(1, &c[0][16], 128);
  if (two) {
    _tile_loadd(2, &c[16][0], 128);
    _tile_loadd(3, &c[16][16], 128);
  }
}

void ZeroSums(bool two) {
  _tile_zero(0);
  _tile_zero(1);
  if (two) {
    _tile_zero(2);
    _tile_zero(3);
  }
}

// The block's sums into y (rows `ys` floats apart), `cols` valid columns, rounded to bf16 first
// when asked.
void CopyOut(const float (*c)[32], int rows, int64_t cols, float* y, int64_t ys, bool round) {
  const __mmask16 m0 = avx512::FirstLanes(cols), m1 = avx512::FirstLanes(cols - 16);
  for (int r = 0; r < rows; ++r) {
    __m512 v0 = _mm512_load_ps(&c[r][0]), v1 = _mm512_load_ps(&c[r][16]);
    if (round) {
      v0 = avx512::RoundBf16(v0);
      v1 = avx512::RoundBf16(v1);
    }
    _mm512_mask_storeu_ps(y + r * ys, m0, v0);
    _mm512_mask_storeu_ps(y + r * ys + 16, m1, v1);
  }
}

// The block's sums rounded to bf16 into bf16 rows y (`ys` elements apart): a row's 32 columns
// are one 64-byte store, where f32 rows take two.
void CopyOut(const float (*c)[32], int rows, int64_t cols, uint16_t* y, int64_t ys) {
  const __mmask32 m = cols >= 32 ? ~__mmask32{0} : (__mmask32{1} << cols) - 1;
  for (int r = 0; r < rows; ++r) {
    const __m512 v0 = avx512::RoundBf16(_mm512_load_ps(&c[r][0]));
    const __m512 v1 = avx512::RoundBf16(_mm512_load_ps(&c[r][16]));
    _mm512_mask_storeu_epi16(y + r * ys, m, avx512::Bf16Pairs(v0, v1));
  }
}

// x read from L2: a call's whole x where it fits (MiniCPM4's 512-row prefill at k = 1024,
// 1 MiB), else groups of kGroupRows rows and chunks of kChunkXBytes of their x. A tile load
// from L2 already costs TDPBF16PS a good part of its rate (a standalone loop, one thread: ~75%
// of the no-load peak with both operands from L2, 100% from L1); x from L3 left a third of it.
// kernels_bench BM_MatMulPrefill, 2 vCPUs of a Xeon with AMX, best of 3 interleaved rounds,
// TFLOP/s unblocked -> blocked: 512 × 1024 × 4096 (down_proj) 1.73 -> 1.95, 2048 × 4096 × 1024
// 1.62 -> 2.34, 2048 × 1024 × 4096 1.63 -> 2.02, V-4.6's vision MLP (1024 patches) 1.75 ->
// 2.35 and 1.65 -> 1.86. 256-row groups did less (1.8 / 2.3 / 1.8), 512 KiB or 1 MiB chunks
// alike; grouping 512 × 1024 (1.67 -> 1.48 standalone) reads its panels twice.
constexpr int64_t kPlainXBytes = int64_t{5} << 18;  // 1.25 MiB
constexpr int64_t kGroupRows = 128;
constexpr int64_t kChunkXBytes = int64_t{512} << 10;
// Panels that share a group's chunks before the next batch: their parked sums, 4 KiB per 32-row
// block, stay in L2 (128 KiB at 128-row groups).
constexpr int64_t kPanelsPerBatch = 8;

}  // namespace

AmxBlocking AmxBlockingFor(int64_t m, int64_t k) {
  const int64_t full = (k + 1) / 2 / 16;
  const int64_t x_row_bytes = PairsStride(k) * static_cast<int64_t>(sizeof(uint32_t));
  if (m <= 32 || m * x_row_bytes <= kPlainXBytes) return {m, std::max<int64_t>(full, 1)};
  const int64_t steps = kChunkXBytes / (kGroupRows * 64);  // a step reads 64 bytes of a row
  return {kGroupRows, std::clamp<int64_t>(steps, 1, std::max<int64_t>(full, 1))};
}

namespace {

// What every block of one call shares.
struct Call {
  const char* x;  // row 0's pairs
  int64_t xs;     // bytes between rows
  int64_t m, full, tail;
  float* y;       // the first panel's column 0 of row 0, f32 rows; or
  uint16_t* y16;  // the same in bf16 rows (the sums rounded)
  int64_t y_stride;
  bool to_bf16;
};

// The tile shapes of a block of `rows` rows (≤ 32: tiles 0-1 and 4 for the first 16, 2-3 and 5
// for the rest) over steps of `pairs` k pairs (≤ 16), made at compile time: UseTileConfig
// compares a block's shapes with the thread's, and comparing a configuration built just before,
// byte by byte, waited on those byte stores (perf: 1.4% of a pp512 run's samples on the
// compare's first load; 0.22% of a pp512 and batch-16 run's with this table).
using BlockTileTable = std::array<std::array<AmxTileConfig, 17>, 33>;
constexpr BlockTileTable kBlockTiles = [] {
  BlockTileTable t{};
  for (int rows = 1; rows <= 32; ++rows) {
    const int rows0 = std::min(16, rows);
    for (int pairs = 1; pairs <= 16; ++pairs) {
      t[rows][pairs] = MakeConfig(rows0, rows - rows0, pairs);
    }
  }
  return t;
}();

// Block [i0, i0 + 32) × `panel` (its columns `cols` valid, its y from column `col0` on) over
// the full steps [s0, s1), its sums from zero (s0 == 0) or from `park`; then into `park` when
// more chunks follow, else the tail step too and out to y.
void Block(const Call& c, const char* panel, int64_t cols, int64_t col0, int64_t i0,
           int64_t s0, int64_t s1, bool last, float (*park)[32]) {
  const int rows = static_cast<int>(std::min<int64_t>(32, c.m - i0));
  const bool two = rows > 16;  // tiles 2, 3 and 5 hold rows [16, 32)
  const char* x = c.x + i0 * c.xs;
  if (s1 > s0) {
    UseTileConfig(kBlockTiles[rows][16]);
    if (s0 == 0) ZeroSums(two);
    else LoadSums(park, two);
    const char* xk = x + s0 * 64;
    const char* pk = panel + s0 * 16 * 128;
    if (c.m == 1) {
      Steps<false, Prefetch::kL1>(xk, c.xs, pk, s1 - s0);
    } else if (c.m <= 32) {
      if (two) Steps<true, Prefetch::kL1AndL2>(xk, c.xs, pk, s1 - s0);
      else Steps<false, Prefetch::kL1AndL2>(xk, c.xs, pk, s1 - s0);
    } else {
      if (two) Steps<true, Prefetch::kNone>(xk, c.xs, pk, s1 - s0);
      else Steps<false, Prefetch::kNone>(xk, c.xs, pk, s1 - s0);
    }
  }
  if (!last) return StoreSums(park, two);
  alignas(64) float sums[32][32];
  if (c.tail > 0) {
    if (c.full > 0) StoreSums(sums, two);
    UseTileConfig(kBlockTiles[rows][c.tail]);
    if (c.full > 0) LoadSums(sums, two);
    else ZeroSums(two);
    const int64_t at = c.full * 16;
    if (two) Steps<true, Prefetch::kNone>(x + at * 4, c.xs, panel + at * 128, 1);
    else Steps<false, Prefetch::kNone>(x + at * 4, c.xs, panel + at * 128, 1);
  }
  StoreSums(sums, two);
  const int64_t y_at = i0 * c.y_stride + col0;
  if (c.y16 != nullptr) return CopyOut(sums, rows, cols, c.y16 + y_at, c.y_stride);
  CopyOut(sums, rows, cols, c.y + y_at, c.y_stride, c.to_bf16);
}

// Panels in batches of kPanelsPerBatch; in a batch, each group's rows chunk by chunk, every
// panel of the batch against a chunk before the next: each panel (128 bytes per k pair: 64-256
// KiB at these models' widths) comes from memory once and serves the whole group from L2, and
// the group's chunk of x serves every panel from L2. Every sum runs over k pairs in order from
// 0 (its partial sums parked in f32 between chunks and before the tail step, which moves no
// bit), whatever m, the blocking, the row's block or the thread: as batch invariant as the
// AVX-512 tiles. Not bitwise theirs: on an Emerald Rapids Xeon 62% of the sums of a 48 × 256
// problem differed in their last bits from vdpbf16ps's (and from f32 FMAs on the widened
// pairs), which is why MatMul sends every call to AMX, not only tall ones.
void PanelsAmx(const Call& c, const PackedWeight& pw, int64_t panel_begin, int64_t panel_end,
               const AmxBlocking* blocking) {
  const int64_t m = c.m;
  const AmxBlocking b = blocking ? *blocking : AmxBlockingFor(m, pw.k);
  const int64_t chunk = std::max<int64_t>(b.chunk_steps, 1);
  const int64_t chunks = c.full > 0 ? (c.full + chunk - 1) / chunk : 1;
  const int64_t group_blocks = (b.group_rows + 31) / 32;
  const char* data = reinterpret_cast<const char*>(pw.data.as<uint16_t>());
  const int64_t panel_bytes = pw.panel_elems * static_cast<int64_t>(sizeof(uint16_t));
  // Parked sums of a batch × group: one 32 × 32 block each, only where there are chunks to
  // park between.
  thread_local AlignedBuffer parked;
  const size_t park_bytes =
      chunks > 1 ? static_cast<size_t>(kPanelsPerBatch * group_blocks) * sizeof(float[32][32]) : 0;
  if (parked.size() < park_bytes) parked.Resize(park_bytes);
  auto* park = reinterpret_cast<float(*)[32][32]>(parked.as<float>());
  for (int64_t p0 = panel_begin; p0 < panel_end; p0 += kPanelsPerBatch) {
    const int64_t p1 = std::min(panel_end, p0 + kPanelsPerBatch);
    for (int64_t g0 = 0; g0 < m; g0 += group_blocks * 32) {
      const int64_t g1 = std::min(m, g0 + group_blocks * 32);
      for (int64_t ci = 0; ci < chunks; ++ci) {
        const int64_t s0 = ci * chunk, s1 = std::min(c.full, s0 + chunk);
        for (int64_t p = p0; p < p1; ++p) {
          const char* panel = data + p * panel_bytes;
          const int64_t cols = std::min<int64_t>(32, pw.n - p * 32);
          for (int64_t i0 = g0; i0 < g1; i0 += 32) {
            float(*pk)[32] = chunks > 1 ? park[(p - p0) * group_blocks + (i0 - g0) / 32] : nullptr;
            Block(c, panel, cols, (p - panel_begin) * 32, i0, s0, s1, ci == chunks - 1, pk);
          }
        }
      }
    }
  }
}

// What MatMulPanelsAmx's calls share but their y.
Call CallOf(const uint32_t* pairs, int64_t pairs_stride, int64_t m, const PackedWeight& pw) {
  const int64_t k_pairs = (pw.k + 1) / 2;
  Call c{};
  c.x = reinterpret_cast<const char*>(pairs);
  c.xs = pairs_stride * static_cast<int64_t>(sizeof(uint32_t));
  c.m = m;
  c.full = k_pairs / 16;
  c.tail = k_pairs % 16;
  return c;
}

}  // namespace

void MatMulPanelsAmx(const uint32_t* pairs, int64_t pairs_stride, int64_t m, const PackedWeight& pw,
                     int64_t panel_begin, int64_t panel_end, float* y, int64_t y_stride,
                     Round round, const AmxBlocking* blocking) {
  Call c = CallOf(pairs, pairs_stride, m, pw);
  c.y = y;
  c.y_stride = y_stride;
  c.to_bf16 = round == Round::kBf16;
  PanelsAmx(c, pw, panel_begin, panel_end, blocking);
}

void MatMulPanelsAmx(const uint32_t* pairs, int64_t pairs_stride, int64_t m, const PackedWeight& pw,
                     int64_t panel_begin, int64_t panel_end, uint16_t* y, int64_t y_stride,
                     const AmxBlocking* blocking) {
  Call c = CallOf(pairs, pairs_stride, m, pw);
  c.y16 = y;
  c.y_stride = y_stride;
  PanelsAmx(c, pw, panel_begin, panel_end, blocking);
}

}  // namespace cpm::kernels
