// AVX2+FMA matmul: outer-product register tiles (h ≤ 6 rows of x × 16-64 output columns) over
// packed weight panels, plus a dot-product kernel for weights that were never packed.
// Compiled with -mavx2 -mfma -mf16c; only called when the CPU has them.
//
// Each output element is one sequential FMA chain over k (see matmul_impl.h), so the latency
// of an FMA (4 cycles, 2 FMA pipes: 8 chains in flight to saturate) is hidden by independent
// output elements only: tall tiles use 2·h accumulators of one panel, short tiles (the m = 1..3
// of decode) widen over 2-4 panels instead of splitting k, which would make the order of a
// row's sum depend on the height of its tile and so on the batch. The tiles whose loops need
// all 16 ymm registers are inline assembly (TileBf16Asm); the rest are intrinsics.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/matmul_impl.h"
#include "kernels/ops_avx2.h"
#include "kernels/prefetch.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {
namespace {

// Blocking. Decode (m ≤ 120, one row block): a k-block of a pair of panels (2·256·32 B bf16 =
// 16 KiB) stays in L1 while every row tile passes over it (a tile's x for the block is ≤ 6 KiB)
// and the next k-block is prefetched. 256 rather than 128: half the tile calls and twice the
// prefetch distance; A/B, 3 interleaved rounds twice: batch 16 +11-15%, batch 4 +5%, batch 1
// within noise; 512 was no better. Prefill: a pair of panels' k-blocks (16 KiB) in L1 while
// the row block's tiles pass (each tile's x, 6 KiB, then serves both panels from L1; one panel
// at a time: pp512 5% slower, 8 interleaved rounds), the row block of packed x
// (≤ 120·256·4 B = 120 KiB) in L2 across the task's panels; longer blocks halve the per-block
// cost of reloading the accumulators. Results depend on neither: a k-block resumes each chain
// from y.
constexpr int64_t kKcDecode = 256;
constexpr int64_t kKcPrefill = 256;
constexpr int64_t kTilesPerBlock = 20;  // rows per row block: 20 tiles of ≤ 6
constexpr int64_t kSpanBlocks = 5;      // prefill row blocks per span at most (600 rows)
constexpr int64_t kPrefillGroup = 2;    // panels a prefill row block passes over together

// Widens the panel row of 16 weights at `row`: w0 = columns 0..7, w1 = columns 8..15.
template <bool kBf16>
inline void LoadPanelRow(const void* row, __m256* w0, __m256* w1) {
  if constexpr (kBf16) {
    avx2::LoadBf16Pairs(static_cast<const uint16_t*>(row), w0, w1);
  } else {
    const float* p = static_cast<const float*>(row);
    *w0 = _mm256_loadu_ps(p);
    *w1 = _mm256_loadu_ps(p + 8);
  }
}

// Software prefetch of the weights the row block will need next (decode: the same panels' next
// k-block; prefill: the next panel at this k-block), each of its n row tiles fetching its own
// 1/n share while it computes, so that DRAM requests are spread over the whole block's compute
// rather than bunched into one tile's pass. The hardware prefetchers alone restart at each
// k-block and page of a panel.
struct Prefetch {
  int64_t offset;  // bytes from the tile's first weight to the first line it prefetches
  int64_t stride;  // bytes the prefetch address advances per two k steps (≤ 64 covers all)
};

// The bf16 tiles whose loops need all 16 ymm registers, in assembly: H = 5 or 6 rows × one
// panel (prefill, batched decode) and 3 rows × two panels (decode batches of 3 and 7). Each is
// the whole of Tile() below for its shape. GCC's versions spill (the widening mask and a
// broadcast for the tall tiles, which costs ~10% when the front end is shared with a busy
// hyperthread; accumulators for 3×2, whose chains then wait on store forwarding). Same
// arithmetic as the intrinsics: one FMA chain per element, in k order.
// Registers: the 12 accumulators in ymm0..11 (tall tiles: row r in ymm(2r), ymm(2r+1); 3×2:
// row r, panel q in ymm(4r+2q), ymm(4r+2q+1), columns 0..7 then 8..15); ymm12/13 the widened
// weights, ymm14 the broadcast, ymm15 the mask; rax addresses rows 3..5 of y.
#define CPM_Y0 "(%[y])"
#define CPM_Y1 "(%[y],%[ys4],1)"
#define CPM_Y2 "(%[y],%[ys4],2)"
#define CPM_Y3 "(%%rax)"
#define CPM_Y4 "(%%rax,%[ys4],1)"
#define CPM_Y5 "(%%rax,%[ys4],2)"
#define CPM_ROW3 "lea (%[y],%[ys4],2), %%rax\n\tadd %[ys4], %%rax\n\t"
// Row r of y at byte offsets olo and ohi (a panel's two halves).
#define CPM_LOAD_YO(r, olo, ohi, lo, hi) \
  "vmovups " #olo CPM_Y##r ", %%ymm" #lo "\n\tvmovups " #ohi CPM_Y##r ", %%ymm" #hi "\n\t"
#define CPM_STORE_YO(r, olo, ohi, lo, hi) \
  "vmovups %%ymm" #lo ", " #olo CPM_Y##r "\n\tvmovups %%ymm" #hi ", " #ohi CPM_Y##r "\n\t"
#define CPM_LOAD_Y(r, lo, hi) CPM_LOAD_YO(r, 0, 32, lo, hi)
#define CPM_STORE_Y(r, lo, hi) CPM_STORE_YO(r, 0, 32, lo, hi)
#define CPM_ZERO(lo, hi) \
  "vxorps %%ymm" #lo ", %%ymm" #lo ", %%ymm" #lo "\n\tvxorps %%ymm" #hi ", %%ymm" #hi ", %%ymm" #hi "\n\t"
// One k step's 16 weights of the first panel (WIDEN) or the second (WIDEN1, `ps` bytes on).
#define CPM_WIDEN(off)                   \
  "vmovdqu " #off "(%[pp]), %%ymm12\n\t" \
  "vpand %%ymm15, %%ymm12, %%ymm13\n\t"  \
  "vpslld $16, %%ymm12, %%ymm12\n\t"
#define CPM_WIDEN1(off)                           \
  "vmovdqu " #off "(%[pp],%[ps],1), %%ymm12\n\t"  \
  "vpand %%ymm15, %%ymm12, %%ymm13\n\t"           \
  "vpslld $16, %%ymm12, %%ymm12\n\t"
#define CPM_ROW(off, lo, hi)                         \
  "vbroadcastss " #off "(%[xk]), %%ymm14\n\t"        \
  "vfmadd231ps %%ymm12, %%ymm14, %%ymm" #lo "\n\t"   \
  "vfmadd231ps %%ymm13, %%ymm14, %%ymm" #hi "\n\t"
// Accumulators from y (flags bit 0: resume) or zero; the mask; the loop over k pairs (STEP0 and
// STEP1 widen their weights); the odd last k (flags bit 1); the accumulators back to y.
#define CPM_TILE_ASM(LOAD, ZERO, PREFETCH, STEP0, STEP1, STORE, xbytes)        \
  CPM_ROW3 "test $1, %[flags]\n\tjz 2f\n\t" LOAD "jmp 3f\n"                  \
  "2:\n\t" ZERO "3:\n\t"                                                     \
  "mov $0xffff0000, %%eax\n\tvmovd %%eax, %%xmm15\n\t"                      \
  "vpbroadcastd %%xmm15, %%ymm15\n\t"                                        \
  "test %[n], %[n]\n\tjz 4f\n"                                               \
  "1:\n\t" PREFETCH STEP0 STEP1                                              \
  "add $64, %[pp]\n\tadd $" #xbytes ", %[xk]\n\t"                             \
  "add %[stride], %[ahead]\n\tdec %[n]\n\tjnz 1b\n"                          \
  "4:\n\ttest $2, %[flags]\n\tjz 5f\n\t" STEP0                               \
  "5:\n\t" CPM_ROW3 STORE
#define CPM_PREFETCH0 "prefetcht0 (%[ahead])\n\t"
#define CPM_PREFETCH1 "prefetcht0 (%[ahead],%[ps],1)\n\t"
#define CPM_TILE_OPERANDS                                                              \
  : [pp] "+r"(pp), [xk] "+r"(xk), [ahead] "+r"(ahead), [n] "+r"(pairs)                 \
  : [stride] "r"(pf.stride), [y] "r"(y), [ys4] "r"(ys * 4), [flags] "r"(flags),        \
    [ps] "r"(panel_bytes)                                                              \
  : "cc", "memory", "rax", "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", \
    "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"

// Tile<H, NP, bf16> for (H, NP) = (6, 1), (5, 1), (3, 2); the second panel starts
// `panel_elems` weights after the first. Inlined into its callers: called, its eighth argument
// went through the stack, copied out of TileArgs with a 16-byte load of two 8-byte stores,
// which cannot be forwarded (a stall per tile call, ~2% of a prefill matmul's samples).
template <int H, int NP>
[[gnu::always_inline]] inline void TileBf16Asm(const float* xk, const uint16_t* pp,
                                               int64_t panel_elems, int64_t kc, float* y,
                                               int64_t ys, bool resume, Prefetch pf) {
  const char* ahead = reinterpret_cast<const char*>(pp) + pf.offset;
  int64_t pairs = kc / 2;
  const int64_t flags = (resume ? 1 : 0) | (kc & 1 ? 2 : 0);
  const int64_t panel_bytes = panel_elems * 2;
  if constexpr (H == 3 && NP == 2) {
    asm volatile(CPM_TILE_ASM(
        CPM_LOAD_YO(0, 0, 32, 0, 1) CPM_LOAD_YO(0, 64, 96, 2, 3) CPM_LOAD_YO(1, 0, 32, 4, 5)
            CPM_LOAD_YO(1, 64, 96, 6, 7) CPM_LOAD_YO(2, 0, 32, 8, 9)
                CPM_LOAD_YO(2, 64, 96, 10, 11),
        CPM_ZERO(0, 1) CPM_ZERO(2, 3) CPM_ZERO(4, 5) CPM_ZERO(6, 7) CPM_ZERO(8, 9)
            CPM_ZERO(10, 11),
        CPM_PREFETCH0 CPM_PREFETCH1,
        CPM_WIDEN(0) CPM_ROW(0, 0, 1) CPM_ROW(4, 4, 5) CPM_ROW(8, 8, 9)
            CPM_WIDEN1(0) CPM_ROW(0, 2, 3) CPM_ROW(4, 6, 7) CPM_ROW(8, 10, 11),
        CPM_WIDEN(32) CPM_ROW(12, 0, 1) CPM_ROW(16, 4, 5) CPM_ROW(20, 8, 9)
            CPM_WIDEN1(32) CPM_ROW(12, 2, 3) CPM_ROW(16, 6, 7) CPM_ROW(20, 10, 11),
        CPM_STORE_YO(0, 0, 32, 0, 1) CPM_STORE_YO(0, 64, 96, 2, 3) CPM_STORE_YO(1, 0, 32, 4, 5)
            CPM_STORE_YO(1, 64, 96, 6, 7) CPM_STORE_YO(2, 0, 32, 8, 9)
                CPM_STORE_YO(2, 64, 96, 10, 11),
        24) CPM_TILE_OPERANDS);
  } else if constexpr (H == 6 && NP == 1) {
    asm volatile(CPM_TILE_ASM(
        CPM_LOAD_Y(0, 0, 1) CPM_LOAD_Y(1, 2, 3) CPM_LOAD_Y(2, 4, 5) CPM_LOAD_Y(3, 6, 7)
            CPM_LOAD_Y(4, 8, 9) CPM_LOAD_Y(5, 10, 11),
        CPM_ZERO(0, 1) CPM_ZERO(2, 3) CPM_ZERO(4, 5) CPM_ZERO(6, 7) CPM_ZERO(8, 9)
            CPM_ZERO(10, 11),
        CPM_PREFETCH0,
        CPM_WIDEN(0) CPM_ROW(0, 0, 1) CPM_ROW(4, 2, 3) CPM_ROW(8, 4, 5) CPM_ROW(12, 6, 7)
            CPM_ROW(16, 8, 9) CPM_ROW(20, 10, 11),
        CPM_WIDEN(32) CPM_ROW(24, 0, 1) CPM_ROW(28, 2, 3) CPM_ROW(32, 4, 5) CPM_ROW(36, 6, 7)
            CPM_ROW(40, 8, 9) CPM_ROW(44, 10, 11),
        CPM_STORE_Y(0, 0, 1) CPM_STORE_Y(1, 2, 3) CPM_STORE_Y(2, 4, 5) CPM_STORE_Y(3, 6, 7)
            CPM_STORE_Y(4, 8, 9) CPM_STORE_Y(5, 10, 11),
        48) CPM_TILE_OPERANDS);
  } else {
    static_assert(H == 5 && NP == 1);
    asm volatile(CPM_TILE_ASM(
        CPM_LOAD_Y(0, 0, 1) CPM_LOAD_Y(1, 2, 3) CPM_LOAD_Y(2, 4, 5) CPM_LOAD_Y(3, 6, 7)
            CPM_LOAD_Y(4, 8, 9),
        CPM_ZERO(0, 1) CPM_ZERO(2, 3) CPM_ZERO(4, 5) CPM_ZERO(6, 7) CPM_ZERO(8, 9),
        CPM_PREFETCH0,
        CPM_WIDEN(0) CPM_ROW(0, 0, 1) CPM_ROW(4, 2, 3) CPM_ROW(8, 4, 5) CPM_ROW(12, 6, 7)
            CPM_ROW(16, 8, 9),
        CPM_WIDEN(32) CPM_ROW(20, 0, 1) CPM_ROW(24, 2, 3) CPM_ROW(28, 4, 5) CPM_ROW(32, 6, 7)
            CPM_ROW(36, 8, 9),
        CPM_STORE_Y(0, 0, 1) CPM_STORE_Y(1, 2, 3) CPM_STORE_Y(2, 4, 5) CPM_STORE_Y(3, 6, 7)
            CPM_STORE_Y(4, 8, 9),
        40) CPM_TILE_OPERANDS);
  }
}
#undef CPM_Y0
#undef CPM_Y1
#undef CPM_Y2
#undef CPM_Y3
#undef CPM_Y4
#undef CPM_Y5
#undef CPM_ROW3
#undef CPM_LOAD_YO
#undef CPM_STORE_YO
#undef CPM_LOAD_Y
#undef CPM_STORE_Y
#undef CPM_ZERO
#undef CPM_WIDEN
#undef CPM_WIDEN1
#undef CPM_ROW
#undef CPM_TILE_ASM
#undef CPM_PREFETCH0
#undef CPM_PREFETCH1
#undef CPM_TILE_OPERANDS

// One k step of a tile: acc[r][q] += x[r] · (panel q's row of 16 weights).
template <int H, int NP, bool kBf16, typename T>
__attribute__((always_inline)) inline void Step(__m256 (&acc)[H][NP][2], const float* xk,
                                                const T* pp, int64_t panel_elems) {
#pragma GCC unroll 4
  for (int q = 0; q < NP; ++q) {
    __m256 w0, w1;
    LoadPanelRow<kBf16>(pp + q * panel_elems, &w0, &w1);
#pragma GCC unroll 6
    for (int r = 0; r < H; ++r) {
      const __m256 b = _mm256_broadcast_ss(xk + r);
      acc[r][q][0] = _mm256_fmadd_ps(b, w0, acc[r][q][0]);
      acc[r][q][1] = _mm256_fmadd_ps(b, w1, acc[r][q][1]);
    }
  }
}

// y[H, NP·16] = (resume ? y : 0) + xp[kc][H] · panels[kc][NP·16], one FMA chain per element in
// k order. `panel` points at row k0 of the first panel, the next at + `panel_elems`; y is dense
// in its NP·16 columns (the caller stages a partial last panel). Inlined into its callers, as
// the assembly tiles (Prefetch is its eighth argument).
template <int H, int NP, bool kBf16>
[[gnu::always_inline]] inline void Tile(const float* xp, const void* panel, int64_t panel_elems,
                                        int64_t kc, float* y, int64_t ys, bool resume,
                                        Prefetch pf) {
  if constexpr (kBf16 && ((NP == 1 && H >= 5) || (NP == 2 && H == 3))) {
    return TileBf16Asm<H, NP>(xp, static_cast<const uint16_t*>(panel), panel_elems, kc, y, ys,
                              resume, pf);
  }
  using T = std::conditional_t<kBf16, uint16_t, float>;
  const T* pp = static_cast<const T*>(panel);
  // Every loop over the tile is fully unrolled so that `acc` lives in registers (GCC keeps an
  // array in memory if any loop indexes it with a variable).
  __m256 acc[H][NP][2];
#pragma GCC unroll 6
  for (int r = 0; r < H; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      if (resume) {
        acc[r][q][0] = _mm256_loadu_ps(y + r * ys + q * 16);
        acc[r][q][1] = _mm256_loadu_ps(y + r * ys + q * 16 + 8);
      } else {
        acc[r][q][0] = acc[r][q][1] = _mm256_setzero_ps();
      }
    }
  }
  // Two k steps per iteration with a fixed trip count and the odd step after the loop: the
  // loop is front-end bound when the core's other hyperthread is busy (a neighbour on a shared
  // host), so every scalar op per FMA counts.
  const float* xk = xp;
  const char* ahead = reinterpret_cast<const char*>(pp) + pf.offset;
  const int64_t elems_bytes = panel_elems * static_cast<int64_t>(sizeof(T));
  for (int64_t pairs = kc / 2; pairs > 0; --pairs, ahead += pf.stride) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      PrefetchL1(ahead + q * elems_bytes);
      if constexpr (!kBf16) PrefetchL1(ahead + q * elems_bytes + 64);  // 128 B
    }
    Step<H, NP, kBf16>(acc, xk, pp, panel_elems);
    Step<H, NP, kBf16>(acc, xk + H, pp + 16, panel_elems);
    xk += 2 * H;
    pp += 32;
  }
  if (kc & 1) Step<H, NP, kBf16>(acc, xk, pp, panel_elems);
#pragma GCC unroll 6
  for (int r = 0; r < H; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      _mm256_storeu_ps(y + r * ys + q * 16, acc[r][q][0]);
      _mm256_storeu_ps(y + r * ys + q * 16 + 8, acc[r][q][1]);
    }
  }
}

// What a row tile works on: the k-block [k0, k0 + kc) of x (packed) and of the panels, its
// rows of y, whether y holds the chains' partial sums from earlier k-blocks, and its prefetch.
struct TileArgs {
  const float* xp;  // [kc][h] at k0
  int64_t k0, kc;
  float* y;    // row 0 of the tile, column 0 of panel `pb`
  int64_t pb;  // the task's first panel
  int64_t ys;
  bool resume;
  Prefetch pf;
};

// Tile<H, NP> through a dense staging copy of y, for the last panel of a matrix whose width is
// not a multiple of 16, so that nothing past column n is read or written. Out of line: the hot
// path then needs no stack frame for the copy.
template <int H, int NP, bool kBf16>
[[gnu::noinline]] void TileStaged(const void* panel, int64_t panel_elems, int64_t n_valid,
                                  const TileArgs& a, float* yt) {
  alignas(32) float tmp[H * NP * 16];
  if (a.resume) {
    for (int r = 0; r < H; ++r) std::memcpy(tmp + r * NP * 16, yt + r * a.ys, n_valid * 4);
  }
  Tile<H, NP, kBf16>(a.xp, panel, panel_elems, a.kc, tmp, NP * 16, a.resume, a.pf);
  for (int r = 0; r < H; ++r) std::memcpy(yt + r * a.ys, tmp + r * NP * 16, n_valid * 4);
}

// Tile<H, NP> at panels [p, p + NP).
template <int H, int NP, bool kBf16>
void TileAt(const PackedWeight& pw, int64_t p, const TileArgs& a) {
  using T = std::conditional_t<kBf16, uint16_t, float>;
  const T* panel = pw.data.as<T>() + p * pw.panel_elems + a.k0 * 16;
  float* yt = a.y + (p - a.pb) * 16;
  const int64_t n_valid = std::min<int64_t>(NP * 16, pw.n - p * 16);
  if (n_valid == NP * 16) {
    return Tile<H, NP, kBf16>(a.xp, panel, pw.panel_elems, a.kc, yt, a.ys, a.resume, a.pf);
  }
  TileStaged<H, NP, kBf16>(panel, pw.panel_elems, n_valid, a, yt);
}

// One row tile of H rows over panels [p0, p1): NP panels at a time, then the 1..NP-1 left over
// with narrower tiles (same per-element order, fewer chains).
template <int H, bool kBf16>
void RowTile(const PackedWeight& pw, int64_t p0, int64_t p1, const TileArgs& a) {
  constexpr int NP = Avx2PanelsPerTile(H);
  int64_t p = p0;
  for (; p + NP <= p1; p += NP) TileAt<H, NP, kBf16>(pw, p, a);
  switch (p1 - p) {
    case 0: return;
    case 1: return TileAt<H, 1, kBf16>(pw, p, a);
    case 2: return TileAt<H, std::min(NP, 2), kBf16>(pw, p, a);
    default: return TileAt<H, std::min(NP, 3), kBf16>(pw, p, a);
  }
}

template <bool kBf16>
void RunRowTile(int64_t h, const PackedWeight& pw, int64_t p0, int64_t p1, const TileArgs& a) {
  switch (h) {
    case 1: return RowTile<1, kBf16>(pw, p0, p1, a);
    case 2: return RowTile<2, kBf16>(pw, p0, p1, a);
    case 3: return RowTile<3, kBf16>(pw, p0, p1, a);
    case 4: return RowTile<4, kBf16>(pw, p0, p1, a);
    case 5: return RowTile<5, kBf16>(pw, p0, p1, a);
    default: return RowTile<6, kBf16>(pw, p0, p1, a);
  }
}

// Tiles [t0, t1) over panels [p0, p1) and the k-block at k0: every tile passes over the same
// panel k-blocks (in L1). Each panel's prefetch target is `ahead` bytes past its k-block: tile
// i of the n takes share i of it. `starts[t]` is RowTileStart(m, t), computed once per task.
// y is at column 0 of panel pb.
template <bool kBf16>
void RowBlock(const float* xp, const int64_t* starts, const PackedWeight& pw, int64_t t0,
              int64_t t1, int64_t pb, int64_t p0, int64_t p1, int64_t k0, int64_t kc_max,
              int64_t ahead, float* y, int64_t ys, Round round) {
  const int64_t k = pw.k, kc = std::min(kc_max, k - k0), n = t1 - t0;
  const int64_t esize = kBf16 ? 2 : 4;
  const int64_t share = kc_max * 16 * esize / n, stride = 32 * esize / n;
  // On the last k-block the tile's sums are complete: rounded while they are still in L1 (a
  // pass over the task's whole output afterwards read it back from L2 in prefill).
  const bool round_now = round == Round::kBf16 && k0 + kc == k;
  const int64_t c0 = (p0 - pb) * 16, c1 = std::min(pw.n, p1 * 16) - pb * 16;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t r0 = starts[t], h = starts[t + 1] - r0;
    const Prefetch pf{ahead + (t - t0) * share, stride};
    RunRowTile<kBf16>(h, pw, p0, p1,
                      {xp + r0 * k + k0 * h, k0, kc, y + r0 * ys, pb, ys, k0 > 0, pf});
    if (round_now) {
      for (int64_t r = r0; r < r0 + h; ++r) RoundBf16InPlaceAvx2(y + r * ys + c0, c1 - c0);
    }
  }
}

template <bool kBf16>
void Panels(const float* xp, int64_t m, const PackedWeight& pw, int64_t pb, int64_t pe, float* y,
            int64_t ys, Round round) {
  const int64_t k = pw.k, n_tiles = NumRowTiles(m);
  const int64_t esize = kBf16 ? 2 : 4;
  // Row tile starts without a division per tile and k-block (they showed in profiles).
  thread_local std::vector<int64_t> starts;
  starts.resize(n_tiles + 1);
  for (int64_t t = 0; t <= n_tiles; ++t) starts[t] = RowTileStart(m, t);
  if (n_tiles <= kTilesPerBlock) {
    // Decode-sized m: one row block, x stays in L2 throughout. Panels (a tile's width of them,
    // or pairs when tiles share them from L1) are done one group at a time over all of k, so
    // the weights are read as a few sequential streams. The prefetch target is the next
    // k-block of the same panels, and during the last k-block the first k-block of the next
    // group's panels, so that no stream starts cold.
    const int64_t group = n_tiles == 1 ? Avx2PanelsPerTile(static_cast<int>(m)) : 2;
    for (int64_t p = pb; p < pe; p += group) {
      const int64_t p1 = std::min(pe, p + group);
      for (int64_t k0 = 0; k0 < k; k0 += kKcDecode) {
        const int64_t kc = std::min(kKcDecode, k - k0);
        const int64_t ahead = k0 + kc < k ? kc * 16 * esize
                                          : (group * pw.panel_elems - k0 * 16) * esize;
        RowBlock<kBf16>(xp, starts.data(), pw, 0, n_tiles, pb, p, p1, k0, kKcDecode, ahead, y,
                        ys, round);
      }
    }
    return;
  }
  // Prefill: k-blocks outside row blocks, so a row block of x (L2) serves all the task's panels
  // and the task's panel k-blocks (≤ 8 · kKc · 32 B = 32 KiB, L2) serve all row blocks. What
  // comes next is the next pair of panels at the same k-block: that is the prefetch target.
  // Rows in equal spans of at most kSpanBlocks row blocks, each over all of k: every k-block
  // reloads and stores the span's y, which then stays in L3 (a 2048-row step of MiniCPM4's MLP
  // otherwise streams 32 MiB of y per k-block through DRAM: pp2048 in one step 119-133 → 126-134
  // tokens/s, 4 interleaved rounds).
  constexpr int64_t kSpanTiles = kSpanBlocks * kTilesPerBlock;
  const int64_t spans = (n_tiles + kSpanTiles - 1) / kSpanTiles;
  const int64_t span_tiles = (n_tiles + spans - 1) / spans;
  for (int64_t s0 = 0; s0 < n_tiles; s0 += span_tiles) {
    const int64_t s1 = std::min(n_tiles, s0 + span_tiles);
    for (int64_t k0 = 0; k0 < k; k0 += kKcPrefill) {
      for (int64_t t0 = s0; t0 < s1; t0 += kTilesPerBlock) {
        const int64_t t1 = std::min(s1, t0 + kTilesPerBlock);
        for (int64_t p = pb; p < pe; p += kPrefillGroup) {
          RowBlock<kBf16>(xp, starts.data(), pw, t0, t1, pb, p, std::min(pe, p + kPrefillGroup),
                          k0, kKcPrefill, kPrefillGroup * pw.panel_elems * esize, y, ys, round);
        }
      }
    }
  }
}

// ---- Ternary weights (ternary.h): 2-bit codes and per-group bf16 scales. ----

// The constants that turn a panel's word of 16 codes into its 16 weights: lane j of the low (high)
// half shifts column j's (j + 8's) code down to bits 0-1, vpermilps picks the pattern of t ∈ {+0,
// +1, −1, −0} for it (it reads index bits 0-1 only, so the other codes above do not matter; the
// 4-entry table sits in both 128-bit halves; one cycle, where the cross-lane vpermps was the
// bottleneck of batch-1 decode: A/B +3-10%), and `pattern & (s | sign)` is the f32 bits of t · s:
// 0x7fff0000 keeps s, 0xffff0000 keeps s and the sign, 0x80000000 the sign alone. Exact, no
// multiply.
struct TernaryDecoder {
  __m256i shift_lo = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
  __m256i shift_hi = _mm256_setr_epi32(16, 18, 20, 22, 24, 26, 28, 30);
  __m256 patterns = _mm256_castsi256_ps(_mm256_setr_epi32(
      0, 0x7fff0000, static_cast<int>(0xffff0000u), static_cast<int>(0x80000000u), 0, 0x7fff0000,
      static_cast<int>(0xffff0000u), static_cast<int>(0x80000000u)));

  // The group's scales of one panel (bf16, lanes (j, j + 8)) as the AND masks s | sign.
  void Scales(const uint16_t* s, __m256* s0, __m256* s1) const {
    LoadPanelRow<true>(s, s0, s1);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
    *s0 = _mm256_or_ps(*s0, sign);
    *s1 = _mm256_or_ps(*s1, sign);
  }
  // Columns 0..7 and 8..15 of one k step as f32 (each exactly the bf16 weight widened).
  void Weights(uint32_t word, __m256 s0, __m256 s1, __m256* w0, __m256* w1) const {
    const __m256i v = _mm256_set1_epi32(static_cast<int>(word));
    *w0 = _mm256_and_ps(_mm256_permutevar_ps(patterns, _mm256_srlv_epi32(v, shift_lo)), s0);
    *w1 = _mm256_and_ps(_mm256_permutevar_ps(patterns, _mm256_srlv_epi32(v, shift_hi)), s1);
  }
};

// H ≤ 6 rows × NP panels from panel p: each k step's 16 weights per panel decoded in registers (7
// instructions) and used by every row at once. Over all of k in one pass (no k-blocks: the chain is
// the same either way); the group's scales as AND masks in memory (vandps takes them as an
// operand), so that 2·H·NP accumulators, the table, two weight vectors and a broadcast fit the 16
// registers: NP = 4 for one row, 2 for two, 1 from three rows on. Decoding into bf16 panels in a
// scratch buffer and running the bf16 tiles on it (tried) was slower at every height (a store and a
// reload per 16 weights, and the widening): 33-35 vs 49-65 GFLOP/s at 3-4 rows, kernels_bench, one
// thread.
template <int H, int NP>
void TernaryTile(const float* xp, const PackedWeight& pw, int64_t p, float* y, int64_t ys,
                 Round round) {
  const TernaryDecoder dec;
  const int64_t k = pw.k, group = pw.ternary.group;
  const uint32_t* codes = pw.data.as<uint32_t>() + p * k;
  const uint16_t* scales = pw.scales.as<uint16_t>() + p * pw.num_groups * 16;
  __m256 acc[H][NP][2];
#pragma GCC unroll 6
  for (int r = 0; r < H; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) acc[r][q][0] = acc[r][q][1] = _mm256_setzero_ps();
  }
  alignas(32) float masks[NP][16];
  const float* xk = xp;
  for (int64_t c0 = 0, g = 0; c0 < k; c0 += group, ++g) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      __m256 s0, s1;
      dec.Scales(scales + (q * pw.num_groups + g) * 16, &s0, &s1);
      _mm256_store_ps(masks[q], s0);
      _mm256_store_ps(masks[q] + 8, s1);
    }
    const uint32_t* cp = codes + c0;
    for (int64_t c = c0; c < std::min(k, c0 + group); ++c, ++cp, xk += H) {
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) {
        __m256 w0, w1;
        dec.Weights(cp[q * k], _mm256_load_ps(masks[q]), _mm256_load_ps(masks[q] + 8), &w0, &w1);
#pragma GCC unroll 6
        for (int r = 0; r < H; ++r) {
          const __m256 b = _mm256_broadcast_ss(xk + r);
          acc[r][q][0] = _mm256_fmadd_ps(b, w0, acc[r][q][0]);
          acc[r][q][1] = _mm256_fmadd_ps(b, w1, acc[r][q][1]);
        }
      }
    }
  }
  // Stored through a dense copy: the last panel may be partial.
  alignas(32) float out[H][NP * 16];
#pragma GCC unroll 6
  for (int r = 0; r < H; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      _mm256_store_ps(out[r] + q * 16, acc[r][q][0]);
      _mm256_store_ps(out[r] + q * 16 + 8, acc[r][q][1]);
    }
  }
  const int64_t n_valid = std::min<int64_t>(NP * 16, pw.n - p * 16);
  for (int r = 0; r < H; ++r) {
    float* yr = y + r * ys;
    std::memcpy(yr, out[r], n_valid * sizeof(float));
    if (round == Round::kBf16) RoundBf16InPlaceAvx2(yr, n_valid);
  }
}

// Panels [pb, pe) for H ≤ 6 rows (one row tile): NP at a time, then single panels. y is at
// panel pb's column 0; a tile's at its first panel's.
template <int H>
void TernaryPanels(const float* xp, const PackedWeight& pw, int64_t pb, int64_t pe, float* y,
                   int64_t ys, Round round) {
  constexpr int NP = H == 1 ? 4 : H == 2 ? 2 : 1;
  int64_t p = pb;
  for (; p + NP <= pe; p += NP) TernaryTile<H, NP>(xp, pw, p, y + (p - pb) * 16, ys, round);
  for (; p < pe; ++p) TernaryTile<H, 1>(xp, pw, p, y + (p - pb) * 16, ys, round);
}

// xp[k][H] = x[H rows][k]ᵀ: one tile's rows interleaved so a k step broadcasts adjacent floats.
template <int H>
void PackTile(const float* x, int64_t xs, int64_t k, float* xp) {
  for (int64_t kk = 0; kk < k; ++kk) {
#pragma GCC unroll 6
    for (int r = 0; r < H; ++r) xp[kk * H + r] = x[r * xs + kk];
  }
}

// ---- Unpacked weights: 4 weight rows at a time against each x row (dot-product form). ----

using avx2::HSum;

template <bool kBf16>
inline __m256 LoadW(const void* base, int64_t idx) {
  if constexpr (kBf16) return avx2::LoadBf16(static_cast<const uint16_t*>(base) + idx);
  else return _mm256_loadu_ps(static_cast<const float*>(base) + idx);
}

template <bool kBf16>
inline float WAt(const void* base, int64_t idx) {
  if constexpr (kBf16) return Bf16ToF32(static_cast<const uint16_t*>(base)[idx]);
  else return static_cast<const float*>(base)[idx];
}

template <bool kBf16>
void Rows(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w, int64_t rb,
          int64_t re, float* y, int64_t y_stride) {
  const int64_t k = w.in_features, k8 = k & ~int64_t{7};
  int64_t r = rb;
  for (; r + 4 <= re; r += 4) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * x_stride;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t j = 0; j < k8; j += 8) {
        __m256 xv = _mm256_loadu_ps(xi + j);
        a0 = _mm256_fmadd_ps(xv, LoadW<kBf16>(w.data, (r + 0) * k + j), a0);
        a1 = _mm256_fmadd_ps(xv, LoadW<kBf16>(w.data, (r + 1) * k + j), a1);
        a2 = _mm256_fmadd_ps(xv, LoadW<kBf16>(w.data, (r + 2) * k + j), a2);
        a3 = _mm256_fmadd_ps(xv, LoadW<kBf16>(w.data, (r + 3) * k + j), a3);
      }
      float s[4] = {HSum(a0), HSum(a1), HSum(a2), HSum(a3)};
      for (int64_t j = k8; j < k; ++j) {
        // Explicit fma in both paths: a weight row must sum the same way in a group of 4 and
        // alone, whatever the compiler would contract.
        for (int q = 0; q < 4; ++q) {
          s[q] = std::fma(xi[j], WAt<kBf16>(w.data, (r + q) * k + j), s[q]);
        }
      }
      for (int q = 0; q < 4; ++q) y[i * y_stride + r + q] = s[q];
    }
  }
  for (; r < re; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * x_stride;
      __m256 a = _mm256_setzero_ps();
      for (int64_t j = 0; j < k8; j += 8) {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(xi + j), LoadW<kBf16>(w.data, r * k + j), a);
      }
      float s = HSum(a);
      for (int64_t j = k8; j < k; ++j) s = std::fma(xi[j], WAt<kBf16>(w.data, r * k + j), s);
      y[i * y_stride + r] = s;
    }
  }
}

}  // namespace

void PackRowTilesAvx2(const float* x, int64_t x_stride, int64_t m, int64_t k, int64_t tile_begin,
                      int64_t tile_end, float* xp) {
  for (int64_t t = tile_begin; t < tile_end; ++t) {
    const int64_t r0 = RowTileStart(m, t), h = RowTileStart(m, t + 1) - r0;
    const float* xt = x + r0 * x_stride;
    float* dst = xp + r0 * k;
    switch (h) {
      case 1: std::memcpy(dst, xt, k * sizeof(float)); break;
      case 2: PackTile<2>(xt, x_stride, k, dst); break;
      case 3: PackTile<3>(xt, x_stride, k, dst); break;
      case 4: PackTile<4>(xt, x_stride, k, dst); break;
      case 5: PackTile<5>(xt, x_stride, k, dst); break;
      default: PackTile<6>(xt, x_stride, k, dst); break;
    }
  }
}

void MatMulPanelsAvx2(const float* xp, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                      int64_t panel_end, float* y, int64_t y_stride, Round round) {
  if (pw.layout == PackedLayout::kPanel16Ternary) {
    // Up to one row tile on the codes (decode at batch ≤ 6: an 8th of the bytes); more rows on the
    // same weight as bf16 panels (compute-bound, where decoding in every row tile costs more than
    // streaming bf16: 68 vs 83 GFLOP/s at 16 rows, one thread). Bitwise the same.
    switch (m) {
      case 1:
        return TernaryPanels<1>(xp, pw, panel_begin, panel_end, y, y_stride, round);
      case 2:
        return TernaryPanels<2>(xp, pw, panel_begin, panel_end, y, y_stride, round);
      case 3:
        return TernaryPanels<3>(xp, pw, panel_begin, panel_end, y, y_stride, round);
      case 4:
        return TernaryPanels<4>(xp, pw, panel_begin, panel_end, y, y_stride, round);
      case 5:
        return TernaryPanels<5>(xp, pw, panel_begin, panel_end, y, y_stride, round);
      case 6:
        return TernaryPanels<6>(xp, pw, panel_begin, panel_end, y, y_stride, round);
      default:
        return Panels<true>(xp, m, *pw.panels, panel_begin, panel_end, y, y_stride, round);
    }
  } else if (pw.layout == PackedLayout::kPanel16Bf16) {
    Panels<true>(xp, m, pw, panel_begin, panel_end, y, y_stride, round);
  } else {
    Panels<false>(xp, m, pw, panel_begin, panel_end, y, y_stride, round);
  }
}

void MatMulRowsAvx2(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  if (w.dtype == DType::kBF16) Rows<true>(x, x_stride, m, w, row_begin, row_end, y, y_stride);
  else Rows<false>(x, x_stride, m, w, row_begin, row_end, y, y_stride);
}

}  // namespace cpm::kernels
