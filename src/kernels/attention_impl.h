// Internals of attention (kernels/ only): per-ISA kernels for query rows of one GQA group.
#pragma once

#include <cstdint>

#include "kernels/attention.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

// Element idx of a K or V array in the cache's dtype, as f32.
inline float LoadKv(const void* base, DType dt, int64_t idx) {
  if (dt == DType::kBF16) return Bf16ToF32(static_cast<const uint16_t*>(base)[idx]);
  return static_cast<const float*>(base)[idx];
}

// Element index of dim j of the key at `offset` of its block, within its head's keys of the
// block (KvLayerView). f32: [head_dim][block_size], each dim's keys in order. bf16:
// [head_dim / 2][block_size][2], each key's dims 2p and 2p + 1 side by side in row p (2p in the
// low half of a 32-bit lane, as vdpbf16ps and TDPBF16PS pair them): a chunk's 16 keys of a dim
// pair are one 64-byte line, the column operand of the dot-product scores as it is stored (AMX's
// column tile, 16 such rows, and vdpbf16ps's key vector one load each), and the f32 tiles widen
// two dims of 8 or 16 keys from one load by a shift and a mask. An odd head_dim's last dim
// (none of these models') has a row of its own with the keys in order. Against the layout
// before it (each dim's row, keys t and t + 8 of a group of 16 sharing a lane, which the dot
// products re-packed into dim pairs: ~40% of V-4.6's decode attention on AMX), kernels_bench,
// one thread, 3-6 interleaved rounds on a Xeon with AMX: decode of 16 sequences × 1024 keys
// 0.75-0.96× the time at MiniCPM4's heads and 0.5-0.7× at V-4.6's 256-dim ones, one sequence
// × 8192 keys 0.72× (V-4.6); prefill 0.92-0.96× (MiniCPM4), 0.83-0.88× (V-4.6).
inline int64_t KeyIndex(int64_t offset, int64_t j, int64_t block_size, int64_t head_dim,
                        DType dt) {
  if (dt != DType::kBF16) return j * block_size + offset;
  const int64_t row = (j >> 1) * 2 * block_size;
  if (j == head_dim - 1 && head_dim % 2 != 0) return row + offset;
  return row + 2 * offset + (j & 1);
}

// Element index of dim j of the value at `offset` of its block, within its head's values of the
// block. f32: [block_size][head_dim], each key's values in a row. bf16: [block_size / 2]
// [head_dim][2], keys 2u and 2u + 1 side by side in row u (2u in the low half of a 32-bit lane):
// P·V's key pairs as vdpbf16ps and TDPBF16PS take them, so the dot products read a chunk's values
// as they lie (vdpbf16ps) or copy its rows whole (AMX's 16-row tiles span two blocks of 16),
// where each span's values were re-paired before; the f32 tiles widen a key's dims from its pair
// row by a shift or a mask. An odd block_size's last key (none of the server's power-of-two
// sizes) has a row of its own with the dims in order.
inline int64_t ValueIndex(int64_t offset, int64_t j, int64_t block_size, int64_t head_dim,
                          DType dt) {
  if (dt != DType::kBF16 || (offset == block_size - 1 && block_size % 2 != 0)) {
    return offset * head_dim + j;
  }
  return (offset & ~int64_t{1}) * head_dim + 2 * j + (offset & 1);
}

// Elements between a head's rows of keys in a block: a dim's (f32) or a dim pair's (bf16).
inline int64_t KeyRow(int64_t block_size, DType dt) {
  return dt == DType::kBF16 ? 2 * block_size : block_size;
}

// Query rows attended together by one call of the AVX2 kernel (they share each chunk's key loads
// and score tiles; a prefill's rows come in such groups). Measured when rows shared each chunk's
// widening: perf, pp512, attention 7.0% of samples with 1, 5.9% with 2; 4 against 2,
// kernels_bench medians of 6 interleaved rounds: MiniCPM4 heads +0.5% at 512 rows over 512 keys,
// +5% at 256 over 2048; V-4.6's 256-dim heads +22% at 256 over 2048. 8 against 4, once the
// rows shared each span's widened values (AttendRows): +4-8% at 512 over 512 keys, +5% at 256
// over 2048, V-4.6 +1-5% (kernels_bench, two threads, two interleaved rounds).
constexpr int64_t kMaxAttendRows = 8;

// Keys per partition of a long context. A query row attends its keys partition by partition (at
// multiples of kPartitionKeys, each from a fresh softmax state); the partitions' partial results
// are then merged in order (MergePartitionsAvx2). Each partition is a task of its own,
// so a decode over a long context is spread over the threads, where one task per (sequence, KV
// head) gave a batch-1 decode two tasks for these models whatever the thread count (measured on
// two threads with one KV head, so one task before: 8192 keys 1.5×). Partitions sit at fixed
// positions, so a row's result still does not depend on its batch. A multiple of the AVX2
// kernel's softmax span; contexts of up to 1024 keys are a single partition, with no merge.
constexpr int64_t kPartitionKeys = 1024;

// For r in [0, rows): out_r[g, :] = softmax(scale · q_r[g] · K[0:n_keys0 + r]ᵀ) · V[0:n_keys0 + r]
// for the `group` query heads g that share KV head `kvh` (consecutive causal rows of one
// sequence); q_r = q + r·q_stride and out_r = out + r·out_stride hold [group, head_dim]
// contiguously. head_dim % 8 == 0, rows ≤ kMaxAttendRows. Each row's result is bitwise what it
// would be alone (rows = 1).
// Only the keys in [key_begin, key_end) (a partition: multiples of kPartitionKeys, or 0 and
// past the last key): with `finish`, out_r is the result as above; without, the partition's
// partial result: out_r = [o: group·head_dim][m: group][l: group], each head's output before
// the division by its softmax sum l, with m the scores' max (a row with no keys there: o = 0,
// m = -inf, l = 0).
// With `dot` (a bf16 cache, AVX512_BF16, and rows whose q hold bf16 values only) the scores of
// whole chunks are bf16 dot products (attention_tiles.h: ScoreTilesDotAvx512, or on AMX tiles
// ScoreTilesAmx where the CPU has AMX and d % 32 == 0).
// A row's output for its `group` heads from the partial results of its n partitions
// (AttendRowsAvx2: [o: group·d][m: group][l: group], `stride` floats apart), in order: with
// m = max m_j and w_j = e^(m_j − m), out = Σ o_j·w_j · (1 / Σ l_j·w_j). Partitions without keys
// of the row (l = 0) are skipped, so a row whose keys lie in one gets exactly o · (1 / l), as
// when its kernel call finishes it: its bits do not depend on the partitions of its row block.
// d % 8 == 0.
void MergePartitionsAvx2(const float* parts, int64_t stride, int64_t n, int64_t group, int64_t d,
                         float* out);

// Whether x[0, n) holds bf16 values only (the low 16 bits of every f32 zero), on 16 lanes: which
// query rows take bf16 dot products (a row at a time over all its heads, on the caller before
// the tasks, the worker waiting meanwhile). The scalar loop was ~2.5% of decode attention's
// samples over 16 × 1024 keys and ~9% of a 512-row prefill's attention over 512 keys.
bool HoldsBf16OnlyAvx512(const float* x, int64_t n);

void AttendRowsAvx2(const float* q, int64_t q_stride, int64_t rows, int64_t n_keys0,
                    int64_t key_begin, int64_t key_end, bool finish, bool dot, int64_t kvh,
                    int64_t group, const KvLayerView& kv, const int32_t* block_table, float scale,
                    float* out, int64_t out_stride);

}  // namespace cpm::kernels
