// Causal depthwise conv1d over time with SiLU, continuing from a per-sequence state: the
// short convolution of Gated DeltaNet (Qwen3.5 linear-attention layers). f32; AVX2 (8 channels
// per vector) or AVX-512 (16, bitwise the AVX2 results) for kernels of 2-6 taps, else the scalar
// reference.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/rounding.h"

namespace cpm::kernels {

// For channels c in [c_begin, c_end) of a `channels`-wide signal:
//   xx = state ++ x                                   // [kernel-1 + t, channels]
//   y[i, c] = silu(Σ_j w[c, j] · xx[i + j, c])        // w[c, kernel-1] multiplies the current row
//   state  <- last kernel-1 rows of xx (zeros at the start of a sequence)
// x: [t, channels] (row stride x_stride); w: the weight as PackConvTaps lays it out;
// state: [kernel-1, channels] f32, read then updated in place; y: [t, channels] (y_stride).
// y must not alias x. With Round::kBf16 the convolution is rounded to bf16 before SiLU and y
// after it, as torch's conv1d on bf16 tensors and then SiLU (HF's Qwen3.5 torch path).
void CausalConv1dSilu(const float* x, int64_t x_stride, int64_t t, int64_t channels,
                      int64_t c_begin, int64_t c_end, const float* w, int64_t kernel,
                      float* state, float* y, int64_t y_stride, Round round);

// PyTorch's depthwise conv weight w[c, j] ([channels, 1, kernel] f32) as CausalConv1dSilu reads
// it: [ceil(channels / 16), kernel, 16], each group of 16 channels' taps together (zeros past
// the last channel), so that one tap of a group is one vector load: a zmm, or either half for
// AVX2's 8 lanes (gathering them from [C, K] per call cost more than the convolution itself in
// a decode step).
constexpr int64_t kConvGroup = 16;
std::vector<float> PackConvTaps(std::span<const float> w, int64_t channels, int64_t kernel);

}  // namespace cpm::kernels
