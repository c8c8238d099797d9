// AVX2 attention for query rows of a GQA group: walks the sequence's KV blocks once, in spans of
// 128 keys, each in chunks of ≤ 16 keys (one block's group of 16 slots). Per span: the scores of
// every chunk (the cache keeps each block's keys transposed, so a head's 16 scores come out of
// plain FMAs with no horizontal sums, each key vector shared by up to 6 query vectors, the heads
// of one or more rows; bf16 keys widened in registers, or once into an f32 copy for the rows of
// a prefill), then per row one online-softmax update over the span (running max m, sum l) and
// its values: output tiles of 4 heads × 24 dims over all the span's values, read from the cache
// and widened in registers for one row (a decode), from one f32 copy of the span's values for
// the rows of a prefill. With a softmax update per chunk of 16 keys instead, its fixed cost
// and the short output chains dominated decode: kernels_bench, one thread, medians of 10
// interleaved rounds against that: decode 16 sequences × 1024 keys 1.44×, V-4.6 heads 1.56×,
// prefill 512 rows 1.19×, 256 over 2048 keys 1.30× (with output tiles of 4 × 16 dims).
// Compiled with -mavx2 -mfma -mf16c. At the AVX-512 level the score and value tiles and the
// softmax update are attention_avx512.cc's 16-lane ones, which give the same bits; there, rows
// of bf16 queries over a bf16 cache on AVX512_BF16 take the scores of whole chunks and P·V from
// bf16 dot products (the same exact products, summed in another order: attention_tiles.h). With
// a bf16 cache, P is rounded to bf16 at every ISA (attention.h).
//
// A row's result depends only on its query and its keys (spans and chunks start at the same
// positions whatever the batch), so attention stays batch invariant.
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <type_traits>

#include "kernels/attention_tiles.h"
#include "kernels/cpu_features.h"
#include "kernels/simd_avx2.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

using attn::Chunk;
using attn::ForChunkValues;
using attn::ChunkKeysAt;
using attn::ForHeadTiles;
using attn::kChunk;
using attn::kKeysAhead;
using attn::kMaxTileChunks;
using attn::kMaxGroup;
using attn::kMaxHeadDim;
using attn::kSpan;
using attn::Prefetch;
using attn::RowState;

// Dims [j, j + 8) of a bf16 cache's value as f32 (ForChunkValues): the key's halves of a pair
// row's 16 words, by a shift (the low halves) or a mask, or its own row's 8 words widened.
template <attn::ValueHalf kHalf>
inline __m256 WidenValue8(const uint16_t* row, int64_t j) {
  if constexpr (kHalf == attn::ValueHalf::kOwnRow) return avx2::LoadBf16(row + j);
  const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * j));
  if constexpr (kHalf == attn::ValueHalf::kLow) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
  return _mm256_castsi256_ps(_mm256_and_si256(w, _mm256_set1_epi32(-65536)));
}

// Dim j's 16 keys (0-7 in k0, 8-15 in k1) of a whole chunk whose rows are `row` elements apart
// at p: bf16, two 32-byte loads of dim pair j / 2's row (KeyIndex), each key's dim j widened by
// a shift (j even: the low halves) or a mask; f32, row j in order. (Both dims of a load at once
// would need four key vectors beside a 6-vector tile's 12 sums: more than 16 registers.)
template <bool kBf16, bool kOdd>
inline void LoadKeys16(const void* p, int64_t row, int64_t j, __m256* k0, __m256* k1) {
  if constexpr (kBf16) {
    const uint16_t* r = static_cast<const uint16_t*>(p) + (j >> 1) * row;
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(r + 16));
    if constexpr (kOdd) {
      const __m256i high = _mm256_set1_epi32(-65536);
      *k0 = _mm256_castsi256_ps(_mm256_and_si256(a, high));
      *k1 = _mm256_castsi256_ps(_mm256_and_si256(b, high));
    } else {
      *k0 = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
      *k1 = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
    }
  } else {
    const float* f = static_cast<const float*>(p) + j * row;
    *k0 = _mm256_loadu_ps(f);
    *k1 = _mm256_loadu_ps(f + 8);
  }
}

// Where the score tiles read a whole chunk's keys: rows `row` elements apart from p, bf16 dim pairs
// (KeyIndex) or f32 dims (the tiles' kBf16Keys says which). Straight from the cache for a decode
// row (≤ kMaxDirectVectors query vectors): its heads widen bf16 keys in registers once per score
// tile of ≤ 6 query vectors instead of through a copy, a store and a reload per key vector. The
// copy (f32, row 16) serves the rows of a prefill (up to 64 query vectors, 11 tiles: widening in
// every tile cost more than once) and a block's shorter last group.
struct ChunkKeys {
  const void* p;
  int64_t row;
};
constexpr int64_t kMaxDirectVectors = 8;

// The chunk's n keys as f32 into kt[j][t] (past n: whatever the slots hold, or zeros).
template <bool kBf16>
void CopyKeys(const KvLayerView& kv, const Chunk& c, float (*kt)[kChunk]) {
  constexpr int64_t kSize = kBf16 ? 2 : 4;
  const int64_t d = kv.head_dim, bs = kv.block_size;
  if (c.whole) {
    const char* base = static_cast<const char*>(kv.k) + ChunkKeysAt(c, kv) * kSize;
    const int64_t row = KeyRow(bs, kv.dtype);
    for (int64_t j = 0; j < d; j += 2) {
      LoadKeys16<kBf16, false>(base, row, j, reinterpret_cast<__m256*>(&kt[j][0]),
                               reinterpret_cast<__m256*>(&kt[j][8]));
      LoadKeys16<kBf16, true>(base, row, j + 1, reinterpret_cast<__m256*>(&kt[j + 1][0]),
                              reinterpret_cast<__m256*>(&kt[j + 1][8]));
    }
    return;
  }
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t t = 0; t < kChunk; ++t) {
      const int64_t at = c.head + KeyIndex(c.in_block + t, j, bs, d, kv.dtype);
      kt[j][t] = t < c.n ? LoadKv(kv.k, kv.dtype, at) : 0.0f;
    }
  }
}

// s_i[0..16) = scale · q_i · k_t for H query vectors (any rows' heads of this KV head), dim j of
// vector i at qt[j·q_stride + i]: each key vector feeds all H, whose broadcasts for one dim are
// adjacent floats behind one pointer. One FMA chain per score over the dims in order, whatever
// the tile. Keys past the chunk's n may be any bits (slots not yet written): their scores are
// never used. Out of line, as ValueTile.
template <int H, bool kBf16Keys, bool kPrefetch>
[[gnu::noinline]] void ScoreTile(const float* qt, int64_t q_stride, float* const* s, int64_t d,
                                 const ChunkKeys& keys, float scale, const Prefetch& pf) {
  __m256 acc[H][2];
#pragma GCC unroll 6
  for (int h = 0; h < H; ++h) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
  // Dim j (odd or even: which half of a bf16 pair) into every score's chain.
  const auto dim = [&](auto odd, int64_t j) {
    __m256 k0, k1;
    LoadKeys16<kBf16Keys, odd()>(keys.p, keys.row, j, &k0, &k1);
    const float* qj = qt + j * q_stride;
#pragma GCC unroll 6
    for (int h = 0; h < H; ++h) {
      const __m256 b = _mm256_broadcast_ss(qj + h);
      acc[h][0] = _mm256_fmadd_ps(b, k0, acc[h][0]);
      acc[h][1] = _mm256_fmadd_ps(b, k1, acc[h][1]);
    }
  };
  for (int64_t j = 0; j < d; j += 2) {
    if constexpr (kPrefetch) attn::RequestDims(pf, j);
    dim(std::false_type{}, j);
    dim(std::true_type{}, j + 1);
  }
  const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 6
  for (int h = 0; h < H; ++h) {
    _mm256_storeu_ps(s[h], _mm256_mul_ps(acc[h][0], sc));
    _mm256_storeu_ps(s[h] + 8, _mm256_mul_ps(acc[h][1], sc));
  }
}

// Score tiles over a flat list of query vectors: 6 at a time (12 accumulator chains: more than
// FMA latency × ports) while what is left is not 7-9 (then 4s: 8 = 4 + 4, not 6 + 2, whose 4
// chains would wait on FMA latency), then 4, 2, 1. The first tile also prefetches.
template <bool kBf16Keys>
void ScoreTiles(const float* qt, int64_t q_stride, float* const* s, int64_t nq, int64_t d,
                const ChunkKeys& keys, float scale, const Prefetch& pf) {
  int64_t i = 0;
  auto tile = [&](auto h) {
    if (i == 0) ScoreTile<h(), kBf16Keys, true>(qt, q_stride, s, d, keys, scale, pf);
    else ScoreTile<h(), kBf16Keys, false>(qt + i, q_stride, s + i, d, keys, scale, pf);
    i += h();
  };
  while (nq - i == 6 || nq - i >= 10) tile(std::integral_constant<int, 6>{});
  while (i + 4 <= nq) tile(std::integral_constant<int, 4>{});
  while (i + 2 <= nq) tile(std::integral_constant<int, 2>{});
  while (i < nq) tile(std::integral_constant<int, 1>{});
}

void BeginRow(RowState* r, float* out, int64_t n_keys, int64_t group, int64_t d) {
  r->out = out;
  r->n_keys = n_keys;
  r->fresh = true;
  // Every slot set, as the softmax's rescale factors are computed 8 heads at a time.
  std::fill(r->m, r->m + kMaxGroup, -INFINITY);
  std::fill(r->l, r->l + kMaxGroup, 0.0f);
  std::fill(out, out + group * d, 0.0f);
}

// Online-softmax update with a span's n scores of each head: the new running max m, the factor
// alpha = e^(m_old - m_new) that rescales the head's running output and sum (0 on its first
// span, where m_old = -inf), exp(s - m_new) left in s, and the sum l. With round_p (a bf16
// cache) the exps left in s, the P of P·V, are rounded to bf16 after their sum (attention.h).
void SpanSoftmax(RowState* r, int64_t group, int64_t n, bool round_p) {
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  const __m256 tail = _mm256_castsi256_ps(avx2::FirstLanes(n % 8 == 0 ? 8 : n % 8));
  const int64_t last = (n - 1) / 8 * 8;  // the last (possibly partial) vector of scores
  alignas(32) float m_span[kMaxGroup];
  std::fill(m_span, m_span + kMaxGroup, -INFINITY);
  for (int64_t g = 0; g < group; ++g) {
    __m256 mx = _mm256_blendv_ps(neg_inf, _mm256_load_ps(r->s[g] + last), tail);
    for (int64_t t = 0; t < last; t += 8) mx = _mm256_max_ps(mx, _mm256_load_ps(r->s[g] + t));
    m_span[g] = avx2::HMax(mx);
  }
  for (int64_t g = 0; g < group; g += 8) {
    const __m256 m_old = _mm256_load_ps(r->m + g);
    const __m256 m_new = _mm256_max_ps(m_old, _mm256_load_ps(m_span + g));
    _mm256_store_ps(r->alpha + g, avx2::Exp(_mm256_sub_ps(m_old, m_new)));
    _mm256_store_ps(r->m + g, m_new);
  }
  for (int64_t g = 0; g < group; ++g) {
    const __m256 m = _mm256_set1_ps(r->m[g]);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t t = 0; t <= last; t += 8) {
      __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_load_ps(r->s[g] + t), m));
      if (t == last) e = _mm256_and_ps(e, tail);
      _mm256_store_ps(r->s[g] + t, round_p ? avx2::RoundBf16(e) : e);
      sum = _mm256_add_ps(sum, e);
    }
    r->l[g] = r->l[g] * r->alpha[g] + avx2::HSum(sum);
  }
}

// o_h[j0, j0 + 8·S) = o_h · alpha_h + Σ_t p_h[t] · v_t[j0, j0 + 8·S) for the H heads from h0 of
// one row, over its n keys of the span (the chunks' values read from the cache, bf16 widened in
// registers): each value vector feeds all H heads, and each output element is one chain of up to
// a span's keys in order (with chunks of 16 the chains were short, restarted from memory every
// chunk, and the tiles waited on FMA latency). Out of line: inlined into the span loop (GCC
// does), the tiles ran 1.15-1.65× slower at every kernels_bench shape (one thread, 8
// interleaved rounds); the score tiles out of line too gained prefill a further 5-20%.
template <int H, int S, bool kBf16>
[[gnu::noinline]] void ValueTile(RowState& r, int64_t h0, int64_t j0, int64_t d, const void* v,
                                 int64_t bs, const Chunk* chunks, int64_t n) {
  __m256 acc[H][S];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
    const __m256 a = _mm256_set1_ps(r.alpha[h0 + h]);
#pragma GCC unroll 3
    for (int i = 0; i < S; ++i) {
      acc[h][i] = _mm256_mul_ps(_mm256_loadu_ps(r.out + (h0 + h) * d + j0 + 8 * i), a);
    }
  }
  int64_t o = 0;  // the span's key
  const auto key = [&](const __m256 (&vv)[S]) {
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m256 p = _mm256_broadcast_ss(&r.s[h0 + h][o]);
#pragma GCC unroll 3
      for (int i = 0; i < S; ++i) acc[h][i] = _mm256_fmadd_ps(p, vv[i], acc[h][i]);
    }
    ++o;
  };
  for (; o < n; ++chunks) {
    const int64_t nc = std::min(chunks->n, n - o);
    if constexpr (kBf16) {
      const uint16_t* head = static_cast<const uint16_t*>(v) + chunks->head;
      ForChunkValues(head, chunks->in_block, nc, bs, d, [&](const uint16_t* row, auto half) {
        __m256 vv[S];
#pragma GCC unroll 3
        for (int i = 0; i < S; ++i) vv[i] = WidenValue8<half()>(row, j0 + 8 * i);
        key(vv);
      });
    } else {
      for (int64_t t = 0; t < nc; ++t) {
        const float* f = static_cast<const float*>(v) + chunks->v + t * d + j0;
        __m256 vv[S];
#pragma GCC unroll 3
        for (int i = 0; i < S; ++i) vv[i] = _mm256_loadu_ps(f + 8 * i);
        key(vv);
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 3
    for (int i = 0; i < S; ++i) _mm256_storeu_ps(r.out + (h0 + h) * d + j0 + 8 * i, acc[h][i]);
  }
}

// A row's outputs over its n keys of the span: value tiles of 4 heads (fewer for what is left)
// × 24 dims (then 16 and 8 for what is left): 12 chains, 3 value loads and 4 broadcasts per 12
// FMAs (against 4 × 16: decode +4-15%, prefill +1-3%, kernels_bench, one thread, 10 rounds).
template <bool kBf16>
void SpanValues(RowState& r, int64_t group, int64_t d, const void* v, int64_t bs,
                const Chunk* chunks, int64_t n) {
  const auto heads = [&](auto h, int64_t h0) {
    int64_t j0 = 0;
    for (; j0 + 24 <= d; j0 += 24) ValueTile<h(), 3, kBf16>(r, h0, j0, d, v, bs, chunks, n);
    if (j0 + 16 <= d) {
      ValueTile<h(), 2, kBf16>(r, h0, j0, d, v, bs, chunks, n);
      j0 += 16;
    }
    if (j0 < d) ValueTile<h(), 1, kBf16>(r, h0, j0, d, v, bs, chunks, n);
  };
  ForHeadTiles(group, heads);
}

// The values of a span's nc chunks (bf16, ValueIndex) as f32, a row of d per key in key order.
void WidenSpanValues(const KvLayerView& kv, const Chunk* chunks, int64_t nc, float* out) {
  const uint16_t* v = static_cast<const uint16_t*>(kv.v);
  const int64_t d = kv.head_dim;  // a multiple of 8
  for (int64_t c = 0; c < nc; ++c) {
    ForChunkValues(v + chunks[c].head, chunks[c].in_block, chunks[c].n, kv.block_size, d,
                   [&](const uint16_t* row, auto half) {
                     for (int64_t j = 0; j < d; j += 8) {
                       _mm256_storeu_ps(out + j, WidenValue8<half()>(row, j));
                     }
                     out += d;
                   });
  }
}

// A query vector's d bf16 values (as f32, d % 8 == 0) as d / 2 pairs: dims 2p, 2p + 1 in pair p
// (the lower dim in the low half). The high halves of 16 floats, shifted down, are packed
// without saturation (each < 2^16) in order once the 128-bit lanes are put back in place.
void PackQueryPairs(const float* q, int64_t d, uint32_t* pairs) {
  int64_t j = 0;
  for (; j + 16 <= d; j += 16) {
    const __m256i a = _mm256_srli_epi32(_mm256_castps_si256(_mm256_loadu_ps(q + j)), 16);
    const __m256i b = _mm256_srli_epi32(_mm256_castps_si256(_mm256_loadu_ps(q + j + 8)), 16);
    const __m256i words = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pairs + j / 2), words);
  }
  for (; j < d; j += 2) {
    pairs[j / 2] = Bf16PairOf(q[j], q[j + 1]);
  }
}

// Where a span's P·V reads its values. Rows with dot-product scores over a cache of an even
// block size (every chunk but a span's last then holds whole key pairs: ValueIndex) take bf16
// dot products on the values' pairs: by vdpbf16ps straight from the cache, or on AMX tiles
// where the rows' scores are, from a copy of the span's pair rows in 16-row tiles
// (attention_tiles.h: SpanValuesDotAvx512, CopyValuePairs); one path for every row of a cache, so
// a row's bits do not depend on its batch. Otherwise (an odd block size too) f32 FMAs, on one
// f32 copy of a bf16 span shared by a prefill's rows (the widening is exact; each row's tiles
// then load the values as they are, with the same chains), or straight from the cache. Against
// the values kept a row per key (re-paired for every span: packed for AMX and a prefill's rows,
// in registers for a decode row), kernels_bench, one thread, medians of 5-7 interleaved rounds
// on a Xeon with AMX: decode 0.79-0.86× the time at MiniCPM4's heads, 0.90-0.92× at V-4.6's,
// prefill 0.96-1.03×; without AMX (vdpbf16ps) decode 0.93-0.97×, prefill level; the AVX2 path
// (f32 FMAs, each key's dims now a shift or a mask of a pair row) 1.02-1.05×.
enum class ValuePath { kDotAmx, kDot, kWidened, kCache };

ValuePath ChooseValuePath(bool bf16, bool dot, bool amx, int64_t rows, int64_t bs) {
  if (bf16 && dot && bs % 2 == 0) return amx ? ValuePath::kDotAmx : ValuePath::kDot;
  return bf16 && rows > 1 ? ValuePath::kWidened : ValuePath::kCache;
}

// The span's nc chunks as runs of value pairs (a bf16 cache, an even block size).
void SpanValueRuns(const KvLayerView& kv, const Chunk* chunks, int64_t nc,
                   attn::ValueRun* runs) {
  const uint16_t* v = static_cast<const uint16_t*>(kv.v);
  for (int64_t c = 0; c < nc; ++c) {
    runs[c] = {reinterpret_cast<const uint32_t*>(v + chunks[c].v), chunks[c].n};
  }
}

// The row's partial result for its partition (AttendRowsAvx2) at `to`: the outputs (where the
// row's sums were not there already), then m and l.
void StorePartial(const RowState& r, int64_t group, int64_t d, float* to) {
  if (r.out != to) std::copy(r.out, r.out + group * d, to);
  std::copy(r.m, r.m + group, to + group * d);
  std::copy(r.l, r.l + group, to + group * d + group);
}

// The row's result at `to` (maybe its sums' own place): each head's sums over its l.
void FinishRow(const RowState& r, int64_t group, int64_t d, float* to) {
  for (int64_t g = 0; g < group; ++g) {
    const __m256 inv = _mm256_set1_ps(1.0f / r.l[g]);
    const float* og = r.out + g * d;
    for (int64_t j = 0; j < d; j += 8) {
      _mm256_storeu_ps(to + g * d + j, _mm256_mul_ps(_mm256_loadu_ps(og + j), inv));
    }
  }
}

// Consecutive query rows of one sequence (row r sees n_keys0 + r keys) for one KV head, over the
// keys of one partition [key_begin, key_end), span by span (keys [p, p + 128) at multiples of
// 128): the scores of every chunk of the span for every row that sees any of its keys (each key
// vector feeding up to six query vectors, across rows), then per row the softmax update over its
// keys of the span and its values; at the end each row's result, or with !finish its partial
// one (AttendRowsAvx2). A row's spans, chunks and every chain in them are the same as when it
// is attended alone, so its result is too.
template <bool kBf16>
void AttendRows(const float* q, int64_t q_stride, int64_t rows, int64_t n_keys0,
                int64_t key_begin, int64_t key_end, bool finish, bool dot, int64_t kvh,
                int64_t group, const KvLayerView& kv, const int32_t* block_table, float scale,
                float* out, int64_t out_stride) {
  constexpr int64_t kSize = kBf16 ? 2 : 4;
  const int64_t d = kv.head_dim, bs = kv.block_size;
  // At the AVX-512 level: its score and value tiles, bitwise the AVX2 tiles' results
  // (attention_tiles.h).
  const bool wide = ActiveIsa() == Isa::kAvx512;
  const bool wide_values = wide && d % 16 == 0;
  thread_local RowState st[kMaxAttendRows];
  // The rows' query vectors transposed, qt[j][r·group + g] (row stride kMaxAttendRows·group), for
  // the score tiles: read through per-vector pointers, the tiles ran out of registers and
  // reloaded them from the stack every dim.
  thread_local float qt[kMaxHeadDim * kMaxAttendRows * kMaxGroup];
  alignas(32) thread_local float kt[kMaxHeadDim][kChunk];  // a chunk's keys, when copied
  thread_local Chunk chunks[kSpan + kKeysAhead];
  alignas(64) thread_local float vspan[kSpan * kMaxHeadDim];  // a span's values widened to f32
  thread_local attn::ValueRun runs[kSpan];  // the P·V dot products' runs of value pairs
  // AMX's P·V operand: the span's value pairs, d a row (CopyValuePairs).
  alignas(64) thread_local uint32_t vpairs[kSpan / 2 * kMaxHeadDim];
  // The rows' P pairs, row r's heads from r·group (RowState::p_pairs), and on AMX the sums of
  // several rows, [rows][group][d]: one run of tile rows across the rows (SpanValuesAmx).
  alignas(64) thread_local uint32_t p_pairs[kMaxAttendRows * kMaxGroup][kSpan / 2];
  alignas(64) thread_local float sums[kMaxAttendRows * kMaxGroup * kMaxHeadDim];
  // With `dot`, also as bf16 pairs for the dot-product score tiles: qp[(r·group + g)·kQpStride
  // + p] holds dims 2p, 2p + 1 (the rows' q are bf16 values, so taking the high halves is exact).
  // 32 vectors more than the rows hold: AMX's score tiles read 16 or 32 whole vectors.
  thread_local uint32_t qp[(kMaxAttendRows * kMaxGroup + 32) * attn::kQpStride];
  const int64_t qt_stride = kMaxAttendRows * group;
  // With a block of whole groups of 16 slots every chunk is whole, so dot-product tiles take
  // all the scores and qt goes unread (its scalar transpose was ~1/3 of this function's own
  // time in a 512-token prefill).
  const bool all_dot = kBf16 && dot && bs % kChunk == 0;
  const bool amx_scores = kBf16 && dot && attn::UseAmxScores(d);
  // The scores' tiles hold a row per query vector, P·V's a row per head (SpanValuesAmx loads
  // its own): the same shapes for a decode row and for a prefill's full tiles, so UseTileConfig,
  // which loads only where the shapes change, loads once.
  const AmxTileConfig score_tiles = attn::TileConfig(rows * group);
  // Where each span's P·V reads its values (ValuePath).
  const ValuePath path = ChooseValuePath(kBf16, dot, amx_scores, rows, bs);
  const bool dot_values = path == ValuePath::kDotAmx || path == ValuePath::kDot;
  // A row's own output serves one row (its heads d apart, as in the scratch).
  const bool scratch = path == ValuePath::kDotAmx && rows > 1;
  for (int64_t r = 0; r < rows; ++r) {
    float* sums_r = scratch ? sums + r * group * d : out + r * out_stride;
    BeginRow(&st[r], sums_r, n_keys0 + r, group, d);
    st[r].p_pairs = p_pairs + r * group;
    for (int64_t g = 0; g < group; ++g) {
      const float* qg = q + r * q_stride + g * d;
      for (int64_t j = 0; !all_dot && j < d; ++j) qt[j * qt_stride + r * group + g] = qg[j];
      if (dot) PackQueryPairs(qg, d, qp + (r * group + g) * attn::kQpStride);
    }
  }
  // The chunk at key p: inside one group of 16 slots of one block, ≤ n_keys. A power-of-two
  // block size (the server's 16, or any such --block-size) splits p by a shift: the two integer
  // divisions were ~1/4 of this function's own samples in a decode over 16 × 1024 keys.
  const int bs_shift = std::has_single_bit(static_cast<uint64_t>(bs))
                           ? std::countr_zero(static_cast<uint64_t>(bs))
                           : -1;
  auto chunk_at = [&](int64_t p, int64_t n_keys) {
    const int64_t block = bs_shift >= 0 ? p >> bs_shift : p / bs;
    const int64_t in_block = p - block * bs;
    const int64_t group_end = std::min(bs, (in_block & ~(kChunk - 1)) + kChunk);
    const int64_t head = block_table[block] * kv.BlockStride() + kvh * kv.HeadStride();
    return Chunk{head, in_block, head + in_block * d,
                 std::min(n_keys - p, group_end - in_block),
                 in_block % kChunk == 0 && in_block + kChunk <= bs};
  };
  const int64_t key_row = KeyRow(bs, kv.dtype);  // elements between a chunk's rows of keys
  // Keys of the last row (the most) within the partition.
  const int64_t n_last = std::min(n_keys0 + rows - 1, key_end);
  float* s[kMaxAttendRows * kMaxGroup];
  for (int64_t p0 = key_begin; p0 < n_last; p0 += kSpan) {
    const int64_t p1 = std::min(p0 + kSpan, n_last);
    if (amx_scores) UseTileConfig(score_tiles);
    int64_t nc = 0;
    for (int64_t p = p0; p < p1; p += chunks[nc++].n) chunks[nc] = chunk_at(p, p1);
    // The chunks after the span's, to prefetch (the last repeats where the keys end).
    for (int64_t a = 0, p = p1; a < kKeysAhead; ++a) {
      if (p < n_last) {
        chunks[nc + a] = chunk_at(p, n_last);
        p += chunks[nc + a].n;
      } else {
        chunks[nc + a] = chunks[nc + a - 1];
      }
    }
    // Rows [first_row(o), rows) see key p0 + o (row r sees n_keys0 + r keys).
    const auto first_row = [&](int64_t o) { return std::max<int64_t>(0, p0 + o - n_keys0 + 1); };
    const auto prefetch_for = [&](int64_t c) {
      const Chunk& ch = chunks[c];
      const Chunk& next = chunks[c + kKeysAhead];
      return Prefetch{static_cast<const char*>(kv.k) + ChunkKeysAt(next, kv) * kSize,
                      key_row * kSize, kBf16, static_cast<const char*>(kv.v) + ch.v * kSize,
                      ch.n * kSize};
    };
    for (int64_t c = 0, o = 0; c < nc; o += chunks[c++].n) {
      const int64_t r0 = first_row(o), nq = (rows - r0) * group;
      for (int64_t r = r0, i = 0; r < rows; ++r) {
        for (int64_t g = 0; g < group; ++g) s[i++] = st[r].s[g] + o;
      }
      const Chunk& ch = chunks[c];
      if (kBf16 && dot && ch.whole) {
        // The next chunks join the tiles while they are whole too, the ones before them full,
        // and the same rows see them: 2 (4 for ≤ 4 query vectors, whose tiles have fewer
        // chains), or 1.
        const int64_t most = nq <= 4 ? kMaxTileChunks : 2;
        int64_t n_chunks = 1;
        while (n_chunks < most && c + n_chunks < nc && chunks[c + n_chunks - 1].n == kChunk &&
               chunks[c + n_chunks].whole && first_row(o + n_chunks * kChunk) == r0) {
          ++n_chunks;
        }
        if (n_chunks == 3) n_chunks = 2;  // tiles of 1, 2 or 4 chunks
        const uint16_t* keys[4];
        Prefetch pf[4];
        for (int64_t i = 0; i < n_chunks; ++i) {
          const Chunk& ci = chunks[c + i];
          keys[i] = static_cast<const uint16_t*>(kv.k) + ChunkKeysAt(ci, kv);
          pf[i] = prefetch_for(c + i);
        }
        const auto scores = amx_scores ? attn::ScoreTilesAmx : attn::ScoreTilesDotAvx512;
        scores(qp + r0 * group * attn::kQpStride, s, nq, d, keys, n_chunks, key_row, scale, pf);
        for (int64_t i = 1; i < n_chunks; ++i) o += chunks[c++].n;
        continue;
      }
      const Prefetch pf = prefetch_for(c);
      const bool copy = !ch.whole || (kBf16 && nq > kMaxDirectVectors);
      if (copy) CopyKeys<kBf16>(kv, ch, kt);
      const float* qr = qt + r0 * group;
      if (!copy && kBf16) {
        const ChunkKeys keys{static_cast<const uint16_t*>(kv.k) + ChunkKeysAt(ch, kv), key_row};
        if (wide) {
          attn::ScoreTilesAvx512(qr, qt_stride, s, nq, d, keys.p, key_row, true, scale, pf);
        } else {
          ScoreTiles<true>(qr, qt_stride, s, nq, d, keys, scale, pf);
        }
      } else {
        const ChunkKeys keys =
            copy ? ChunkKeys{&kt[0][0], kChunk}
                 : ChunkKeys{static_cast<const float*>(kv.k) + ChunkKeysAt(ch, kv), key_row};
        if (wide) {
          attn::ScoreTilesAvx512(qr, qt_stride, s, nq, d, keys.p, keys.row, false, scale, pf);
        } else {
          ScoreTiles<false>(qr, qt_stride, s, nq, d, keys, scale, pf);
        }
      }
    }
    // The span's values, prepared once for all rows.
    if (dot_values) SpanValueRuns(kv, chunks, nc, runs);
    if (path == ValuePath::kDotAmx) attn::CopyValuePairs(runs, nc, d, vpairs);
    if (path == ValuePath::kWidened) WidenSpanValues(kv, chunks, nc, vspan);
    const Chunk widened_chunk{0, 0, 0, p1 - p0, true};  // the f32 copy: one chunk of all keys
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = std::min(p1, st[r].n_keys) - p0;  // the row's keys in the span
      if (n <= 0) continue;
      if (dot_values) attn::SpanSoftmaxDotAvx512(&st[r], group, n);
      else if (wide) attn::SpanSoftmaxAvx512(&st[r], group, n, kBf16);
      else SpanSoftmax(&st[r], group, n, kBf16);
      switch (path) {
        case ValuePath::kDotAmx:  // after every row's update, all rows at once
          break;
        case ValuePath::kDot:
          attn::SpanValuesDotAvx512(st[r], group, d, runs, n);
          break;
        case ValuePath::kWidened:
          if (wide_values) {
            attn::SpanValuesAvx512(st[r], group, d, vspan, false, bs, &widened_chunk, n);
          } else {
            SpanValues<false>(st[r], group, d, vspan, bs, &widened_chunk, n);
          }
          break;
        case ValuePath::kCache:
          if (wide_values) attn::SpanValuesAvx512(st[r], group, d, kv.v, kBf16, bs, chunks, n);
          else SpanValues<kBf16>(st[r], group, d, kv.v, bs, chunks, n);
          break;
      }
    }
    if (path == ValuePath::kDotAmx) attn::SpanValuesAmx(st, rows, group, d, vpairs, p0, p1);
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (finish) FinishRow(st[r], group, d, out + r * out_stride);
    else StorePartial(st[r], group, d, out + r * out_stride);
  }
}

}  // namespace

void MergePartitionsAvx2(const float* parts, int64_t stride, int64_t n, int64_t group, int64_t d,
                         float* out) {
  for (int64_t g = 0; g < group; ++g) {
    const auto m_of = [&](int64_t j) { return parts[j * stride + group * d + g]; };
    const auto l_of = [&](int64_t j) { return parts[j * stride + group * d + group + g]; };
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, m_of(j));
    float* o = out + g * d;
    float l = 0.0f;
    bool first = true;
    for (int64_t j = 0; j < n; ++j) {
      if (l_of(j) == 0.0f) continue;
      const float w = std::exp(m_of(j) - m);
      const __m256 wv = _mm256_set1_ps(w);
      const float* oj = parts + j * stride + g * d;
      for (int64_t i = 0; i < d; i += 8) {
        const __m256 x = _mm256_loadu_ps(oj + i);
        _mm256_storeu_ps(o + i, first ? _mm256_mul_ps(x, wv)
                                      : _mm256_fmadd_ps(x, wv, _mm256_loadu_ps(o + i)));
      }
      l = first ? l_of(j) * w : l + l_of(j) * w;
      first = false;
    }
    const __m256 inv = _mm256_set1_ps(1.0f / l);
    for (int64_t i = 0; i < d; i += 8) {
      _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_loadu_ps(o + i), inv));
    }
  }
}

void AttendRowsAvx2(const float* q, int64_t q_stride, int64_t rows, int64_t n_keys0,
                    int64_t key_begin, int64_t key_end, bool finish, bool dot, int64_t kvh,
                    int64_t group, const KvLayerView& kv, const int32_t* block_table, float scale,
                    float* out, int64_t out_stride) {
  const auto run = kv.dtype == DType::kBF16 ? AttendRows<true> : AttendRows<false>;
  run(q, q_stride, rows, n_keys0, key_begin, key_end, finish, dot, kvh, group, kv, block_table,
      scale, out, out_stride);
}

}  // namespace cpm::kernels
