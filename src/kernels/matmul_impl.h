// Internals of matmul (kernels/ only): the packed weight layouts PrepareLinear() makes and the
// per-ISA kernels that compute a range of output columns of y = x · Wᵀ for all m rows of x.
#pragma once

#include <cstdint>

#include "base/aligned_buffer.h"
#include "kernels/matmul.h"

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
};

struct PackedWeight {
  PackedLayout layout = PackedLayout::kPanel16F32;
  int64_t width = 16;       // columns per panel
  int64_t n = 0, k = 0;     // out_features, in_features
  int64_t num_panels = 0;   // ceil(n / width)
  int64_t panel_elems = 0;  // elements per panel (k·width, or 2·ceil(k/2)·width for pairs)
  AlignedBuffer data;       // [num_panels][panel_elems] of f32 or uint16_t
};

// The packed form of `w`, or null if it has none (PrepareLinear() not called).
inline const PackedWeight* Packed(const LinearWeight& w) {
  return static_cast<const PackedWeight*>(w.packed.get());
}

// Computes y[0, m) × columns [16·panel_begin, min(n, 16·panel_end)) from a packed weight.
// Called with any m: rows are tiled by ≤ 6 and k is blocked so that tiles stay in L1/L2.
void MatMulPanelsAvx2(const float* x, int64_t x_stride, int64_t m, const PackedWeight& pw,
                      int64_t panel_begin, int64_t panel_end, float* y, int64_t y_stride);
void MatMulPanelsAvx512(const float* x, int64_t x_stride, int64_t m, const PackedWeight& pw,
                        int64_t panel_begin, int64_t panel_end, float* y, int64_t y_stride);

// Unpacked fallbacks (weights as loaded): output rows [row_begin, row_end), MatMulRef signature.
void MatMulRowsAvx2(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t y_stride);

// True if every x value is exactly a bf16 (low 16 bits zero), so bf16 dot products lose nothing.
bool AllBf16ExactAvx2(const float* x, int64_t x_stride, int64_t m, int64_t k);

}  // namespace cpm::kernels
