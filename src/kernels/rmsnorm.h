// RMSNorm over the last dimension: y = x / sqrt(mean(x²) + eps) · (weight_offset + w).
// weight_offset is 0 for Llama-style norms (MiniCPM) and 1 for zero-centred ones (Qwen3.5).
#pragma once

#include <cstdint>

#include "kernels/rounding.h"

namespace cpm::kernels {

struct RmsNormParams {
  float eps = 1e-6f;
  float weight_offset = 0.0f;
  // MiniCPM (HF LlamaRMSNorm-style on bf16): y = bf(x·r), out = bf(y·w) -> round_normalized.
  // Qwen3.5 (computes (x·r)·(1+w) in f32, casts once) -> only `round`.
  bool round_normalized = false;
  Round round = Round::kNone;
};

// x, y: [rows, dim] with row strides; w: [dim] f32. y may alias x.
void RmsNorm(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride,
             int64_t rows, int64_t dim, const RmsNormParams& p);

// RmsNorm's outputs (p.round must be Round::kBf16) as bf16 pairs, the x a bf16 dot-product matmul
// reads (matmul.h's PairRows): row r's element 2i in the low half of pairs[r · pairs_stride + i],
// an odd dim's last pair with a zero high half. Bitwise RmsNorm's values; a norm whose only
// reader is such a matmul then writes half the bytes and the matmul packs nothing.
void RmsNormToPairs(const float* x, int64_t x_stride, const float* w, uint32_t* pairs,
                    int64_t pairs_stride, int64_t rows, int64_t dim, const RmsNormParams& p);

}  // namespace cpm::kernels
