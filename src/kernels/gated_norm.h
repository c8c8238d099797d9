// The small normalisations and gates of the Qwen3.5 hybrid: Gated DeltaNet's output norm
// (RMSNorm gated by silu(z)), its L2-normalised q/k, and gated attention's sigmoid output gate.
#pragma once

#include <cstdint>

#include "kernels/rounding.h"

namespace cpm::kernels {

// y = rmsnorm(x) · w · silu(z) per row of `dim` (Qwen3_5RMSNormGated; plain weight, no +1).
// Statistics in f32. With Round::kBf16 it rounds as HF on bf16 tensors:
// y = bf(bf(w · bf(x · r)) · silu(z)). x, z, y: [rows, dim] with strides; w: [dim]. y may alias x.
void GatedRmsNorm(const float* x, int64_t x_stride, const float* z, int64_t z_stride,
                  const float* w, float* y, int64_t y_stride, int64_t rows, int64_t dim, float eps,
                  Round round);

// x <- x / sqrt(Σx² + eps) · scale for each of `heads` vectors of `dim` in each row, in f32
// (eps inside the sqrt). x: [rows, heads, dim] with row stride x_stride; heads are contiguous.
void L2NormHeads(float* x, int64_t x_stride, int64_t rows, int64_t heads, int64_t dim, float eps,
                 float scale);

// x <- x · sigmoid(gate); with Round::kBf16: bf(x · bf(sigmoid(gate))).
// x: [rows, dim] (x_stride), gate: [rows, dim] (gate_stride).
void SigmoidMul(float* x, int64_t x_stride, const float* gate, int64_t gate_stride, int64_t rows,
                int64_t dim, Round round);

}  // namespace cpm::kernels
