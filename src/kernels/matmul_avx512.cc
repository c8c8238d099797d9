// AVX-512 matmul over packed panels of 32 output columns: register tile ≤ 8 rows × 32 columns.
// bf16 weights are stored as (k, k+1) pairs; with AVX512_BF16 and bf16-exact x (the model's
// activations are bf16 values) it uses vdpbf16ps, else it widens and uses f32 FMAs.
// Ternary weights (BitCPM4) on up to 32 rows run on 2-bit codes decoded to those very bf16
// pairs in registers (VBMI, BMI2). Compiled with -mavx512f/bw/vl/bf16/vbmi -mbmi2 -mfma; only
// called when the CPU has them.
// Tests also compile this file over SIMDe's portable AVX-512 (CPM_EMULATE_AVX512, see
// matmul_avx512_emulated.cc), so that it is checked against the scalar reference on any x86-64.
//
// Batch invariance as in matmul_impl.h: one chain per output element in k order (a k-block
// resumes from y), no k-split, and the bf16-dot / widening choice is made per row of x, so a
// row's result depends on that row alone. Tested natively where the CPU has AVX-512 and under
// emulation everywhere; a CPU runs them once a start-up self-check has found them correct and
// faster than the AVX2 ones (matmul_choice.cc). Short tiles (decode) widen over 3-4 panels;
// weights are prefetched a fixed distance ahead. Outputs are rounded to bf16 as they are stored.
// x's bf16 check and pair packing are done once per call, for all tasks (PrepareXAvx512).
#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/cpu_features.h"
#include "kernels/matmul_impl.h"
#include "kernels/ops_avx512.h"
#include "kernels/prefetch.h"
#include "kernels/simd_avx512.h"

namespace CPM_AVX512_NAMESPACE {
#if defined(CPM_EMULATE_AVX512)
bool g_have_avx512bf16 = true;  // whether the emulated CPU has AVX512_BF16; tests try both
namespace {
bool HaveAvx512Bf16() { return g_have_avx512bf16; }
}  // namespace
#else
namespace {
bool HaveAvx512Bf16() { return GetCpuFeatures().avx512bf16; }
}  // namespace
#endif
namespace {

// k-blocks, in elements of k (even, so pair rows never straddle blocks). Two decode tiles share
// a panel's block from L1 (16 KiB of bf16 pairs). Taller blocks reload and store y at each
// k-block, and a 128-row block's y has left the caches by its next one: 2048 (a 128 KiB panel
// block, read from L2) ran 512-row prefill matmuls 10-25% faster than 256 (Zen 5, 2 threads).
constexpr int64_t kKcShared = 256;
constexpr int64_t kKcTall = 2048;
constexpr int64_t kMc = 128;
// Row stride of two tiles' dense sums (Panels): a panel's 32 columns and a cache line.
constexpr int64_t kBlockStride = 48;
// Software prefetch distance, in bytes of weights per thread, split over the NP panel streams
// a tile reads: a decode tile computes faster than one thread's share of DRAM bandwidth
// delivers, so bytes must be requested well ahead. Measured on a Zen 5 (2 threads, MiniCPM4
// dims, interleaved runs): 1 KiB → 8 KiB raised batch-4 decode ~20% and batch-16 ~40%; 16 KiB
// and an extra far prefetch into L2 were slower.
constexpr int64_t kPrefetchBytes = 8192;

enum class Mode { kF32, kBf16Widen, kBf16Dot };

// Rows of the next of `parts` tiles that share `rows` rows as evenly as possible (16 rows in
// two tiles are 8 + 8, 12 rows 6 + 6; a short tile has fewer chains to hide latency).
constexpr int64_t EvenShare(int64_t rows, int64_t parts) { return (rows + parts - 1) / parts; }

// What a tile works on: rows of x at k-block start, the first of its panels at that k-block,
// its rows of y at the first panel's column 0.
struct TileArgs {
  const void* x;
  int64_t xs;
  const void* panel;
  int64_t panel_stride, kc;
  float* y;
  int64_t ys;
  bool accumulate;  // resume the chains of the earlier k-blocks from y
  bool round;       // the last k-block of a bf16-rounded output: round as y is stored
  int64_t prefetch;  // bytes of weights requested ahead, split over the tile's panel streams
  // Where the finished tile goes, if not back to y: the first panel's column 0 of its rows,
  // out_stride apart (the last k-block of a block that resumes its sums from a scratch block).
  float* out = nullptr;
  int64_t out_stride = 0;
};

// Masks of a panel's valid columns in its two 16-column halves (the last panel may be partial).
[[gnu::always_inline]] inline std::pair<__mmask16, __mmask16> ValidColumns(int64_t n_valid) {
  return {avx512::FirstLanes(n_valid), avx512::FirstLanes(n_valid - 16)};
}

// Stores a tile's accumulators [MR][NP][2 halves] at y (row stride ys), rounded to bf16 first
// when `round`; a one-panel tile stores only the columns of m0 and m1. Inlined, so that the
// accumulators are stored from their registers.
template <int MR, int NP>
[[gnu::always_inline]] inline void StoreTile(__m512 (&acc)[MR][NP][2], float* y, int64_t ys,
                                             bool round, __mmask16 m0, __mmask16 m1) {
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    float* yr = y + r * ys;
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      if (round) {
        acc[r][q][0] = avx512::RoundBf16(acc[r][q][0]);
        acc[r][q][1] = avx512::RoundBf16(acc[r][q][1]);
      }
      if (NP == 1) {
        avx512::MaskStoreu(yr, m0, acc[r][q][0]);
        avx512::MaskStoreu(yr + 16, m1, acc[r][q][1]);
      } else {
        _mm512_storeu_ps(yr + 32 * q, acc[r][q][0]);
        _mm512_storeu_ps(yr + 32 * q + 16, acc[r][q][1]);
      }
    }
  }
}

// y[MR, NP·32] = (resume ? y : 0) + x[MR, kc] · panels[kc, NP·32], one chain per element in
// k order, from `panel` into `y`. Panel q starts `panel_stride` elements after panel q-1. For
// kBf16Dot, x is the pre-packed pair array (uint32 per (row, k pair)) and `kc` counts pairs.
// `n_valid` masks the columns of the last panel (NP = 1 only; wider tiles cover whole panels).
template <int MR, int NP, Mode kMode>
void Tile(const TileArgs& a, const void* panel, float* y, int64_t n_valid) {
  using T = std::conditional_t<kMode == Mode::kF32, float, uint16_t>;
  const void* xv = a.x;
  const int64_t xs = a.xs, panel_stride = a.panel_stride, kc = a.kc, ys = a.ys;
  const int64_t ahead_bytes = a.prefetch / NP;
  const auto [m0, m1] = ValidColumns(n_valid);
  __m512 acc[MR][NP][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      if (a.accumulate) {
        acc[r][q][0] = NP == 1 ? avx512::MaskzLoadu(m0, y + r * ys)
                               : _mm512_loadu_ps(y + r * ys + 32 * q);
        acc[r][q][1] = NP == 1 ? avx512::MaskzLoadu(m1, y + r * ys + 16)
                               : _mm512_loadu_ps(y + r * ys + 32 * q + 16);
      } else {
        acc[r][q][0] = acc[r][q][1] = _mm512_setzero_ps();
      }
    }
  }
  const __m512i hi_mask = _mm512_set1_epi32(-65536);
  const T* base = static_cast<const T*>(panel);
  constexpr int64_t kStepElems = kMode == Mode::kF32 ? 32 : 64;  // per panel and step
  for (int64_t kk = 0; kk < kc; ++kk) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      const T* p = base + q * panel_stride + kk * kStepElems;
      const char* ahead = reinterpret_cast<const char*>(p) + ahead_bytes;
      PrefetchL1(ahead);
      if constexpr (kMode != Mode::kF32) PrefetchL1(ahead + 64);  // 128 B/step
      if constexpr (kMode == Mode::kF32) {
        const __m512 w0 = _mm512_loadu_ps(p), w1 = _mm512_loadu_ps(p + 16);
        const float* x = static_cast<const float*>(xv);
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512 b = _mm512_set1_ps(x[r * xs + kk]);
          acc[r][q][0] = _mm512_fmadd_ps(b, w0, acc[r][q][0]);
          acc[r][q][1] = _mm512_fmadd_ps(b, w1, acc[r][q][1]);
        }
      } else {
        const __m512i z0 = _mm512_loadu_si512(p), z1 = _mm512_loadu_si512(p + 32);
        if constexpr (kMode == Mode::kBf16Dot) {
          const uint32_t* x = static_cast<const uint32_t*>(xv);
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) {
            const __m512i b = _mm512_set1_epi32(static_cast<int>(x[r * xs + kk]));
            acc[r][q][0] = _mm512_dpbf16_ps(acc[r][q][0], (__m512bh)b, (__m512bh)z0);
            acc[r][q][1] = _mm512_dpbf16_ps(acc[r][q][1], (__m512bh)b, (__m512bh)z1);
          }
        } else {
          const float* x = static_cast<const float*>(xv);
          const __m512 w0e = _mm512_castsi512_ps(_mm512_slli_epi32(z0, 16));
          const __m512 w0o = _mm512_castsi512_ps(_mm512_and_si512(z0, hi_mask));
          const __m512 w1e = _mm512_castsi512_ps(_mm512_slli_epi32(z1, 16));
          const __m512 w1o = _mm512_castsi512_ps(_mm512_and_si512(z1, hi_mask));
#pragma GCC unroll 8
          for (int r = 0; r < MR; ++r) {
            const __m512 be = _mm512_set1_ps(x[r * xs + 2 * kk]);
            const __m512 bo = _mm512_set1_ps(x[r * xs + 2 * kk + 1]);
            acc[r][q][0] = _mm512_fmadd_ps(bo, w0o, _mm512_fmadd_ps(be, w0e, acc[r][q][0]));
            acc[r][q][1] = _mm512_fmadd_ps(bo, w1o, _mm512_fmadd_ps(be, w1e, acc[r][q][1]));
          }
        }
      }
    }
  }
  if (a.out != nullptr) {
    StoreTile<MR, NP>(acc, a.out + (y - a.y), a.out_stride, a.round, m0, m1);
  } else {
    StoreTile<MR, NP>(acc, y, ys, a.round, m0, m1);
  }
}

template <int MR, Mode kMode>
void RowTile(const TileArgs& a, int64_t panels, int64_t n_valid_last) {
  using T = std::conditional_t<kMode == Mode::kF32, float, uint16_t>;
  constexpr int NP = Avx512PanelsPerTile(MR);
  const T* panel = static_cast<const T*>(a.panel);
  int64_t q = 0;
  // Whole panels NP at a time, then the rest (the matrix's last one possibly partial) singly.
  for (; q + NP <= panels && (q + NP < panels || n_valid_last == 32); q += NP) {
    Tile<MR, NP, kMode>(a, panel + q * a.panel_stride, a.y + q * 32, 32);
  }
  for (; q < panels; ++q) {
    Tile<MR, 1, kMode>(a, panel + q * a.panel_stride, a.y + q * 32,
                       q + 1 == panels ? n_valid_last : 32);
  }
}

template <Mode kMode>
void RunRowTile(int64_t rows, const TileArgs& a, int64_t panels, int64_t n_valid_last) {
  switch (rows) {
    case 1: return RowTile<1, kMode>(a, panels, n_valid_last);
    case 2: return RowTile<2, kMode>(a, panels, n_valid_last);
    case 3: return RowTile<3, kMode>(a, panels, n_valid_last);
    case 4: return RowTile<4, kMode>(a, panels, n_valid_last);
    case 5: return RowTile<5, kMode>(a, panels, n_valid_last);
    case 6: return RowTile<6, kMode>(a, panels, n_valid_last);
    case 7: return RowTile<7, kMode>(a, panels, n_valid_last);
    default: return RowTile<8, kMode>(a, panels, n_valid_last);
  }
}

// y[rows, n_valid] += x[rows, 0] · pair_row[:, 0] (the first element of each column pair).
void AddLastColumn(const float* x, int64_t xs, int64_t rows, const uint16_t* pair_row, float* y,
                   int64_t ys, int64_t n_valid) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n_valid; ++j) y[i * ys + j] += x[i * xs] * Bf16ToF32(pair_row[2 * j]);
  }
}

// Tiles rows × k-blocks × panels. `x` is f32 [m, xs] or, for kBf16Dot, uint32 pairs [m, xs].
// k counts steps (k for kF32, pairs otherwise); panel row `kk` is `step_elems` elements.
// Decode-sized blocks (one or two tiles) read the task's weights in memory order, one sequential
// stream for the prefetches to run ahead of (a panel's k-blocks are contiguous and the next
// panel follows): a single tile passes over all of k, NP panels at a time; two tiles share each
// k-block of a panel from L1. Taller blocks keep one panel's k-block (128 KiB, in L2) while all
// their tiles pass over it. The order never changes a result: every chain runs in k order.
template <Mode kMode>
void Panels(const void* x, int64_t xs, int64_t m, const PackedWeight& pw, int64_t pb,
            int64_t pe, float* y, int64_t ys, Round round) {
  using T = std::conditional_t<kMode == Mode::kF32, float, uint16_t>;
  using X = std::conditional_t<kMode == Mode::kBf16Dot, uint32_t, float>;
  const T* data = pw.data.as<T>();
  const int64_t steps = kMode == Mode::kF32 ? pw.k : (pw.k + 1) / 2;
  const int64_t step_elems = kMode == Mode::kF32 ? 32 : 64;
  // x columns per step: 1 (f32 x or packed pairs) or 2 (f32 x against bf16 pairs).
  const int64_t x_per_step = kMode == Mode::kBf16Widen ? 2 : 1;
  const int64_t step_k = kMode == Mode::kF32 ? 1 : 2;  // elements of k per step
  // With an odd k the last pair of bf16 widening holds only column k-1 (its partner is
  // padding), and x has no element k: that pair is done separately.
  const bool odd_tail = kMode == Mode::kBf16Widen && (pw.k & 1);
  const X* xx = static_cast<const X*>(x);
  const int64_t n_valid_last = std::min<int64_t>(32, pw.n - (pe - 1) * 32);
  const bool to_bf16 = round == Round::kBf16;
  for (int64_t i0 = 0; i0 < m; i0 += kMc) {
    const int64_t rows = std::min(kMc, m - i0);
    const int64_t n_tiles = (rows + kAvx512MaxTileRows - 1) / kAvx512MaxTileRows;
    const int64_t kc_steps = (n_tiles == 2 ? kKcShared : kKcTall) / step_k;
    // All tiles of the block over panels [p, p + panels), k-steps [s0, s0 + kc), into yb: the
    // block's row 0 at panel p's column 0, rows ybs apart; the last k-block's finished sums
    // into yo instead (rows yos apart) where given, unless an odd k's last column is left.
    const auto pass = [&](int64_t p, int64_t panels, int64_t s0, int64_t kc, float* yb,
                          int64_t ybs, float* yo = nullptr, int64_t yos = 0) {
      const bool last = s0 + kc == steps, tail = odd_tail && last;
      const T* panel = data + p * pw.panel_elems + s0 * step_elems;
      const int64_t nv_last = p + panels == pe ? n_valid_last : 32;
      int64_t r = 0;
      for (int64_t t = 0; t < n_tiles; ++t) {
        const int64_t tr = EvenShare(rows - r, n_tiles - t);
        const int64_t row = i0 + r;
        const X* xt = xx + row * xs + s0 * x_per_step;
        float* yt = yb + r * ybs;
        // Two tiles: the second reads the k-block from L1, so its prefetches go one k-block
        // ahead, keeping DRAM busy meanwhile (Zen 5, batch 12 and 16 decode: +4-10%).
        const int64_t prefetch = n_tiles == 2 && t == 1 ? kc_steps * step_elems * sizeof(T)
                                                        : kPrefetchBytes;
        float* out = last && !tail && yo != nullptr ? yo + r * yos : nullptr;
        RunRowTile<kMode>(tr,
                          {xt, xs, panel, pw.panel_elems, tail ? kc - 1 : kc, yt, ybs, s0 > 0,
                           last && !tail && to_bf16, prefetch, out, yos},
                          panels, nv_last);
        if (tail) {
          for (int64_t q = 0; q < panels; ++q) {
            const int64_t cols = q + 1 == panels ? nv_last : 32;
            float* yq = yt + q * 32;
            AddLastColumn(reinterpret_cast<const float*>(xt) + 2 * (kc - 1), xs, tr,
                          reinterpret_cast<const uint16_t*>(panel + q * pw.panel_elems) +
                              (kc - 1) * 64,
                          yq, ybs, cols);
            for (int64_t i = 0; to_bf16 && i < tr; ++i) {
              for (int64_t j = 0; j < cols; ++j) {
                yq[i * ybs + j] = cpm::RoundBf16(yq[i * ybs + j]);
              }
            }
          }
        }
        r += tr;
      }
    };
    float* yi = y + i0 * ys;
    if (n_tiles == 1) {
      pass(pb, pe - pb, 0, steps, yi, ys);
    } else if (n_tiles == 2) {
      // The tiles resume their sums at every k-block, so they keep them in a dense block of
      // their own until the panel is done: y's rows are often a multiple of 4 KiB apart (1024
      // or 4096 floats), all in one L1 set, whose ways 16 rows of 2 lines each outnumber. perf
      // put ~8% of batch-16 decode's tile samples at those reloads; the model's batch-16 decode
      // ran 4-12% faster with the block (interleaved rounds, Zen 5).
      // The last k-block's tiles store straight into y (a copy of the block cost ~2% of
      // batch-16 decode), but for an odd k's last column, added to the block afterwards.
      alignas(64) float block[kAvx512MaxTileRows * 2][kBlockStride];
      // The tiles' rows and x, once per block rather than per k-block (perf put ~5% of
      // batch-16 decode in the generic pass around the tiles).
      const int64_t tr0 = EvenShare(rows, 2), tr1 = rows - tr0;
      const X* x0 = xx + i0 * xs;
      const X* x1 = x0 + tr0 * xs;
      const int64_t ahead1 = kc_steps * step_elems * static_cast<int64_t>(sizeof(T));
      for (int64_t p = pb; p < pe; ++p) {
        float* yp = yi + (p - pb) * 32;
        const int64_t nv = p + 1 == pe ? n_valid_last : 32;
        const T* panel = data + p * pw.panel_elems;
        for (int64_t s0 = 0; s0 < steps; s0 += kc_steps) {
          const int64_t kc = std::min(kc_steps, steps - s0);
          const bool last = s0 + kc == steps;
          if (odd_tail && last) {
            pass(p, 1, s0, kc, &block[0][0], kBlockStride, yp, ys);
            continue;
          }
          const T* pk = panel + s0 * step_elems;
          const int64_t xo = s0 * x_per_step;
          RunRowTile<kMode>(tr0,
                            {x0 + xo, xs, pk, pw.panel_elems, kc, &block[0][0], kBlockStride,
                             s0 > 0, last && to_bf16, kPrefetchBytes, last ? yp : nullptr, ys},
                            1, nv);
          RunRowTile<kMode>(tr1,
                            {x1 + xo, xs, pk, pw.panel_elems, kc, &block[tr0][0], kBlockStride,
                             s0 > 0, last && to_bf16, ahead1, last ? yp + tr0 * ys : nullptr, ys},
                            1, nv);
        }
        for (int64_t r = 0; odd_tail && r < rows; ++r) {
          std::memcpy(yp + r * ys, block[r], nv * sizeof(float));
        }
      }
    } else {
      for (int64_t s0 = 0; s0 < steps; s0 += kc_steps) {
        for (int64_t p = pb; p < pe; ++p) {
          pass(p, 1, s0, std::min(kc_steps, steps - s0), yi + (p - pb) * 32, ys);
        }
      }
    }
  }
}

// ---- Ternary weights (kPanel32Ternary): the bf16 pair lanes rebuilt from 2-bit codes ----


// A word of 32 codes → the 32 bf16 weights of one zmm of pair lanes, exactly: vpmultishiftqb
// copies the byte window at code j (bits 2j...) into both bytes of word j, vpternlogd keeps its
// two bits and adds 4 in the high byte, vpshufb looks up that byte of code's AND pattern (+0:
// 0, +s: 0x7fff, −s: 0xffff, −0: 0x8000), and the group's mask s | sign leaves s, s | sign or
// the sign alone: the checkpoint's bits. Five instructions per 32 weights, no multiply.
struct TernaryDecoder {
  // Built at compile time, so that a tile's decoder is four loads.
  struct Bytes {
    alignas(64) uint8_t v[64];
  };
  static constexpr Bytes kOffsets = [] {  // byte b reads word b/2's code: bit offset b & ~1
    Bytes o{};
    for (int b = 0; b < 64; ++b) o.v[b] = static_cast<uint8_t>(b & ~1);
    return o;
  }();
  static constexpr Bytes kPatterns = [] {  // per 16-byte lane: low bytes by code, then high
    constexpr uint8_t kLane[8] = {0x00, 0xff, 0xff, 0x00, 0x00, 0x7f, 0xff, 0x80};
    Bytes t{};
    for (int b = 0; b < 64; ++b) t.v[b] = b % 16 < 8 ? kLane[b % 16] : 0;
    return t;
  }();
  __m512i windows = _mm512_load_si512(kOffsets.v), two_bits = _mm512_set1_epi8(3),
          high_byte = _mm512_set1_epi16(0x0400), patterns = _mm512_load_si512(kPatterns.v);

  __m512i Weights(uint64_t codes, __m512i mask) const {
    const __m512i v = _mm512_set1_epi64(static_cast<long long>(codes));
    const __m512i window = Multishift(windows, v);
    const __m512i index = _mm512_ternarylogic_epi32(window, two_bits, high_byte, 0xea);  // a&b|c
    return _mm512_and_si512(_mm512_shuffle_epi8(patterns, index), mask);
  }

  // The same weights through mask registers: pext gathers the codes' high and low bits into
  // 32-bit masks, then two masked moves put s where the code is +s and s | sign where it is −s,
  // +0 elsewhere. That drops the checkpoint's −0 (code 3) to +0, which no sum can tell apart: a
  // chain starts at +0 and never reaches −0 (x + (−x) is +0), so ±0 products leave it as it is;
  // the results stay bitwise (tested). Fewer vector instructions (two), but a scalar and mask
  // chain per word: 7-8-row tiles run faster on it (BitCPM4-0.5B dims, Zen 5: batch 8 and 16
  // +10-20%), shorter ones slower (batch 1 -35%, 5 rows -5-10%).
  static __m512i WeightsFromMasks(uint64_t codes, __m512i mask) {
    const uint32_t hi = GatherBits(codes, 0xaaaaaaaaaaaaaaaaull);
    const uint32_t lo = GatherBits(codes, 0x5555555555555555ull);
    const __m512i s = _mm512_and_si512(mask, _mm512_set1_epi16(0x7fff));
    const __m512i w = _mm512_maskz_mov_epi16(static_cast<__mmask32>(hi ^ lo), s);
    return _mm512_mask_mov_epi16(w, static_cast<__mmask32>(hi & ~lo), mask);
  }

  // Byte i: the 8 bits of v's qword i/8 from bit windows.byte[i] on, wrapping (vpmultishiftqb).
  // Under emulation a loop of our own: SIMDe 0.7.4's shifts a qword left by 64 for a window at
  // bit 0, undefined behaviour that UBSan stops at (the result happens to be right on x86).
  static __m512i Multishift(__m512i windows, __m512i v) {
#if defined(CPM_EMULATE_AVX512)
    alignas(64) uint8_t w[64], out[64];
    alignas(64) uint64_t q[8];
    _mm512_store_si512(w, windows);
    _mm512_store_si512(q, v);
    for (int i = 0; i < 64; ++i) out[i] = static_cast<uint8_t>(std::rotr(q[i / 8], w[i] & 63));
    return _mm512_load_si512(out);
#else
    return _mm512_multishift_epi64_epi8(windows, v);
#endif
  }

  // The bits of `v` under `select`, packed from bit 0 (pext; a loop under emulation).
  static uint32_t GatherBits(uint64_t v, uint64_t select) {
#if defined(CPM_EMULATE_AVX512)
    uint32_t out = 0;
    for (int i = 0, o = 0; i < 64; ++i) {
      if ((select >> i) & 1) out |= static_cast<uint32_t>((v >> i) & 1) << o++;
    }
    return out;
#else
    return static_cast<uint32_t>(_pext_u64(v, select));
#endif
  }
};

// y[MR, NP·32] = x[MR, k] · panels p..p+NP−1, the chains of Tile<MR, NP, kBf16Dot> over all of
// k on weights decoded in registers: bitwise that tile's result. x is the pair array, `n_valid`
// masks the last panel's columns (NP = 1 only). Codes are 1/8 of the pairs' bytes, so the
// prefetch runs 1 KiB ahead per panel stream.
template <int MR, int NP>
void TernaryTile(const uint32_t* x, int64_t xs, const PackedWeight& pw, int64_t p, float* y,
                 int64_t ys, bool round, int64_t n_valid) {
  const TernaryDecoder dec;
  const int64_t steps = pw.panel_elems / 2, num_groups = pw.num_groups;
  const uint64_t* codes = pw.data.as<uint64_t>() + p * steps * 2;
  const __m512i* masks = reinterpret_cast<const __m512i*>(pw.scales.as<uint16_t>()) +
                         p * num_groups * 2;
  const auto [m0, m1] = ValidColumns(n_valid);
  __m512 acc[MR][NP][2];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) acc[r][q][0] = acc[r][q][1] = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < num_groups; ++g) {
    // Groups hold an even number of inputs (32-256) unless one spans the row: pairs never straddle.
    const int64_t s0 = g * pw.ternary.group / 2;
    const int64_t s1 = g + 1 == num_groups ? steps : (g + 1) * pw.ternary.group / 2;
    __m512i mask[NP][2];
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      mask[q][0] = _mm512_load_si512(masks + (q * num_groups + g) * 2);
      mask[q][1] = _mm512_load_si512(masks + (q * num_groups + g) * 2 + 1);
    }
    for (int64_t kk = s0; kk < s1; ++kk) {
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) {
        const uint64_t* c = codes + q * steps * 2 + kk * 2;
        PrefetchL1(reinterpret_cast<const char*>(c) + 1024);
        __m512i z0, z1;
        if constexpr (MR > 6) {
          z0 = TernaryDecoder::WeightsFromMasks(c[0], mask[q][0]);
          z1 = TernaryDecoder::WeightsFromMasks(c[1], mask[q][1]);
        } else {
          z0 = dec.Weights(c[0], mask[q][0]);
          z1 = dec.Weights(c[1], mask[q][1]);
        }
#pragma GCC unroll 8
        for (int r = 0; r < MR; ++r) {
          const __m512i b = _mm512_set1_epi32(static_cast<int>(x[r * xs + kk]));
          acc[r][q][0] = _mm512_dpbf16_ps(acc[r][q][0], (__m512bh)b, (__m512bh)z0);
          acc[r][q][1] = _mm512_dpbf16_ps(acc[r][q][1], (__m512bh)b, (__m512bh)z1);
        }
      }
    }
  }
  StoreTile<MR, NP>(acc, y, ys, round, m0, m1);
}

// Panels [pb, pe) of a ternary weight for MR ≤ 8 rows, NP at a time as the bf16 row tiles go,
// then singly (the last possibly partial).
template <int MR>
void TernaryPanels(const uint32_t* x, int64_t xs, const PackedWeight& pw, int64_t pb, int64_t pe,
                   float* y, int64_t ys, bool round) {
  constexpr int NP = Avx512PanelsPerTile(MR);
  const int64_t n_valid_last = std::min<int64_t>(32, pw.n - (pe - 1) * 32);
  int64_t p = pb;
  for (; p + NP <= pe && (p + NP < pe || n_valid_last == 32); p += NP) {
    TernaryTile<MR, NP>(x, xs, pw, p, y + (p - pb) * 32, ys, round, 32);
  }
  for (; p < pe; ++p) {
    TernaryTile<MR, 1>(x, xs, pw, p, y + (p - pb) * 32, ys, round,
                       p + 1 == pe ? n_valid_last : 32);
  }
}

void RunTernaryPanels(int64_t rows, const uint32_t* x, int64_t xs, const PackedWeight& pw,
                      int64_t pb, int64_t pe, float* y, int64_t ys, bool round) {
  switch (rows) {
    case 1: return TernaryPanels<1>(x, xs, pw, pb, pe, y, ys, round);
    case 2: return TernaryPanels<2>(x, xs, pw, pb, pe, y, ys, round);
    case 3: return TernaryPanels<3>(x, xs, pw, pb, pe, y, ys, round);
    case 4: return TernaryPanels<4>(x, xs, pw, pb, pe, y, ys, round);
    case 5: return TernaryPanels<5>(x, xs, pw, pb, pe, y, ys, round);
    case 6: return TernaryPanels<6>(x, xs, pw, pb, pe, y, ys, round);
    case 7: return TernaryPanels<7>(x, xs, pw, pb, pe, y, ys, round);
    default: return TernaryPanels<8>(x, xs, pw, pb, pe, y, ys, round);
  }
}

// Row x[0, k) as (k, k+1) pairs of bf16 (uint32 lanes, k in the low half; an odd k's last
// partner 0), and whether it held bf16 values only (low 16 bits of every f32 zero), so that
// vdpbf16ps on the pairs is exact. The high halves of 32 floats are one word permutation. A row
// that is not bf16 is given up at its first 32 values that show it (its pairs go unread): the
// vision tower's f32 attention probabilities, 1024 × 1024 per head, were packed whole.
bool PackPairs(const float* x, int64_t k, uint32_t* pairs) {
  const __m512i high_words = _mm512_set_epi16(
      63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19,
      17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m512i low_halves = _mm512_set1_epi32(0xffff);
  __mmask16 inexact = 0;
  int64_t j = 0;
  for (; j + 32 <= k; j += 32) {
    const __m512i a = _mm512_loadu_si512(x + j), b = _mm512_loadu_si512(x + j + 16);
    inexact |= _mm512_test_epi32_mask(a, low_halves) | _mm512_test_epi32_mask(b, low_halves);
    if (inexact != 0) return false;
    _mm512_storeu_si512(pairs + j / 2, _mm512_permutex2var_epi16(a, high_words, b));
  }
  uint32_t low = 0;
  for (; j < k; j += 2) {
    uint32_t lo, hi = 0;
    std::memcpy(&lo, x + j, 4);
    if (j + 1 < k) std::memcpy(&hi, x + j + 1, 4);
    low |= (lo | hi) & 0xffffu;
    pairs[j / 2] = (lo >> 16) | (hi & 0xffff0000u);
  }
  return inexact == 0 && low == 0;
}

}  // namespace

void PrepareXAvx512(const float* x, int64_t x_stride, int64_t k, int64_t row_begin,
                    int64_t row_end, uint8_t* dot, uint32_t* pairs) {
  const bool have_dot = HaveAvx512Bf16();
  const int64_t pairs_stride = PairsStride(k);
  for (int64_t i = row_begin; i < row_end; ++i) {
    dot[i] = have_dot && PackPairs(x + i * x_stride, k, pairs + i * pairs_stride);
  }
}

void MatMulPanelsAvx512(const Avx512X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                        int64_t panel_end, float* y, int64_t y_stride, Round round) {
  if (pw.layout == PackedLayout::kPanel32F32) {
    return Panels<Mode::kF32>(x.x, x.x_stride, m, pw, panel_begin, panel_end, y, y_stride, round);
  }
  // bf16 dot products round differently from f32 FMAs, so the choice is per row (made by
  // PrepareXAvx512), never per call: each run of consecutive rows with the same answer is one
  // call of the tiles. A ternary weight's codes serve short runs of bf16 rows; its pairs copy
  // the rest (the same bits either way).
  const bool codes = pw.layout == PackedLayout::kPanel32Ternary;
  const PackedWeight& pairs = codes ? *pw.panels : pw;
  const int64_t pairs_stride = PairsStride(pw.k);
  const auto dot = [&](int64_t i) { return x.dot != nullptr && x.dot[i] != 0; };
  for (int64_t i0 = 0; i0 < m;) {
    int64_t i1 = i0 + 1;
    while (i1 < m && dot(i1) == dot(i0)) ++i1;
    float* yi = y + i0 * y_stride;
    if (dot(i0) && codes && i1 - i0 <= kAvx512TernaryMaxRows) {
      const int64_t rows = i1 - i0;
      const int64_t chunks = (rows + kAvx512MaxTileRows - 1) / kAvx512MaxTileRows;
      for (int64_t c = 0, r = 0; c < chunks; ++c) {
        const int64_t cr = EvenShare(rows - r, chunks - c);
        RunTernaryPanels(cr, x.pairs + (i0 + r) * pairs_stride, pairs_stride, pw, panel_begin,
                         panel_end, yi + r * y_stride, y_stride,
                         round == Round::kBf16);
        r += cr;
      }
    } else if (dot(i0)) {
      Panels<Mode::kBf16Dot>(x.pairs + i0 * pairs_stride, pairs_stride, i1 - i0, pairs,
                             panel_begin, panel_end, yi, y_stride, round);
    } else {
      Panels<Mode::kBf16Widen>(x.x + i0 * x.x_stride, x.x_stride, i1 - i0, pairs, panel_begin,
                               panel_end, yi, y_stride, round);
    }
    i0 = i1;
  }
}

}  // namespace cpm::kernels (or cpm::kernels::emulated)
