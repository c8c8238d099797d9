// Residual updates of the decoder: h = h + scale · d, with the model's rounding points.
#pragma once

#include <cstdint>

#include "kernels/rounding.h"

namespace cpm::kernels {

// h[r, j] += scale · d[r, j]. With Round::kBf16: h = bf(h + bf(d · scale)) (MiniCPM's
// scaled residual on bf16 tensors); scale 1 skips the inner rounding (it is exact).
void AddScaled(float* h, int64_t h_stride, const float* d, int64_t d_stride, int64_t rows,
               int64_t dim, float scale, Round round);

// The same on a delta given as bf16 values (matmul.h's Bf16Rows, as the o and down projections
// write them where MatMulWritesBf16Rows): bitwise AddScaled on the f32 values they hold.
void AddScaled(float* h, int64_t h_stride, const uint16_t* d, int64_t d_stride, int64_t rows,
               int64_t dim, float scale, Round round);

// x[i] *= scale for i in [0, n), then optional rounding.
void Scale(float* x, int64_t n, float scale, Round round);

// x[i] = bf(x[i]) for i in [0, n): round-to-nearest-even, NaN stays NaN (as cpm::RoundBf16);
// the `bf(x)` of the model specs.
void RoundBf16InPlace(float* x, int64_t n);

// x[0..n) rounded as `round` says: to bf16 for Round::kBf16, untouched for Round::kNone.
inline void RoundInPlace(float* x, int64_t n, Round round) {
  if (round == Round::kBf16) RoundBf16InPlace(x, n);
}

}  // namespace cpm::kernels
