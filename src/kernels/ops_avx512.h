// AVX-512 variants of the elementwise ops, called by their dispatchers when the active ISA is
// AVX-512 (cpu_features.h); the contracts are the scalar functions'.
#pragma once

#include <cstdint>

#include "kernels/rmsnorm.h"
#include "kernels/rounding.h"

namespace cpm {
class ThreadPool;
}  // namespace cpm

namespace cpm::kernels {

// residual.h's AddScaled, Scale and RoundBf16InPlace, and rmsnorm.h's RmsNorm: bitwise the
// scalar and AVX2 forms' results.
void AddScaledAvx512(float* h, int64_t h_stride, const float* d, int64_t d_stride, int64_t rows,
                     int64_t dim, float scale, Round round);
void ScaleAvx512(float* x, int64_t n, float scale, Round round);
void RoundBf16InPlaceAvx512(float* x, int64_t n);
void RmsNormAvx512(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride,
                   int64_t rows, int64_t dim, const RmsNormParams& p);
void RmsNormToPairsAvx512(const float* x, int64_t x_stride, const float* w, uint32_t* pairs,
                          int64_t pairs_stride, int64_t rows, int64_t dim, const RmsNormParams& p);
// rope.h's RopeNeox (`round_products`: each product rounded to bf16 too), bitwise the scalar's.
void RopeNeoxAvx512(float* x, int64_t x_stride, int64_t n_tokens, int64_t n_heads,
                    int64_t head_dim, int64_t rot_dim, const float* cos, const float* sin,
                    Round round, bool round_products);

void SiluMulAvx512(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                   float* out, int64_t out_stride, int64_t rows, int64_t dim, Round round);

// SiluMulAvx512 rounded to bf16 (Round::kBf16), written as the bf16 pairs the AVX-512 BF16
// matmul reads (matmul_impl.h: Avx512X): pair p of a row holds elements 2p (low half) and 2p + 1
// (high half; 0 past an odd dim). The very bits PrepareXAvx512 would make of SiluMul's output.
void SiluMulToPairsAvx512(const float* gate, int64_t gate_stride, const float* up,
                          int64_t up_stride, uint32_t* pairs, int64_t pairs_stride, int64_t rows,
                          int64_t dim);

// CausalConv1dSilu (conv1d.h) for kernels of 2..6 taps; false (nothing done) for others.
bool CausalConv1dSiluAvx512(const float* x, int64_t x_stride, int64_t t, int64_t channels,
                            int64_t c_begin, int64_t c_end, const float* w, int64_t kernel,
                            float* state, float* y, int64_t y_stride, Round round);

// gated_norm.h's GatedRmsNorm, L2NormHeads and SigmoidMul, bitwise the AVX2 forms' results.
void GatedRmsNormAvx512(const float* x, int64_t x_stride, const float* z, int64_t z_stride,
                        const float* w, float* y, int64_t y_stride, int64_t rows, int64_t dim,
                        float eps, Round round);
void L2NormHeadsAvx512(float* x, int64_t x_stride, int64_t rows, int64_t heads, int64_t dim,
                       float eps, float scale);
void SigmoidMulAvx512(float* x, int64_t x_stride, const float* gate, int64_t gate_stride,
                      int64_t rows, int64_t dim, Round round);

// x = gelu_tanh(x) in place (vision_ops.h GeluTanh), bitwise GeluTanhAvx2's result.
void GeluTanhAvx512(float* x, int64_t n, Round round);

// sampling_ops.h's ExpScaled, bitwise ExpScaledAvx2's results (the outputs and the sum).
float ExpScaledAvx512(const float* x, int64_t n, float shift, float scale, float* out);
// Σ exp(x[i] − shift) in f64 (LogSoftmax's sum), bitwise SumExpAvx2's.
double SumExpAvx512(const float* x, int64_t n, float shift);

// DenseAttention (dense_attention.h) with `bf16`, on AVX512_BF16.
void DenseAttentionBf16Avx512(const float* q, const float* k, const float* v, int64_t ld,
                              int64_t n, int64_t heads, int64_t d, float scale, float* out,
                              int64_t out_ld, ThreadPool& pool);
// The same on AMX tiles (dense_attention_amx.cc), where AmxChoice().on.
void DenseAttentionBf16Amx(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                           int64_t heads, int64_t d, float scale, float* out, int64_t out_ld,
                           ThreadPool& pool);

}  // namespace cpm::kernels
