// Internals shared by the attention kernels' ISA variants (attention_avx2.cc drives the spans;
// attention_avx512.cc has 16-lane score and value tiles that compute the AVX2 tiles' chains).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/amx.h"
#include "kernels/attention_impl.h"
#include "kernels/prefetch.h"

namespace cpm::kernels::attn {

constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxGroup = 16;
constexpr int64_t kChunk = 16;  // keys per score tile: ≤ one block's group of 16 slots
constexpr int64_t kSpan = 128;  // keys per softmax update; spans start at multiples of it
static_assert(kPartitionKeys % kSpan == 0, "partitions start at a span");
// Chunks ahead whose keys a chunk's first score tile prefetches (kernels_bench decode, one
// thread: 1 → 2 +5-10%; 4 and 8 no better).
constexpr int64_t kKeysAhead = 2;
// Chunks per dot-product score tile at most (ScoreTilesDotAvx512).
constexpr int64_t kMaxTileChunks = 4;

// A piece of a span inside one group of 16 slots of a block (slots [16i, 16i + 16)): the
// element offset of its head's keys and values in the block (KeyIndex and ValueIndex from
// there), the slot of its first key, the element offset of its first value (a bf16 cache with
// an even slot: its first pair row), its keys (≤ 16), and whether it is a whole group,
// whose keys the tiles read 16 at a time (not a block's shorter last group, nor part of a
// group, as where a span starts inside one when the block size is not a multiple of 16).
struct Chunk {
  int64_t head, in_block, v, n;
  bool whole;
};

// Where a chunk's keys begin in K (elements): its first row, the next rows KeyRow apart.
inline int64_t ChunkKeysAt(const Chunk& c, const KvLayerView& kv) {
  return c.head + KeyIndex(c.in_block, 0, kv.block_size, kv.head_dim, kv.dtype);
}

// Where a bf16 cache's value of one key lies (ValueIndex): the low or high half of each dim's
// pair in its pair row, or an odd block's last key's own row.
enum class ValueHalf { kLow, kHigh, kOwnRow };
template <ValueHalf kHalf>
using ValueHalfC = std::integral_constant<ValueHalf, kHalf>;

// f(row, half) for the n values from slot in_block of a bf16 cache's block (its head's values at
// head), in key order: row is the key's pair row (dim j's pair at row + 2j) or its own row (dim
// j at row + j), half a ValueHalfC, so that the f32 tiles widen each key's dims by a shift, a
// mask or a plain widening known at compile time; a pair's two keys read the same row in turn.
template <typename F>
[[gnu::always_inline]] inline void ForChunkValues(const uint16_t* head, int64_t in_block,
                                                  int64_t n, int64_t bs, int64_t d, F&& f) {
  int64_t slot = in_block;
  const int64_t end = in_block + n;
  if (slot < end && slot % 2 != 0) {
    f(head + (slot - 1) * d, ValueHalfC<ValueHalf::kHigh>{});
    ++slot;
  }
  for (; slot + 2 <= end; slot += 2) {
    f(head + slot * d, ValueHalfC<ValueHalf::kLow>{});
    f(head + slot * d, ValueHalfC<ValueHalf::kHigh>{});
  }
  if (slot < end) {
    if (bs % 2 != 0 && slot == bs - 1) f(head + slot * d, ValueHalfC<ValueHalf::kOwnRow>{});
    else f(head + slot * d, ValueHalfC<ValueHalf::kLow>{});
  }
}

// A chunk's values for the P·V dot products (a bf16 cache, an even block size): its pair rows
// (ValueIndex: key pair u's dims at rows + u·d, each a bf16 pair of the two keys' values) and
// its keys. A run of an odd count has its last pair's high halves (no key's slot, maybe never
// written, or an earlier sequence's) read as zeros, as 0 · NaN would not vanish.
struct ValueRun {
  const uint32_t* rows;
  int64_t n;
};

// What a chunk's first score tile prefetches, one line request per dim, spread over the tile's
// loop rather than in a burst, which stalled on the core's outstanding-miss buffers (perf: ~8%
// of decode attention's samples at 16 sequences × 1024 keys sat on a burst's loop): dim j's
// keys of the chunk kKeysAhead on, and a d-th of this chunk's values, which the span's value
// tiles read after its scores. The KV blocks are scattered, so the hardware prefetchers do not
// guess them: with no prefetch, 16 sequences × 8192 keys (64 MiB, past L3) ran at 0.6×.
// Into L1 (prefetcht0), not L2: kernels_bench decode, 2 threads, 4 interleaved rounds on a
// Zen 5: 1.02-1.09× at MiniCPM4's heads, 1.07× and 1.3× at V-4.6's 256-dim ones (the dot-product
// tiles; the AVX2 ones 0.97-1.09×), prefill rows level or better.
struct Prefetch {
  const char* k;   // the first row of keys of the chunk kKeysAhead on
  int64_t k_row;   // bytes between its rows
  bool k_pairs;    // a bf16 cache: a row per dim pair (KeyIndex), else a row per dim
  const char* v;   // this chunk's first value (its n·d values are contiguous in either layout)
  int64_t v_step;  // n·element bytes: over the d dims, all n·d values
};

// The requests of a tile's step over dims j and j + 1 (j even): their row or rows of the keys
// ahead, and those dims' share of this chunk's values (a line of a bf16 chunk's).
[[gnu::always_inline]] inline void RequestDims(const Prefetch& pf, int64_t j) {
  if (pf.k_pairs) {
    PrefetchL1(pf.k + j / 2 * pf.k_row);
    PrefetchL1(pf.v + j * pf.v_step);
    return;
  }
  PrefetchL1(pf.k + j * pf.k_row);
  PrefetchL1(pf.k + (j + 1) * pf.k_row);
  PrefetchL1(pf.v + j * pf.v_step);
  PrefetchL1(pf.v + (j + 1) * pf.v_step);
}

// The online-softmax state of one query row of a GQA group: each head's running max m and
// sum l, and the span's scores s (then probabilities); the running output accumulates in `out`
// (the row's output itself, or AMX's scratch of a call's rows: SpanValuesAmx). s has a chunk's
// room past the span: a chunk's tile writes 16 scores whatever its n.
struct RowState {
  float* out;  // [group][d]
  int64_t n_keys;
  bool fresh;  // no span's values in out yet: out is BeginRow's zeros (SpanValuesAmx)
  alignas(32) float m[kMaxGroup], l[kMaxGroup], alpha[kMaxGroup];
  alignas(32) float s[kMaxGroup][kSpan + kChunk];
  // Rows of dot products: the span's P as bf16 pairs (SpanSoftmaxDotAvx512), keys 2u and 2u + 1
  // in pair u (the lower key in the low half); [group] rows of the caller's buffer, a call's
  // rows one after another, so that AMX's P tiles take heads of several rows.
  uint32_t (*p_pairs)[kSpan / 2];
};

// f(std::integral_constant<int, H>{}, h0) over a GQA group's heads [0, group) in tiles of H = 4
// heads, then 2 and 1 for what is left: the head counts both ISAs' value tiles are built for.
template <typename F>
inline void ForHeadTiles(int64_t group, F&& f) {
  int64_t h0 = 0;
  for (; h0 + 4 <= group; h0 += 4) f(std::integral_constant<int, 4>{}, h0);
  for (; h0 + 2 <= group; h0 += 2) f(std::integral_constant<int, 2>{}, h0);
  for (; h0 < group; ++h0) f(std::integral_constant<int, 1>{}, h0);
}

// AVX-512 tiles (attention_avx512.cc), used at the AVX-512 level. Each computes the AVX2 tiles'
// chains on 16 lanes: one FMA chain per score over the dims in order, one per output element over
// the span's keys in order, so the results are bitwise the AVX2 kernel's (tested).
//
// s_i[0..16) = scale · q_i · k_t for the nq query vectors at qt (dim j of vector i at
// qt[j·q_stride + i]); a whole chunk's 16 keys in rows `row` elements apart from keys: f32,
// dim j's in row j, or bf16, dims 2p and 2p + 1 of each key side by side in row p (KeyIndex);
// the first tile prefetches pf.
void ScoreTilesAvx512(const float* qt, int64_t q_stride, float* const* s, int64_t nq, int64_t d,
                      const void* keys, int64_t row, bool bf16, float scale, const Prefetch& pf);
// The same scores by bf16 dot products (AVX512_BF16), for query vectors that hold bf16 values (as a
// bf16 model's q after RoPE): s_i[16c, 16c + 16) for the n_chunks (1, 2 or 4) whole bf16 chunks at
// keys[c] (dim pair p's 16 keys at + p·row elements: KeyIndex), from the dim pairs of vector i at
// qp[i·kQpStride + p] (dims 2p, 2p + 1 as one bf16 pair, the lower dim in the low half: each
// vector's pairs contiguous, so they are packed with vector stores). The products are exact, so a
// score differs from the f32 tiles' only by the order of its f32 sums (one chain per score over the
// dim pairs in order: still a row's alone). Each key vector feeds every query vector of a tile, and
// a tile of two chunks halves the query broadcasts per product, which bound the f32 tiles (Zen 5
// issues one broadcast a cycle); four chunks give ≤ 4 query vectors (a decode row of 4 heads per KV
// head) 16 chains. pf[c] per chunk.
constexpr int64_t kQpStride = kMaxHeadDim / 2;
void ScoreTilesDotAvx512(const uint32_t* qp, float* const* s, int64_t nq,
                         int64_t d, const uint16_t* const* keys, int64_t n_chunks, int64_t row,
                         float scale, const Prefetch* pf);
// The same scores as ScoreTilesDotAvx512 on AMX tiles (attention_amx.cc), where AmxChoice().on
// and d % 32 == 0 (UseAmxScores): every whole chunk of every row with dot-product scores takes
// them, so a row's bits still do not depend on its batch. Each score one TDPBF16PS chain over
// the dim pairs in steps of 16, then times scale. A chunk's column tile is 16 of its pair rows,
// loaded from the cache as they lie.
// The caller loads TileConfig(v) (UseTileConfig) before its calls, v at least the most
// vectors a call passes (AttendRows asks once a span; a load only where the shapes changed). A
// tile's rows change no score's bits.
bool UseAmxScores(int64_t d);
// Both products' tile shapes: sums and the row operand (query vectors, or P's heads) min(rows,
// 16) rows of 64 bytes (tiles 0-5), the column operand 16 pairs (tiles 6 and 7).
AmxTileConfig TileConfig(int64_t rows);
void ScoreTilesAmx(const uint32_t* qp, float* const* s, int64_t nq, int64_t d,
                   const uint16_t* const* keys, int64_t n_chunks, int64_t row, float scale,
                   const Prefetch* pf);
// P·V on AMX tiles for the rows that take AMX scores (d % 32 == 0), every row of a call that
// sees keys of the span [p0, p1) (row r its n = min(p1, n_keys) − p0 > 0): o_h = o_h · alpha_h
// (on a row's first span, `fresh`, the sums start from zeroed tiles instead, the same +0s), then
// Σ_u P_h[u] · V[u] in steps of 16 key pairs, one TDPBF16PS chain per output element over the
// row's ⌈n / 32⌉ steps in order, P's pairs read as they are in p_pairs (a tile row per head) and
// the values' pairs from vp (CopyValuePairs: 16 pair rows of 16 dims a tile). A step takes 32
// keys whatever n: p_pairs is 0 past n up to the next 32 (SpanSoftmaxDotAvx512), and so are the
// value pairs. The rows' p_pairs and outputs lie one after another (row r's at row 0's + r ·
// group rows), so that the heads of rows with as many steps share tiles: a row's chains are the
// same whichever tile row holds them. Loads its tiles' shapes (UseTileConfig): for a run of ≤ 16
// heads TileConfig(heads), a decode row's score tiles too.
void SpanValuesAmx(RowState* st, int64_t rows, int64_t group, int64_t d, const uint32_t* vp,
                   int64_t p0, int64_t p1);
// The span's runs of value pairs (n keys in all; every run's count even but the last's)
// copied into vp, d pairs a row, an odd count's last high halves and the rows past it up to
// the next 32 keys zero: SpanValuesAmx's operand. A copy, not the cache's rows as they lie: a
// block of 16 slots holds 8 pair rows, half a column tile, and 8-row tiles straight from the
// cache (twice the TDPBF16PS, of half the depth) took 1.07-1.2× the time of the packing before
// this layout at decode, where the copy takes 0.79-0.92× (kernels_bench, one thread, medians of
// 5-7 interleaved rounds on a Xeon with AMX); prefill level either way.
void CopyValuePairs(const ValueRun* runs, int64_t n_runs, int64_t d, uint32_t* vp);
// The span's online-softmax update (attention_avx2.cc: SpanSoftmax) with e^x on 16 lanes:
// bitwise the AVX2 update (the same polynomial; each head's sum adds the 8-lane halves in the
// AVX2 kernel's order).
void SpanSoftmaxAvx512(RowState* r, int64_t group, int64_t n, bool round_p);
// The same update for the rows of bf16 dot products (a bf16 cache): P, the exps rounded to bf16
// (vcvtne2ps2bf16, round to nearest even), goes to p_pairs as the pairs of the P·V dot products,
// and each head's sum adds 16 lanes at a time. The rows of dot products sum their scores in
// another order than the AVX2 kernel anyway; this saves the AVX2 order's extra adds, a rounding
// pass and a packing pass (perf: the update was ~15% of a 512-token prefill at depth 4096).
void SpanSoftmaxDotAvx512(RowState* r, int64_t group, int64_t n);
// The row's outputs over its n keys of the span (SpanValues), d % 16 == 0; a bf16 cache's values
// in blocks of block_size (ValueIndex).
void SpanValuesAvx512(RowState& r, int64_t group, int64_t d, const void* v, bool bf16,
                      int64_t block_size, const Chunk* chunks, int64_t n);

// P·V by bf16 dot products (AVX512_BF16), for the rows that take dot-product scores over a cache
// of an even block size: the span's exps, rounded to bf16 by the softmax update (with a bf16
// cache, at every ISA: attention.h) and left as pairs in p_pairs, are exact bf16 operands, and
// the values' pairs are read from the cache as they lie (runs: the span's chunks in order, each
// of an even count but maybe the last). Twice the products per instruction of the f32 tiles,
// which ran at the f32 FMA peak (kernels_bench, two threads, 5 interleaved rounds: prefill 512
// over 512 keys +11%, 256 over 2048 +22%, V-4.6's heads +30%; decode +4-13%). One chain per
// output element over the key pairs in order. Any d % 8.
void SpanValuesDotAvx512(RowState& r, int64_t group, int64_t d, const ValueRun* runs, int64_t n);

}  // namespace cpm::kernels::attn
