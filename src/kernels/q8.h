// Q8_0 weights (`--quantization q8_0`): llama.cpp's 8-bit format, blocks of 32 inputs along a
// row, each block's values q ∈ [−127, 127] with one fp16 scale d = amax / 127, w ≈ d·q. A decode
// step streams 1.06 bytes per weight instead of bf16's 2. Activations are quantized the same way
// per row and block (d kept in f32) at each call, and the products summed as integers: VNNI's
// vpdpbusd where the CPU has it (64 multiply-adds per instruction), else AVX2's vpmaddubsw.
//
// Exactness: every variant computes y[i, c] = out_scale · Σ_b fma(float(dot_b), s_b, ·), blocks
// in k order from 0, with dot_b the block's exact integer dot product and s_b = d_w·d_x in f32;
// so the scalar, AVX2 and AVX-512 kernels give bitwise the same results, at any batch size.
//
// A weight's fp16 scales are stored shifted by a per-tensor power of two (out_scale = 2^e,
// applied exactly once a sum is complete), so that the small blocks of small-valued weights keep
// fp16's full 11-bit precision instead of falling into its subnormals (below 6.1e-5).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"

namespace cpm::kernels {

struct PackedWeight;

constexpr int64_t kQ8Block = 32;        // inputs per scale
constexpr int64_t kQ8PanelWidth = 16;   // output columns per panel (one zmm of int32 sums)
constexpr int64_t kQ8GroupK = 4;        // inputs per 32-bit lane (one vpdpbusd step)
// Bytes of one panel's block: 8 steps × 16 columns × 4 inputs.
constexpr int64_t kQ8PanelBlockBytes = kQ8Block * kQ8PanelWidth;

constexpr int64_t Q8Blocks(int64_t k) { return (k + kQ8Block - 1) / kQ8Block; }
// Bytes an [n, k] weight takes as Q8_0, codes and fp16 scales (what a decode step streams).
constexpr int64_t Q8Bytes(int64_t n, int64_t k) {
  return (n + kQ8PanelWidth - 1) / kQ8PanelWidth * kQ8PanelWidth * Q8Blocks(k) * (kQ8Block + 2);
}

// `w` (f32 or bf16, [out, in]) quantized as PackedLayout::kPanel16Q8: panel p (columns
// 16p..16p+15) is [block][step][16 columns][4 inputs] bytes of q + 128 (the unsigned operand of
// vpdpbusd), zero-padded past k and n; `scales` [panel][block][16] fp16 bits of d / out_scale.
std::shared_ptr<const void> PackQ8(const LinearWeight& w);

// The weight as the kernels see it, [n][k] f32 values d·q (tests).
std::vector<float> DequantizeQ8(const PackedWeight& pw);

// x quantized per row for the kernels, once per call (QuantizeRowsQ8).
struct Q8X {
  const int8_t* q = nullptr;     // [m][q_stride]: row i's values, zero past k
  const float* d = nullptr;      // [m][blocks]: each block's scale amax / 127
  const int32_t* corr = nullptr;  // [m][blocks]: −128 · Σ q of the block (vpdpbusd's offset)
  int64_t q_stride = 0, blocks = 0;
};
// Row stride of the quantized x: whole blocks, and a cache line more, so that rows a multiple
// of 4 KiB long do not share L1 sets.
constexpr int64_t Q8XStride(int64_t k) { return Q8Blocks(k) * kQ8Block + 64; }

// Rows [row_begin, row_end) of x ([·][x_stride] f32, k columns) into the arrays of a Q8X
// (q, d and corr at row 0). q = round-to-nearest-even(x / d), d = amax / 127 (0 if amax is 0).
void QuantizeRowsQ8(const float* x, int64_t x_stride, int64_t k, int64_t row_begin,
                    int64_t row_end, int8_t* q, float* d, int32_t* corr);

// y[0, m) × columns [16·panel_begin, min(n, 16·panel_end)) from a kPanel16Q8 weight, `y`
// pointing at the first of those columns (row 0), on the active ISA's kernel.
void MatMulPanelsQ8(const Q8X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                    int64_t panel_end, float* y, int64_t y_stride, Round round);

// Panels one decode tile spans by its rows (AVX-512: ≤ 2·rows·panels + panels + 1 registers of
// 32), for the task splitter.
constexpr int Q8PanelsPerTile(int64_t rows) { return rows <= 2 ? 4 : rows <= 5 ? 2 : 1; }
constexpr int64_t kQ8MaxTileRows = 8;

// "vnni: vpdpbusd ...", "avx2: vpmaddubsw ..." or "scalar", for logs.
std::string Q8KernelDescription();

// For the load log: "169 linear weights as Q8_0: 452.1 MB instead of 851.3 MB of bf16".
std::string SummarizeQ8(const std::vector<const LinearWeight*>& ws);

// ---- per-ISA kernels (q8.cc's dispatch picks one) ----
void QuantizeRowsQ8Scalar(const float* x, int64_t x_stride, int64_t k, int64_t row_begin,
                          int64_t row_end, int8_t* q, float* d, int32_t* corr);
void QuantizeRowsQ8Avx512(const float* x, int64_t x_stride, int64_t k, int64_t row_begin,
                          int64_t row_end, int8_t* q, float* d, int32_t* corr);
void MatMulPanelsQ8Scalar(const Q8X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                          int64_t panel_end, float* y, int64_t y_stride, Round round);
void MatMulPanelsQ8Avx2(const Q8X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                        int64_t panel_end, float* y, int64_t y_stride, Round round);
void MatMulPanelsQ8Vnni(const Q8X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                        int64_t panel_end, float* y, int64_t y_stride, Round round);

}  // namespace cpm::kernels
