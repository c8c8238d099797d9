// Attention dispatch and the scalar reference (two passes: all scores, softmax, then V).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_impl.h"
#include "kernels/cpu_features.h"

namespace cpm::kernels {
namespace {

inline void StoreKv(void* base, DType dt, int64_t idx, float v) {
  if (dt == DType::kBF16) static_cast<uint16_t*>(base)[idx] = F32ToBf16(v);
  else static_cast<float*>(base)[idx] = v;
}

// Element offsets of (token position `pos`, kv head `kvh`, dim 0) in one layer's V, and in its
// K, whose dims then follow `block_size` apart (KvLayerView; the key's slot: KeySlot).
inline int64_t VOffset(const KvLayerView& kv, const int32_t* block_table, int64_t pos,
                       int64_t kvh) {
  const int64_t block = block_table[pos / kv.block_size];
  return block * kv.BlockStride() + kvh * kv.HeadStride() + (pos % kv.block_size) * kv.head_dim;
}
inline int64_t KOffset(const KvLayerView& kv, const int32_t* block_table, int64_t pos,
                       int64_t kvh) {
  const int64_t block = block_table[pos / kv.block_size];
  return block * kv.BlockStride() + kvh * kv.HeadStride() +
         KeySlot(pos % kv.block_size, kv.block_size, kv.dtype);
}

// Attention of one query row for the `group` query heads that share KV head `kvh`.
void AttendRow(const float* q, int64_t n_keys, int64_t kvh, int64_t group, const KvLayerView& kv,
               const int32_t* block_table, float scale, float* out, std::vector<float>& scores) {
  const int64_t d = kv.head_dim;
  scores.resize(group * n_keys);
  for (int64_t p = 0; p < n_keys; ++p) {
    const int64_t off = KOffset(kv, block_table, p, kvh);
    for (int64_t g = 0; g < group; ++g) {
      const float* qh = q + g * d;
      float dot = 0.0f;
      for (int64_t j = 0; j < d; ++j) {
        dot += qh[j] * LoadKv(kv.k, kv.dtype, off + j * kv.block_size);
      }
      scores[g * n_keys + p] = dot * scale;
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores.data() + g * n_keys;
    const float mx = *std::max_element(s, s + n_keys);
    float sum = 0.0f;
    for (int64_t p = 0; p < n_keys; ++p) sum += (s[p] = std::exp(s[p] - mx));
    const float inv = 1.0f / sum;
    for (int64_t p = 0; p < n_keys; ++p) s[p] *= inv;
    std::fill(out + g * d, out + (g + 1) * d, 0.0f);
  }
  for (int64_t p = 0; p < n_keys; ++p) {
    const int64_t off = VOffset(kv, block_table, p, kvh);
    for (int64_t g = 0; g < group; ++g) {
      const float w = scores[g * n_keys + p];
      float* o = out + g * d;
      for (int64_t j = 0; j < d; ++j) o[j] += w * LoadKv(kv.v, kv.dtype, off + j);
    }
  }
}

}  // namespace

void KvWrite(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
             const int64_t* slots, int64_t n_tokens, const KvLayerView& kv) {
  const int64_t d = kv.head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t block = slots[t] / kv.block_size, offset = slots[t] % kv.block_size;
    const int64_t key_slot = KeySlot(offset, kv.block_size, kv.dtype);
    for (int64_t h = 0; h < kv.num_kv_heads; ++h) {
      const int64_t head = block * kv.BlockStride() + h * kv.HeadStride();
      for (int64_t j = 0; j < d; ++j) {
        StoreKv(kv.k, kv.dtype, head + j * kv.block_size + key_slot, k[t * k_stride + h * d + j]);
        StoreKv(kv.v, kv.dtype, head + offset * d + j, v[t * v_stride + h * d + j]);
      }
    }
  }
}

void PagedAttention(const float* q, int64_t q_stride, int64_t n_heads,
                    std::span<const AttentionSeq> seqs, const KvLayerView& kv, float scale,
                    float* out, int64_t out_stride, ThreadPool& pool) {
  const int64_t group = n_heads / kv.num_kv_heads;
  const bool simd = ActiveIsa() != Isa::kScalar && kv.head_dim % 8 == 0 &&
                    kv.head_dim <= 256 && group <= 16;
  // Tasks: every (block of query rows, kv head) pair of every sequence; the AVX2 kernel takes
  // up to kMaxAttendRows consecutive rows at once (they share each chunk's key loads and score
  // tiles).
  const int64_t rows_per_task = simd ? kMaxAttendRows : 1;
  struct RowBlock {
    size_t seq;
    int64_t first, rows;
  };
  std::vector<RowBlock> blocks;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t i = 0; i < seqs[s].q_len; i += rows_per_task) {
      blocks.push_back({s, i, std::min(rows_per_task, seqs[s].q_len - i)});
    }
  }
  const int64_t n_tasks = static_cast<int64_t>(blocks.size()) * kv.num_kv_heads;
  std::vector<std::vector<float>> scratch(simd ? 0 : pool.num_threads());
  pool.ParallelFor(n_tasks, [&](int64_t task, int worker) {
    task = n_tasks - 1 - task;  // later rows of a prefill see more keys: start them first
    const RowBlock& b = blocks[task / kv.num_kv_heads];
    const int64_t kvh = task % kv.num_kv_heads;
    const AttentionSeq& seq = seqs[b.seq];
    const int64_t t = seq.q_begin + b.first;
    const int64_t n_keys = seq.kv_len - seq.q_len + b.first + 1;  // causal: up to own position
    const float* qt = q + t * q_stride + kvh * group * kv.head_dim;
    float* ot = out + t * out_stride + kvh * group * kv.head_dim;
    if (simd) {
      AttendRowsAvx2(qt, q_stride, b.rows, n_keys, kvh, group, kv, seq.block_table, scale, ot,
                     out_stride);
    } else {
      AttendRow(qt, n_keys, kvh, group, kv, seq.block_table, scale, ot, scratch[worker]);
    }
  });
}

}  // namespace cpm::kernels
