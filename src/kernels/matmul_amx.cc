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
#include <cstring>

#include "kernels/amx.h"
#include "kernels/matmul_impl.h"
#include "kernels/simd_avx512.h"

namespace cpm::kernels {
namespace {

// Tiles: 0, 1 the sums of rows [0, 16) × columns [0, 16), [16, 32); 2, 3 the same for rows
// [16, 32); 4, 5 x's rows [0, 16) and [16, 32); 6, 7 the weights of columns [0, 16), [16, 32).
// `rows0`, `rows1`: the block's rows in each half (rows1 may be 0: tiles 2, 3, 5 unused);
// `pairs`: the k pairs one step takes (16, or the tail).
AmxTileConfig MakeConfig(int rows0, int rows1, int pairs) {
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

// The configuration this thread's tiles have, loaded only when it changes.
class Tiles {
 public:
  void Use(int rows0, int rows1, int pairs) {
    const AmxTileConfig want = MakeConfig(rows0, rows1, pairs);
    if (loaded_ && std::memcmp(&want, &current_, sizeof want) == 0) return;
    current_ = want;
    LoadTileConfig(current_);
    loaded_ = true;
  }
  // Hands the tile state back (TILERELEASE), so that a sleeping worker's context switches do
  // not carry 8 KiB of it.
  ~Tiles() {
    if (loaded_) _tile_release();
  }

 private:
  AmxTileConfig current_;
  bool loaded_ = false;
};

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
      for (int j = 0; j < 32; ++j) _mm_prefetch(b + kPrefetchBytes + j * 64, _MM_HINT_T0);
    }
    if constexpr (kPrefetch == Prefetch::kL1AndL2) {
      for (int j = 0; j < 32; ++j) _mm_prefetch(b + kPrefetchL2Bytes + j * 64, _MM_HINT_T1);
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

}  // namespace

// Each panel in turn, all row blocks against it, so that the panel (128 bytes per k pair: 64-256
// KiB at these models' widths) is read from memory once and reused from L2 by every block.
// Every sum runs over k pairs in order from 0 (its tail's partial sums parked in f32 and
// reloaded, which moves no bit), whatever m, the row's block or the thread: as batch invariant
// as the AVX-512 tiles. Not bitwise theirs: on an Emerald Rapids Xeon 62% of the sums of a
// 48 × 256 problem differed in their last bits from vdpbf16ps's (and from f32 FMAs on the
// widened pairs), which is why MatMul sends every call to AMX, not only tall ones.
void MatMulPanelsAmx(const uint32_t* pairs, int64_t pairs_stride, int64_t m, const PackedWeight& pw,
                     int64_t panel_begin, int64_t panel_end, float* y, int64_t y_stride,
                     Round round) {
  const int64_t k_pairs = (pw.k + 1) / 2, full = k_pairs / 16, tail = k_pairs % 16;
  const int64_t xs = pairs_stride * static_cast<int64_t>(sizeof(uint32_t));
  const char* data = reinterpret_cast<const char*>(pw.data.as<uint16_t>());
  const int64_t panel_bytes = pw.panel_elems * static_cast<int64_t>(sizeof(uint16_t));
  const bool to_bf16 = round == Round::kBf16;
  alignas(64) float sums[32][32];
  Tiles tiles;
  for (int64_t p = panel_begin; p < panel_end; ++p) {
    const char* panel = data + p * panel_bytes;
    const int64_t cols = std::min<int64_t>(32, pw.n - p * 32);
    float* yp = y + (p - panel_begin) * 32;
    for (int64_t i0 = 0; i0 < m; i0 += 32) {
      const int rows = static_cast<int>(std::min<int64_t>(32, m - i0));
      const int rows0 = std::min(16, rows), rows1 = rows - rows0;
      const bool two = rows1 > 0;
      const char* x = reinterpret_cast<const char*>(pairs + i0 * pairs_stride);
      if (full > 0) {
        tiles.Use(rows0, rows1, 16);
        ZeroSums(two);
        if (m == 1) {
          Steps<false, Prefetch::kL1>(x, xs, panel, full);
        } else if (m <= 32) {
          if (two) Steps<true, Prefetch::kL1AndL2>(x, xs, panel, full);
          else Steps<false, Prefetch::kL1AndL2>(x, xs, panel, full);
        } else {
          if (two) Steps<true, Prefetch::kNone>(x, xs, panel, full);
          else Steps<false, Prefetch::kNone>(x, xs, panel, full);
        }
      }
      if (tail > 0) {
        if (full > 0) StoreSums(sums, two);
        tiles.Use(rows0, rows1, static_cast<int>(tail));
        if (full > 0) LoadSums(sums, two);
        else ZeroSums(two);
        const int64_t at = full * 16;
        if (two) Steps<true, Prefetch::kNone>(x + at * 4, xs, panel + at * 128, 1);
        else Steps<false, Prefetch::kNone>(x + at * 4, xs, panel + at * 128, 1);
      }
      StoreSums(sums, two);
      CopyOut(sums, rows, cols, yp + i0 * y_stride, y_stride, to_bf16);
    }
  }
}

}  // namespace cpm::kernels
