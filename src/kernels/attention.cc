// Attention dispatch and the scalar reference (two passes: all scores, softmax, then V).
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_impl.h"
#include "kernels/attention_tiles.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul_impl.h"
#include "kernels/residual.h"

namespace cpm::kernels {
namespace {

inline void StoreKv(void* base, DType dt, int64_t idx, float v) {
  if (dt == DType::kBF16) static_cast<uint16_t*>(base)[idx] = F32ToBf16(v);
  else static_cast<float*>(base)[idx] = v;
}

// Element offset of kv head kvh's keys (or values) of pos's block in one layer's K (or V)
// (KvLayerView; the key's dims there: KeyIndex, the value's: ValueIndex).
inline int64_t HeadOffset(const KvLayerView& kv, const int32_t* block_table, int64_t pos,
                          int64_t kvh) {
  return block_table[pos / kv.block_size] * kv.BlockStride() + kvh * kv.HeadStride();
}

// Attention of one query row for the `group` query heads that share KV head `kvh`.
void AttendRow(const float* q, int64_t n_keys, int64_t kvh, int64_t group, const KvLayerView& kv,
               const int32_t* block_table, float scale, float* out, std::vector<float>& scores) {
  const int64_t d = kv.head_dim;
  scores.resize(group * (n_keys + 1));  // each head's scores, then each head's 1 / sum
  for (int64_t p = 0; p < n_keys; ++p) {
    const int64_t head = HeadOffset(kv, block_table, p, kvh), offset = p % kv.block_size;
    for (int64_t g = 0; g < group; ++g) {
      const float* qh = q + g * d;
      float dot = 0.0f;
      for (int64_t j = 0; j < d; ++j) {
        dot += qh[j] *
               LoadKv(kv.k, kv.dtype, head + KeyIndex(offset, j, kv.block_size, d, kv.dtype));
      }
      scores[g * n_keys + p] = dot * scale;
    }
  }
  // The exps e^(s − max) summed, then (a bf16 cache) rounded to bf16 as P; the outputs divided
  // by the sum after P·V.
  float* inv = scores.data() + group * n_keys;
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores.data() + g * n_keys;
    const float mx = *std::max_element(s, s + n_keys);
    float sum = 0.0f;
    for (int64_t p = 0; p < n_keys; ++p) sum += (s[p] = std::exp(s[p] - mx));
    if (kv.dtype == DType::kBF16) {
      for (int64_t p = 0; p < n_keys; ++p) s[p] = RoundBf16(s[p]);
    }
    inv[g] = 1.0f / sum;
    std::fill(out + g * d, out + (g + 1) * d, 0.0f);
  }
  for (int64_t p = 0; p < n_keys; ++p) {
    const int64_t head = HeadOffset(kv, block_table, p, kvh), offset = p % kv.block_size;
    for (int64_t g = 0; g < group; ++g) {
      const float w = scores[g * n_keys + p];
      float* o = out + g * d;
      for (int64_t j = 0; j < d; ++j) {
        o[j] += w * LoadKv(kv.v, kv.dtype,
                           head + ValueIndex(offset, j, kv.block_size, d, kv.dtype));
      }
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    for (int64_t j = 0; j < d; ++j) out[g * d + j] *= inv[g];
  }
}

// Query rows [first, first + rows) of seqs[seq], attended together; with parts > 1 their keys
// span several partitions, whose partial results start at float `partials` of the scratch.
struct RowBlock {
  size_t seq;
  int64_t first, rows, parts, partials;
  bool dot;  // bf16 dot-product scores (AttendRowsAvx2)
};

}  // namespace

namespace attn {

// Decided once per process with the matmul's AMX choice; d in whole 16-pair steps.
bool UseAmxScores(int64_t d) { return d % 32 == 0 && AmxChoice().on; }

AmxTileConfig TileConfig(int64_t rows) {
  AmxTileConfig c = TilesOf64Bytes(static_cast<int>(std::min<int64_t>(rows, 16)));
  c.rows[6] = c.rows[7] = 16;  // the column operand's 16 pairs: a chunk's keys, or key pairs
  return c;
}

void CopyValuePairs(const ValueRun* runs, int64_t n_runs, int64_t d, uint32_t* vp) {
  int64_t n = 0;
  for (int64_t c = 0; c < n_runs; ++c) {
    const int64_t pairs = (runs[c].n + 1) / 2;
    uint32_t* rows = vp + n / 2 * d;
    std::copy(runs[c].rows, runs[c].rows + pairs * d, rows);
    if (runs[c].n % 2 != 0) {
      for (int64_t j = 0; j < d; ++j) rows[(pairs - 1) * d + j] &= 0xffffu;  // no key's half
    }
    n += runs[c].n;
  }
  std::fill(vp + (n + 1) / 2 * d, vp + (n + 31) / 32 * 16 * d, 0u);
}

}  // namespace attn

void KvWrite(const float* k, int64_t k_stride, const float* v, int64_t v_stride,
             const int64_t* slots, int64_t n_tokens, const KvLayerView& kv) {
  const int64_t d = kv.head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t block = slots[t] / kv.block_size, offset = slots[t] % kv.block_size;
    for (int64_t h = 0; h < kv.num_kv_heads; ++h) {
      const int64_t head = block * kv.BlockStride() + h * kv.HeadStride();
      for (int64_t j = 0; j < d; ++j) {
        StoreKv(kv.k, kv.dtype, head + KeyIndex(offset, j, kv.block_size, d, kv.dtype),
                k[t * k_stride + h * d + j]);
        StoreKv(kv.v, kv.dtype, head + ValueIndex(offset, j, kv.block_size, d, kv.dtype),
                v[t * v_stride + h * d + j]);
      }
    }
  }
}

void PagedAttention(const float* q, int64_t q_stride, int64_t n_heads,
                    std::span<const AttentionSeq> seqs, const KvLayerView& kv, float scale,
                    float* out, int64_t out_stride, ThreadPool& pool, Round round) {
  const int64_t group = n_heads / kv.num_kv_heads, d = kv.head_dim;
  const bool simd = ActiveIsa() != Isa::kScalar && d % 8 == 0 && d <= 256 && group <= 16;
  // Tasks: every (block of query rows, kv head, partition of the block's keys) of every
  // sequence; the AVX2 kernel takes up to kMaxAttendRows consecutive rows at once (they share
  // each chunk's key loads and score tiles). A block whose keys span several partitions leaves
  // each partition's partial results in `partials`, merged once all are done.
  const int64_t rows_per_task = simd ? kMaxAttendRows : 1;
  const int64_t partial_row = group * (d + 2);  // floats: [o: group·d][m: group][l: group]
  // bf16 dot-product scores for the rows whose q are bf16 values (a bf16 model's always are), so
  // whether a row takes them depends on that row alone; a block holds rows of one kind.
  const bool dot_ok = simd && kv.dtype == DType::kBF16 && ActiveIsa() == Isa::kAvx512 &&
                      GetCpuFeatures().avx512bf16;
  int64_t n_rows = 0;
  for (const AttentionSeq& s : seqs) n_rows = std::max(n_rows, s.q_begin + s.q_len);
  std::vector<uint8_t> dot_row(n_rows);
  // A row whose query vectors hold bf16 values only: its bf16 dot products with a bf16 cache's
  // keys are exact.
  for (int64_t t = 0; dot_ok && t < n_rows; ++t) {
    dot_row[t] = HoldsBf16OnlyAvx512(q + t * q_stride, n_heads * d);
  }
  std::vector<RowBlock> blocks;
  int64_t n_partials = 0;  // floats
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t q_len = seqs[s].q_len;
    const uint8_t* dot_seq = dot_row.data() + seqs[s].q_begin;
    for (int64_t i = 0; i < q_len;) {
      const bool dot = dot_seq[i] != 0;
      int64_t rows = 1;
      while (rows < rows_per_task && i + rows < q_len && (dot_seq[i + rows] != 0) == dot) ++rows;
      const int64_t n_last = seqs[s].kv_len - q_len + i + rows;  // its last row's keys
      const int64_t parts = simd ? (n_last + kPartitionKeys - 1) / kPartitionKeys : 1;
      blocks.push_back({s, i, rows, parts, n_partials, dot});
      if (parts > 1) n_partials += parts * kv.num_kv_heads * rows * partial_row;
      i += rows;
    }
  }
  struct Task {
    int64_t block, kvh, part;
  };
  std::vector<Task> tasks;
  for (int64_t b = 0; b < static_cast<int64_t>(blocks.size()); ++b) {
    for (int64_t kvh = 0; kvh < kv.num_kv_heads; ++kvh) {
      for (int64_t p = 0; p < blocks[b].parts; ++p) tasks.push_back({b, kvh, p});
    }
  }
  // The caller's scratch, kept (only one thread calls at a time: ParallelFor is not reentrant).
  thread_local std::vector<float> scratch_partials;
  if (static_cast<int64_t>(scratch_partials.size()) < n_partials) {
    scratch_partials.resize(n_partials);
  }
  float* const partials = scratch_partials.data();  // the tasks run on other threads too
  // A block's partials for kv head kvh, partition p: [rows][partial_row].
  const auto partial_at = [&](const RowBlock& b, int64_t kvh, int64_t p) {
    return partials + b.partials + (kvh * b.parts + p) * b.rows * partial_row;
  };
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  std::vector<std::vector<float>> scratch(simd ? 0 : pool.num_threads());
  // Each thread's tasks in a contiguous share (a sequence's KV heads, a prefill's row blocks one
  // after the other), where one-by-one claims alternated them between the threads: the KV heads
  // of a block lie side by side, so the hardware prefetchers that fetch a head's lines fetch the
  // next one's too. `cpmserve bench --profile`, three alternated runs on 2 vCPUs of a Xeon with
  // AMX: decode at batch 16 (depth 0-128) 1.66-1.76 -> 1.44-1.52 ms a step, pp512 52.1-54.9 ->
  // 47.4-49.5 ms (its shares still end balanced: a thread done takes the other's last tasks).
  pool.ParallelForShares(n_tasks, [&](int64_t task, int worker) {
    // Later rows of a prefill see more keys: start them first.
    const Task& tk = tasks[n_tasks - 1 - task];
    const RowBlock& b = blocks[tk.block];
    const AttentionSeq& seq = seqs[b.seq];
    const int64_t t = seq.q_begin + b.first;
    const int64_t n_keys = seq.kv_len - seq.q_len + b.first + 1;  // causal: up to own position
    const float* qt = q + t * q_stride + tk.kvh * group * d;
    float* ot = out + t * out_stride + tk.kvh * group * d;
    if (!simd) {
      AttendRow(qt, n_keys, tk.kvh, group, kv, seq.block_table, scale, ot, scratch[worker]);
      return RoundInPlace(ot, group * d, round);
    }
    if (b.parts == 1) {
      const int64_t n_last = n_keys + b.rows - 1;
      AttendRowsAvx2(qt, q_stride, b.rows, n_keys, 0, n_last, true, b.dot, tk.kvh, group, kv,
                     seq.block_table, scale, ot, out_stride);
      for (int64_t r = 0; r < b.rows; ++r) RoundInPlace(ot + r * out_stride, group * d, round);
      return;
    }
    AttendRowsAvx2(qt, q_stride, b.rows, n_keys, tk.part * kPartitionKeys,
                   (tk.part + 1) * kPartitionKeys, false, b.dot, tk.kvh, group, kv,
                   seq.block_table, scale, partial_at(b, tk.kvh, tk.part), partial_row);
  });
  if (n_partials == 0) return;
  // One merge per (row block, kv head) with partitions: their tasks' first partitions.
  std::vector<const Task*> merges;
  for (const Task& tk : tasks) {
    if (blocks[tk.block].parts > 1 && tk.part == 0) merges.push_back(&tk);
  }
  pool.ParallelFor(static_cast<int64_t>(merges.size()), [&](int64_t i, int) {
    const Task& tk = *merges[i];
    const RowBlock& b = blocks[tk.block];
    const int64_t t = seqs[b.seq].q_begin + b.first;
    for (int64_t r = 0; r < b.rows; ++r) {
      float* o = out + (t + r) * out_stride + tk.kvh * group * d;
      MergePartitionsAvx2(partial_at(b, tk.kvh, 0) + r * partial_row, b.rows * partial_row,
                          b.parts, group, d, o);
      RoundInPlace(o, group * d, round);
    }
  });
}

}  // namespace cpm::kernels
