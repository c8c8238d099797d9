// AVX2 variants of the small per-row ops (kernels/ only). Same signatures and rounding points as
// the public functions; the dispatchers in <op>.cc call them when ActiveIsa() >= kAvx2.
#pragma once

#include <cstdint>

#include "kernels/rmsnorm.h"
#include "kernels/rounding.h"

namespace cpm {
class ThreadPool;
}  // namespace cpm

namespace cpm::kernels {

void RmsNormAvx2(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride,
                 int64_t rows, int64_t dim, const RmsNormParams& p);
// `round_products`: each product rounded to bf16 too (RopeRounding::kEveryOp).
void RopeNeoxAvx2(float* x, int64_t x_stride, int64_t n_tokens, int64_t n_heads,
                  int64_t head_dim, int64_t rot_dim, const float* cos, const float* sin,
                  Round round, bool round_products);
// x = gelu_tanh(x) in place (vision_ops.h GeluTanh).
void GeluTanhAvx2(float* x, int64_t n, Round round);
// One row of LayerNorm (vision_ops.h), rounded to bf16 with `round`; out may alias x.
void LayerNormRowAvx2(const float* x, int64_t dim, const float* w, const float* b, float eps,
                      bool round, float* out);
// y[0, dim) += bias, rounded to bf16 with `round` (vision_ops.h AddBias, one row).
void AddBiasRowAvx2(float* y, int64_t dim, const float* bias, bool round);
// DenseAttention (dense_attention.h) on f32 FMAs.
void DenseAttentionAvx2(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                        int64_t heads, int64_t d, float scale, bool bf16, float* out,
                        int64_t out_ld, ThreadPool& pool);
void SiluMulAvx2(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                 float* out, int64_t out_stride, int64_t rows, int64_t dim, Round round);
void AddScaledAvx2(float* h, int64_t h_stride, const float* d, int64_t d_stride, int64_t rows,
                   int64_t dim, float scale, Round round);
void ScaleAvx2(float* x, int64_t n, float scale, Round round);
void RoundBf16InPlaceAvx2(float* x, int64_t n);
float MaxAvx2(const float* x, int64_t n);
float MinFiniteAvx2(const float* x, int64_t n);
// Σ exp(x[i] - shift), accumulated in f64.
double SumExpAvx2(const float* x, int64_t n, float shift);
// out[i] = exp((x[i] - shift) · scale); returns Σ out[i].
float ExpScaledAvx2(const float* x, int64_t n, float shift, float scale, float* out);
// out[i] = x[i] - shift.
void SubAvx2(const float* x, int64_t n, float shift, float* out);
// First index i >= begin with x[i] > threshold, or n.
int64_t FindGreaterAvx2(const float* x, int64_t begin, int64_t n, float threshold);
// The number of x[i] >= threshold.
int64_t CountAtLeastAvx2(const float* x, int64_t n, float threshold);
// MassSlices and FindEqual (sampling_ops.h).
void MassSlicesAvx2(const float* x, int64_t n, float lo, float scale, int count, int16_t* out);
int64_t FindEqualAvx2(const int16_t* x, int64_t begin, int64_t n, int16_t v);
// CausalConv1dSilu (conv1d.h) for kernels of 2..6 taps; false (nothing done) for others.
bool CausalConv1dSiluAvx2(const float* x, int64_t x_stride, int64_t t, int64_t channels,
                          int64_t c_begin, int64_t c_end, const float* w, int64_t kernel,
                          float* state, float* y, int64_t y_stride, Round round);

// gated_norm.h's ops.
void GatedRmsNormAvx2(const float* x, int64_t x_stride, const float* z, int64_t z_stride,
                      const float* w, float* y, int64_t y_stride, int64_t rows, int64_t dim,
                      float eps, Round round);
void L2NormHeadsAvx2(float* x, int64_t x_stride, int64_t rows, int64_t heads, int64_t dim,
                     float eps, float scale);
void SigmoidMulAvx2(float* x, int64_t x_stride, const float* gate, int64_t gate_stride,
                    int64_t rows, int64_t dim, Round round);
// avx2::SumSquares out of line, for AVX-512 files whose sums must be the AVX2 forms' to the bit:
// called across files, so that no inline code is built under both ISAs' flags.
float SumSquaresAvx2(const float* x, int64_t n);

}  // namespace cpm::kernels
