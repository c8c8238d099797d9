// Element-wise ops of the SigLIP vision tower and its mergers (MiniCPM-V-4.6, spec
// minicpmv46.md §4): LayerNorm with bias, bias adds, and the two GELUs, spread over the pool;
// LayerNorm's rows and the tanh-GELU in AVX2 where the CPU has it (vision_ops_avx2.cc).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/rounding.h"

namespace cpm::kernels {

// out[r] = (x[r] − mean) / sqrt(var + eps) · w + b over `dim` (biased variance, as torch; mean
// and variance summed in f64).
// out may alias x. With Round::kBf16 the result is rounded once (a bf16 LayerNorm's output).
void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
               float* out, Round round, ThreadPool& pool);

// y[r, j] = y[r, j] + bias[j] (a linear layer's bias), then the optional rounding.
void AddBias(float* y, int64_t rows, int64_t dim, const float* bias, Round round, ThreadPool& pool);

// x = 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) (torch's gelu approximate="tanh").
void GeluTanh(float* x, int64_t n, Round round, ThreadPool& pool);
// AddBias then GeluTanh, bitwise, each row block finished while it is in cache: one pass over y
// instead of two (fc1's output, [1024, 4304] f32 in a 448² slice's first layers).
void AddBiasGeluTanh(float* y, int64_t rows, int64_t dim, const float* bias, Round round,
                     ThreadPool& pool);
// The scalar definition (tests compare the vector kernel with it).
void GeluTanhRef(float* x, int64_t n, Round round);
// x = 0.5·x·(1 + erf(x/√2)) (torch's exact gelu).
void GeluErf(float* x, int64_t n, Round round, ThreadPool& pool);

}  // namespace cpm::kernels
