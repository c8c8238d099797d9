// Bidirectional multi-head attention over one sequence held in plain rows (no KV cache, no mask):
// a vision tower's self-attention, where every token of a slice sees every other.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace cpm::kernels {

// For every head h and token t, with s_j = q_t,h · k_j,h over the n tokens j and m = max_j s_j:
//   p_j = e^((s_j − m) · scale),  out[t, h·d : (h+1)·d] = (Σ_j P_j · v_j,h) / Σ_j p_j,
// where P_j = p_j rounded to bf16 when `bf16` (a bf16 tower: PyTorch's CPU flash attention, the
// transformers default, and FlashAttention-2 round the probabilities before P·V; the sum stays
// f32), else P_j = p_j; with `bf16` out is rounded to bf16 too (a bf16 attention's output).
// q, k, v: [n, heads·d], rows `ld` floats apart; out: [n, heads·d], rows `out_ld` apart. With
// `bf16`, q, k and v must hold bf16 values (a bf16 tower's projections are rounded to bf16),
// which the AVX-512 BF16 kernel reads as bf16 pairs. d even.
// One fused pass per 32 query rows of a head: scores, an exact softmax over all n keys and P·V,
// nothing of n × n size leaving the core's caches; with `bf16` on AMX tiles where AmxChoice()
// is on (a Xeon with AMX-BF16, unless CPM_AMX=0), else on bf16 dot products on AVX512_BF16 (the
// AVX-512 level); on f32 FMAs elsewhere from AVX2 up (an f32 tower, a CPU without
// AVX512_BF16); the scalar reference at the scalar level.
void DenseAttention(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                    int64_t heads, int64_t d, float scale, bool bf16, float* out, int64_t out_ld,
                    ThreadPool& pool);

// The scalar reference of DenseAttention, one row and head at a time (sums in key order).
// Single-threaded.
void DenseAttentionReference(const float* q, const float* k, const float* v, int64_t ld,
                             int64_t n, int64_t heads, int64_t d, float scale, bool bf16,
                             float* out, int64_t out_ld);

}  // namespace cpm::kernels
