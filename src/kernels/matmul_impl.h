// Internals of matmul (kernels/ only): the packed weight layouts PrepareLinear() makes and the
// per-ISA kernels that compute a range of output columns of y = x · Wᵀ for all m rows of x.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/aligned_buffer.h"
#include "kernels/amx.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ternary.h"

namespace cpm::kernels {

// Packed layouts. A "panel" holds `width` consecutive output features (rows of W) for every k:
// panel p = [k][width], so a kernel reads one short contiguous vector per k and broadcasts x
// (outer-product form, register tile of MR x rows × width columns). The last panel is padded
// with zeros. bf16 panels interleave column pairs (j, j + width/2) into one 32-bit lane, so
// `lane << 16` gives columns [0, width/2) and `lane & 0xffff0000` gives [width/2, width): two
// cheap integer ops widen a whole panel row, and the byte count stays that of the checkpoint.
enum class PackedLayout : uint8_t {
  kPanel16F32,   // AVX2: [k][16] f32
  kPanel16Bf16,  // AVX2: [k][16] bf16, lanes (j, j+8)
  kPanel32F32,   // AVX-512: [k][32] f32
  kPanel32Bf16,  // AVX-512: [k][32] bf16, lanes (j, j+16)
  // AVX-512 BF16 (vdpbf16ps): [ceil(k/2)][32][2] bf16, each lane the pair (k, k+1) of one column,
  // columns in order; an odd k is padded with a zero row.
  kPanel32Bf16Pairs,
  // AVX2, ternary bf16 weights (ternary.h): [k] uint32 per panel, column j's 2-bit code in bits
  // 2j, 2j+1 (0: +0, 1: +s, 2: −s, 3: −0), plus `scales`; and `panels`, the same weight as
  // kPanel16Bf16 for calls of more than 6 rows.
  kPanel16Ternary,
  // AVX-512 BF16 + VBMI (+ BMI2), ternary bf16 weights: the 2-bit codes of kPanel32Bf16Pairs's lanes,
  // [ceil(k/2)][2] uint64 per panel (word h: columns 16h..16h+15, the code of column 16h + l at
  // k = 2·kk + e in bits 2·(2l + e), 2·(2l + e) + 1; same codes as above); `scales`
  // [panel][group][2][32] uint16 as AND masks s | sign in the pair lanes' order; and `panels`,
  // the same weight as kPanel32Bf16Pairs for calls of more rows and for rows that are not bf16.
  kPanel32Ternary,
  // Q8_0 (q8.h), any ISA: [block of 32 k][8 steps][16 columns][4] bytes q + 128 per panel, plus
  // `scales` [panel][block][16] fp16 and `out_scale`. panel_elems counts bytes, num_groups blocks.
  kPanel16Q8,
};

inline bool IsQ8Layout(PackedLayout l) { return l == PackedLayout::kPanel16Q8; }

inline bool IsTernaryLayout(PackedLayout l) {
  return l == PackedLayout::kPanel16Ternary || l == PackedLayout::kPanel32Ternary;
}

struct PackedWeight {
  PackedLayout layout = PackedLayout::kPanel16F32;
  int64_t width = 16;       // columns per panel
  int64_t n = 0, k = 0;     // out_features, in_features
  int64_t num_panels = 0;   // ceil(n / width)
  int64_t panel_elems = 0;  // elements per panel (k·width, or 2·ceil(k/2)·width for pairs)
  AlignedBuffer data;       // [num_panels][panel_elems] of f32 or uint16_t (ternary: codes)
  // kPanel16Ternary: s of each group of `ternary.group` inputs as raw bf16 bits,
  // [num_panels][num_groups][16] with lanes (j, j+8) as the bf16 panels (padding columns 0);
  // kPanel32Ternary: the masks described there.
  TernaryFormat ternary;
  int64_t num_groups = 0;
  AlignedBuffer scales;
  float out_scale = 1.0f;  // kPanel16Q8: the power of two its fp16 scales are stored divided by
  // Ternary layouts: the weight as bf16 panels for calls of more rows than the codes serve
  // (AVX2: more than one row tile, 7+; AVX-512: 33+), which are compute-bound: decoding the
  // codes again in every row tile costs more than streaming bf16 (AVX2: 68 vs 83 GFLOP/s at 16
  // rows, kernels_bench, one thread). Memory holds both (the codes add an 8th).
  std::shared_ptr<const PackedWeight> panels;
};

// `w` re-laid out as `layout` (PrepareLinear picks the layout of the active ISA; tests pick
// others, e.g. to check the AVX-512 kernels under emulation).
std::shared_ptr<const void> PackLinear(const LinearWeight& w, PackedLayout layout);

// The packed form of `w`, or null if it has none (PrepareLinear() not called).
inline const PackedWeight* Packed(const LinearWeight& w) {
  return static_cast<const PackedWeight*>(w.packed.get());
}

// Panels one register tile spans, by its rows (decode widens over several panels so that a short
// tile has enough accumulator chains and weight streams): AVX2 2·h·NP accumulators, ≥ 8 chains
// and ≤ 12 of the 16 registers (the rest hold the widened weights and a broadcast); AVX-512
// 2·MR·NP ≤ 24 of the 32 (widening, not a k-split, which would make a row's order depend on
// its tile's height). The kernels' widths, and the task splitter's smallest task
// (MakeTasks), so that no task ends in a narrower tile, which streams worse. A decode tile's
// panels are its weight streams, and a core keeps more misses in flight over four than over
// two: every matmul of a MiniCPM4-0.5B decode step from DRAM (Zen 5, 2 threads, interleaved
// builds) took 14-18% less time at 3 rows with 4 panels (24 accumulators) than with 2, 7-16% at
// 4 rows with 3 (24); 2 panels at 5 or 6 rows were level, 6 at 2 rows 1.5x slower and 8 at 1
// row 1.6x: four streams a core is the best, three where the registers allow no more.
constexpr int64_t kAvx512MaxTileRows = 8;  // 16 accumulators
constexpr int Avx2PanelsPerTile(int h) { return h == 1 ? 4 : h <= 3 ? 2 : 1; }
constexpr int Avx512PanelsPerTile(int mr) { return mr <= 3 ? 4 : mr == 4 ? 3 : 1; }

// Batch invariance: every kernel computes each output element y[i, c] as ONE sequential f32
// FMA chain over k = 0, 1, ..., K-1 (acc = fma(x[i, k], W[c, k], acc), from acc = 0), whatever
// m, the row's place in a register tile, the tile shape, the k-blocking or the thread count:
// a k-block resumes the chain from the partial sum it stored in y, and tasks split columns,
// never k. So a request's logits are bitwise the same alone and batched. (Variants differ from
// each other and from MatMulRef in order, so a run must not change ISA level between calls.)

// AVX2 row tiles: ceil(m / 6) tiles of balanced height (1..6 rows; 3..6 once there are two or
// more), tile t = rows [RowTileStart(m, t), RowTileStart(m, t + 1)). Balanced so that 16 rows
// are 5+5+6 rather than 6+6+4: a short tile has fewer FMA chains to hide the FMA latency.
constexpr int64_t kAvx2MaxTileRows = 6;
inline int64_t NumRowTiles(int64_t m) { return (m + kAvx2MaxTileRows - 1) / kAvx2MaxTileRows; }
inline int64_t RowTileStart(int64_t m, int64_t t) { return t * m / NumRowTiles(m); }

// x re-laid out for the AVX2 tiles: tile t (h rows from row s) is [k][h] floats at xp + s·k,
// so a tile broadcasts h consecutive floats per k. Packs tiles [tile_begin, tile_end).
void PackRowTilesAvx2(const float* x, int64_t x_stride, int64_t m, int64_t k, int64_t tile_begin,
                      int64_t tile_end, float* xp);

// y[0, m) × columns [16·panel_begin, min(n, 16·panel_end)) from a packed weight, `y` pointing
// at the first of those columns (row 0). `xp` is x packed by PackRowTilesAvx2 (for m = 1 the x
// row itself, which has that layout already).
// Weights are read from memory once per call for all m rows (k-blocks stay in L1/L2). With
// Round::kBf16 each output is rounded to bf16 once its sum is complete.
void MatMulPanelsAvx2(const float* xp, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                      int64_t panel_end, float* y, int64_t y_stride, Round round = Round::kNone);

// x as the AVX-512 kernels take it, prepared once per call for all tasks. For bf16 panels, a
// row that holds bf16 values only (the model's activations) with AVX512_BF16 present goes
// through vdpbf16ps on its (k, k+1) pairs; other rows through f32 FMAs on x as it is.
struct Avx512X {
  const float* x = nullptr;
  int64_t x_stride = 0;
  const uint8_t* dot = nullptr;     // [m]: row i uses vdpbf16ps; null: no row does
  const uint32_t* pairs = nullptr;  // [m][PairsStride(k)] bf16 pairs, k in the low half
};
// Elements between consecutive rows of the pair array: a cache line more than a row needs, so
// that the rows a tile broadcasts from do not share L1 sets (a row is 2 KiB or 8 KiB at these
// models' widths, and rows a multiple of 4 KiB apart all land in the same set).
constexpr int64_t PairsStride(int64_t k) { return (k + 1) / 2 + 16; }
// PrepareXAvx512, which fills an Avx512X, and MatMulPanelsAvx512, which takes one, are declared
// in ops_avx512.h with the other AVX-512 kernels.

// ---- AMX (matmul_amx.cc) ----

// MatMulPanelsAvx512's kBf16Dot for m rows of bf16 pairs ([m][pairs_stride], Avx512X's) against
// kPanel32Bf16Pairs panels [panel_begin, panel_end), on AMX tiles: each sum one chain over the
// k pairs in order, whatever m. Needs AmxUsable().
// A tall call walks its x in groups of `group_rows` rows (a multiple of 32) and, within a
// group, in chunks of `chunk_steps` 16-pair k steps, each chunk against every panel of a batch
// of ≤ 8 before the next chunk; partial sums wait in f32 between chunks (no bit moves).
// AmxBlockingFor(m, k): the whole call as one group and one chunk where its x fits in L2, else
// 128 rows × 512 KiB of x at a time. `blocking` (tests) overrides it.
struct AmxBlocking {
  int64_t group_rows;
  int64_t chunk_steps;
};
AmxBlocking AmxBlockingFor(int64_t m, int64_t k);
void MatMulPanelsAmx(const uint32_t* pairs, int64_t pairs_stride, int64_t m, const PackedWeight& pw,
                     int64_t panel_begin, int64_t panel_end, float* y, int64_t y_stride,
                     Round round, const AmxBlocking* blocking = nullptr);
// The same sums rounded to bf16 into bf16 rows y (MatMul's Bf16Rows), bitwise those of
// Round::kBf16 above in half the bytes.
void MatMulPanelsAmx(const uint32_t* pairs, int64_t pairs_stride, int64_t m, const PackedWeight& pw,
                     int64_t panel_begin, int64_t panel_end, uint16_t* y, int64_t y_stride,
                     const AmxBlocking* blocking = nullptr);

// ---- AVX-512 or AVX2 kernels on an AVX-512 CPU (matmul_choice.cc) ----

// Whether the AVX-512 kernels (and their packed layouts) are used, decided once per process:
// CPM_AVX512_MATMUL=1 or =0, else a self-check at first use (CompareMatmulKernels: correct, and
// at least kMatmulCheckMargin times as fast as the AVX2 kernels). `why` says which, for logs.
struct KernelChoice {
  bool on = false;
  std::string why;
};
const KernelChoice& Avx512Choice();
// Whether the bf16 rows of bf16 pair panels (a layout only the chosen AVX-512 kernels use) run
// on AMX tiles (MatMulPanelsAmx), decided once per process: where AmxUsable(), unless CPM_AMX=0.
const KernelChoice& AmxChoice();
// The layout ternary bf16 weights are packed as at `isa` when TernaryPackingEnabled():
// kPanel32Ternary where the AVX-512 matmul runs vdpbf16ps and the CPU has VBMI and BMI2, else
// kPanel16Ternary.
PackedLayout TernaryCodesLayout(Isa isa);

// Rows per call that run on the codes: kPanel16Ternary one row tile (kAvx2MaxTileRows);
// kPanel32Ternary up to this many, in tiles of ≤ 8 rows that each decode them. Taller calls read
// the bf16 copy (`pw.panels`), where the decoding repeated by every row tile costs more than the
// bytes it saves. BitCPM4-0.5B dims, Zen 5, 2 threads: AVX-512 codes vs pairs 2.2x at batch 1,
// 1.25x at 8 (1.4x with the mask decode), 1.05-1.2x at 12-16; with the mask decode a limit of
// 32 beat 16 at 24 and 32 rows (+2-13%, 3 of 3 interleaved rounds). Before it, 64 rows and
// 512-row prefill ran 1.1-1.3x faster on the pairs; with it, 64 was level in two rounds, so
// longer runs stay on the pairs.
constexpr int64_t kAvx512TernaryMaxRows = 32;

// y[m, n] = x[m, k] · Wᵀ for the self-check's fixed weight (packed when the kernel was made).
using CheckKernel = std::function<void(const float* x, int64_t m, float* y)>;
struct MatmulCheck {
  bool correct = false;
  double max_error_ratio = 0;  // max |y - MatMulRef| / Σ|x·w| of the element
  double candidate_gflops = 0, baseline_gflops = 0;
};
// A correct kernel's error is reordering only: ~k · 2⁻²⁴ of the terms' scale at worst.
constexpr double kMatmulCheckTolerance = 1e-4;
constexpr double kMatmulCheckMargin = 1.1;
// Runs `candidate` against MatMulRef (bf16-exact x, 1 and 24 rows of bf16 `w`) and times it
// against `baseline`, alternating. Tests pass emulated or deliberately broken kernels.
MatmulCheck CompareMatmulKernels(const LinearWeight& w, const CheckKernel& candidate,
                                 const CheckKernel& baseline);
bool PrefersCandidate(const MatmulCheck& c);
// The AVX2 kernels as a CheckKernel over `w` (packed here, once; run through MatMul on one
// thread). Needs AVX2+FMA and an active ISA of at least AVX2.
CheckKernel Avx2CheckKernel(const LinearWeight& w);

// Unpacked fallbacks (weights as loaded): output rows [row_begin, row_end), MatMulRef signature.
// The AVX2 one sums 8 lanes of k (j ≡ lane mod 8) over whole vectors, then adds the lanes in a
// fixed tree and the k % 8 tail in order: a fixed function of k alone, so it is as batch
// invariant as the panel kernels, though in a different order.
void MatMulRowsAvx2(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t y_stride);

}  // namespace cpm::kernels
