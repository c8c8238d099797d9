// Causal attention over a paged KV cache, for prefill chunks and decode alike, GQA-aware:
// the query heads of one KV head are processed together so each key/value is read once per group.
#pragma once

#include <cstdint>
#include <span>

#include "base/thread_pool.h"
#include "kernels/rounding.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

// One attention layer's paged cache in `dtype` (f32 or bf16): V [num_blocks, num_kv_heads,
// block_size, head_dim] and K [num_blocks, num_kv_heads, head_dim, block_size], each block's keys
// stored transposed (one dim of a block's keys is contiguous: the AVX2 kernel's scores need keys
// as columns, and transposing them at every read cost as much as the scores at decode); bf16
// keys as [head_dim / 2, block_size, 2], dims paired per key, the operand of the dot-product
// scores (attention_impl.h: KeyIndex), and bf16 values as [block_size / 2, head_dim, 2], keys
// paired per dim, the operand of P·V's (ValueIndex). One head's keys or values of a block are
// contiguous either way.
struct KvLayerView {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kF32;
  int64_t block_size = 16;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;

  int64_t HeadStride() const { return block_size * head_dim; }
  int64_t BlockStride() const { return num_kv_heads * block_size * head_dim; }
};

// One sequence's share of the flat batch.
struct AttentionSeq {
  int64_t q_begin = 0;  // first row of this sequence in q / out
  int64_t q_len = 0;    // new tokens this step; they sit at positions [kv_len - q_len, kv_len)
  int64_t kv_len = 0;   // tokens in the cache after this step, new ones included
  const int32_t* block_table = nullptr;  // [ceil(kv_len / block_size)] physical block ids
};

// Writes the new tokens' keys and values into their cache slots (slot = block·block_size + offset).
// k: [n_tokens, num_kv_heads, head_dim] with token stride k_stride; same for v.
void KvWrite(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
             const int64_t* slots, int64_t n_tokens, const KvLayerView& kv);

// out[t, h, :] = softmax(scale · q[t, h] · K[:pos]ᵀ) · V[:pos] for query head h, using KV head
// h / (n_heads / num_kv_heads). q: [T, n_heads, head_dim] (token stride q_stride), out likewise.
// Softmax in f32. With a bf16 cache (a bf16 model) P is rounded to bf16 before P·V, as
// FlashAttention-2 (vLLM) and PyTorch's CPU SDPA (the transformers default) do: the exps
// e^(s − m) against an online softmax's running max (a SIMD kernel's spans of 128 keys; the
// scalar one's whole row), while their sum stays f32. `round`: the outputs rounded as it says
// (a bf16 model's attention output, bf16), by each task as its rows are done.
void PagedAttention(const float* q, int64_t q_stride, int64_t n_heads,
                    std::span<const AttentionSeq> seqs, const KvLayerView& kv, float scale,
                    float* out, int64_t out_stride, ThreadPool& pool,
                    Round round = Round::kNone);

}  // namespace cpm::kernels
