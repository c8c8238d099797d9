// AVX2 attention for query rows of a GQA group: walks the sequence's KV blocks once in
// chunks of up to 16 keys. The cache keeps each block's keys transposed (a dim's keys
// contiguous), so a head's 16 scores come out of plain FMAs with no horizontal sums, each key
// vector shared by up to 6 query vectors (the heads of one or more rows); bf16 keys are widened
// in registers (decode) or once into an f32 copy of the chunk (the rows of a prefill: ChunkKeys).
// The chunk's values are widened once. Each head then folds the chunk into its online softmax
// (running max m, sum l, output o). The group's queries, outputs and the chunk (≤ 2 × 16 KiB)
// stay in L1. Consecutive rows of a prefill (up to kMaxAttendRows) share each chunk.
// Compiled with -mavx2 -mfma -mf16c.
//
// A row's result depends only on its query and its keys (chunks start at the same positions
// whatever the batch), so attention stays batch invariant.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/attention_impl.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxGroup = 16;
constexpr int64_t kChunk = 16;  // keys per softmax update (≤ one block)

template <bool kBf16>
inline __m256 LoadKv8(const void* base, int64_t idx) {
  if constexpr (kBf16) return avx2::LoadBf16(static_cast<const uint16_t*>(base) + idx);
  else return _mm256_loadu_ps(static_cast<const float*>(base) + idx);
}

// One chunk of n ≤ 16 values widened to f32, vc[t][j], and its keys kt[j][t] (zero past n) when
// they are copied (ChunkKeys).
struct Chunk {
  alignas(32) float kt[kMaxHeadDim][kChunk];
  alignas(32) float vc[kChunk][kMaxHeadDim];
};

// Dim j's 16 keys (0-7 in k0, 8-15 in k1) of a chunk whose dims are `row` elements apart at p:
// bf16 in KeySlot's pairing (one 32-byte load, widened by a shift and a mask) or f32 in order.
template <bool kBf16>
inline void LoadKeys16(const void* p, int64_t row, int64_t j, __m256* k0, __m256* k1) {
  if constexpr (kBf16) {
    const __m256i v = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + j * row));
    *k0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *k1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536)));
  } else {
    const float* f = static_cast<const float*>(p) + j * row;
    *k0 = _mm256_loadu_ps(f);
    *k1 = _mm256_loadu_ps(f + 8);
  }
}

// Where the score tiles read a chunk's keys: dim j's at p + j·row elements, bf16 (KeySlot's
// pairing) or f32. Straight from the cache where the chunk is a whole group of 16 slots (always
// when the block size is a multiple of 16) and the tiles are few: a decode row's heads widen
// bf16 keys in registers once per tile of ≤ 6 query vectors instead of through a copy, a store
// and a reload per key vector (with the spread prefetch below: kernels_bench, one thread, 16
// sequences × 1024 keys +30%, medians of 15 interleaved rounds; perf, batch-16 decode at depth
// 1024: attention 32% → 29% of the step). The copy (kt, row 16, f32) serves the rows of a
// prefill (up to 64 query vectors, 11 tiles: widening in every tile cost more than the copy)
// and a block's shorter last group.
struct ChunkKeys {
  const void* p;
  int64_t row;
  bool bf16;
};
constexpr int64_t kMaxDirectKeyVectors = 8;  // query vectors up to which keys are not copied

// Where the next chunk's keys and values lie, for LoadChunk to prefetch.
struct NextChunk {
  const char* k;  // dim 0 of its first key
  const char* v;  // its first value
};

// The chunk's n ≤ 16 values into vc[t][j] and, with `copy_keys`, its keys into kt[j][t] (zeros
// past n): `k` and `v` are the element offsets of its first key (dim j then `block_size`
// further on each, the cache keeping keys transposed; `whole`: a group of 16 slots in KeySlot's
// pairing) and first value (dims contiguous, the next value d further). The next chunk is a few
// KiB in another block of the cache, which the hardware prefetchers do not guess: its lines are
// requested (into L2) along with this chunk's values, a few per value, rather than in a burst
// before them, which stalled on the core's outstanding-miss buffers (perf: ~8% of decode
// attention's samples at 16 sequences × 1024 keys sat on the burst's loop). With no prefetch,
// 16 sequences × 8192 keys (64 MiB, past L3) run at 0.6×; two or four chunks ahead instead of
// one: no better.
template <bool kBf16>
void LoadChunk(const KvLayerView& kv, int64_t k, int64_t v, int64_t n, bool whole,
               bool copy_keys, NextChunk next, Chunk* c) {
  constexpr int64_t kSize = kBf16 ? 2 : 4;
  const int64_t d = kv.head_dim, bs = kv.block_size;
  const int64_t k_row = bs * kSize, v_row = d * kSize;
  for (int64_t t = 0; t < n; ++t) {
    // The next keys' dims j ≡ t (mod n): all d of them over the n values (a dim's 16 keys are
    // 32 or 64 bytes; some lines twice, which costs less than a branch).
    for (int64_t j = t; j < d; j += n) _mm_prefetch(next.k + j * k_row, _MM_HINT_T1);
    for (int64_t b = 0; b < v_row; b += 64) _mm_prefetch(next.v + t * v_row + b, _MM_HINT_T1);
    for (int64_t j = 0; j < d; j += 8) {
      _mm256_store_ps(&c->vc[t][j], LoadKv8<kBf16>(kv.v, v + t * d + j));
    }
  }
  if (!copy_keys) return;
  if (whole) {
    const char* base = static_cast<const char*>(kv.k) + k * kSize;
    for (int64_t j = 0; j < d; ++j) {
      __m256 k0, k1;
      LoadKeys16<kBf16>(base, bs, j, &k0, &k1);
      _mm256_store_ps(&c->kt[j][0], k0);
      _mm256_store_ps(&c->kt[j][8], k1);
    }
    return;
  }
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t t = 0; t < kChunk; ++t) {
      c->kt[j][t] = t < n ? LoadKv(kv.k, kv.dtype, k + j * bs + t) : 0.0f;
    }
  }
}

// Online-softmax step over a chunk of n ≤ 16 scores for heads [g0, g0 + nh), nh ≤ 8: updates
// each head's running max m and sum l, leaves exp(s - m) in s (0 past n) and writes the factor
// alpha = e^(m_old - m_new) that rescales each head's running output. The heads' chunk maxima
// and sums come out of one 8×8 transpose each, and the alphas out of one vector exp, instead of
// a horizontal reduction and a scalar exp per head (the scalar part dominated short chunks).
// m, l, alpha: arrays of ≥ g0 + 8 floats (lanes past nh are computed and ignored).
inline void SoftmaxStep8(float (*s)[kChunk], int64_t g0, int64_t nh, int64_t n, float* m,
                         float* l, float* alpha) {
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
  const __m256 in_lo = _mm256_castsi256_ps(avx2::FirstLanes(n));
  const __m256 in_hi = _mm256_castsi256_ps(avx2::FirstLanes(n - 8));
  __m256 r[8];
  for (int h = 0; h < 8; ++h) {
    if (h >= nh) {
      r[h] = _mm256_setzero_ps();  // an unused head: a finite max keeps its lanes NaN-free
      continue;
    }
    const __m256 s0 = _mm256_blendv_ps(neg_inf, _mm256_load_ps(s[g0 + h]), in_lo);
    const __m256 s1 = _mm256_blendv_ps(neg_inf, _mm256_load_ps(s[g0 + h] + 8), in_hi);
    r[h] = _mm256_max_ps(s0, s1);
  }
  avx2::Transpose8x8(r);  // r[j][h]: lane j of head h
  __m256 chunk_max = r[0];
  for (int j = 1; j < 8; ++j) chunk_max = _mm256_max_ps(chunk_max, r[j]);
  const __m256 m_old = _mm256_loadu_ps(m + g0);
  const __m256 m_new = _mm256_max_ps(m_old, chunk_max);
  // 0 on a head's first chunk (m_old = -inf).
  const __m256 a = avx2::Exp(_mm256_sub_ps(m_old, m_new));
  _mm256_storeu_ps(m + g0, m_new);
  _mm256_storeu_ps(alpha + g0, a);
  alignas(32) float mx[8];
  _mm256_store_ps(mx, m_new);
  for (int h = 0; h < 8; ++h) {
    if (h >= nh) {
      r[h] = _mm256_setzero_ps();
      continue;
    }
    const __m256 vm = _mm256_set1_ps(mx[h]);
    const __m256 e0 = _mm256_and_ps(avx2::Exp(_mm256_sub_ps(_mm256_load_ps(s[g0 + h]), vm)), in_lo);
    const __m256 e1 =
        _mm256_and_ps(avx2::Exp(_mm256_sub_ps(_mm256_load_ps(s[g0 + h] + 8), vm)), in_hi);
    _mm256_store_ps(s[g0 + h], e0);
    _mm256_store_ps(s[g0 + h] + 8, e1);
    r[h] = _mm256_add_ps(e0, e1);
  }
  avx2::Transpose8x8(r);
  __m256 sum = r[0];
  for (int j = 1; j < 8; ++j) sum = _mm256_add_ps(sum, r[j]);
  _mm256_storeu_ps(l + g0, _mm256_fmadd_ps(_mm256_loadu_ps(l + g0), a, sum));
}

// s_i[0..16) = scale · q_i · k_t for H query vectors (any rows' heads of this KV head): each
// key vector feeds all H. One FMA chain per score over the dims in order, whatever the tile.
// Keys past the chunk's n may be any bits (slots not yet written): their scores are never used.
template <int H, bool kBf16Keys>
void ScoreTile(const float* const* q, float* const* s, int64_t d, const ChunkKeys& keys,
               float scale) {
  __m256 acc[H][2];
#pragma GCC unroll 6
  for (int h = 0; h < H; ++h) acc[h][0] = acc[h][1] = _mm256_setzero_ps();
  for (int64_t j = 0; j < d; ++j) {
    __m256 k0, k1;
    LoadKeys16<kBf16Keys>(keys.p, keys.row, j, &k0, &k1);
#pragma GCC unroll 6
    for (int h = 0; h < H; ++h) {
      const __m256 b = _mm256_broadcast_ss(q[h] + j);
      acc[h][0] = _mm256_fmadd_ps(b, k0, acc[h][0]);
      acc[h][1] = _mm256_fmadd_ps(b, k1, acc[h][1]);
    }
  }
  const __m256 sc = _mm256_set1_ps(scale);
#pragma GCC unroll 6
  for (int h = 0; h < H; ++h) {
    _mm256_store_ps(s[h], _mm256_mul_ps(acc[h][0], sc));
    _mm256_store_ps(s[h] + 8, _mm256_mul_ps(acc[h][1], sc));
  }
}

// o[0, 8·NV) = o · alpha + Σ_t p[t] · v_t[j0, j0 + 8·NV) over n keys (NV fixed so that the
// accumulators stay in registers).
template <int NV>
void AccumulateSpan(float* o, int64_t j0, __m256 va, const float* p, int64_t n, const Chunk& c) {
  __m256 acc[NV];
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) acc[v] = _mm256_mul_ps(_mm256_loadu_ps(o + j0 + 8 * v), va);
  for (int64_t t = 0; t < n; ++t) {
    const __m256 b = _mm256_broadcast_ss(p + t);
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) {
      acc[v] = _mm256_fmadd_ps(b, _mm256_load_ps(&c.vc[t][j0 + 8 * v]), acc[v]);
    }
  }
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) _mm256_storeu_ps(o + j0 + 8 * v, acc[v]);
}

// o = o · alpha + Σ_t p[t] · v_t over n keys, 64 dims at a time.
void AccumulateValues(float* o, int64_t d, float alpha, const float* p, int64_t n,
                      const Chunk& c) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t j0 = 0;
  for (; j0 + 64 <= d; j0 += 64) AccumulateSpan<8>(o, j0, va, p, n, c);
  switch ((d - j0) / 8) {
    case 0: return;
    case 1: return AccumulateSpan<1>(o, j0, va, p, n, c);
    case 2: return AccumulateSpan<2>(o, j0, va, p, n, c);
    case 3: return AccumulateSpan<3>(o, j0, va, p, n, c);
    case 4: return AccumulateSpan<4>(o, j0, va, p, n, c);
    case 5: return AccumulateSpan<5>(o, j0, va, p, n, c);
    case 6: return AccumulateSpan<6>(o, j0, va, p, n, c);
    default: return AccumulateSpan<7>(o, j0, va, p, n, c);
  }
}

// The online-softmax state of one query row of a GQA group: each head's running max m and
// sum l, the chunk's scores s (then probabilities) and rescale factors alpha; the running output
// accumulates in `out` itself.
struct RowState {
  const float* q;  // [group][d]
  float* out;      // [group][d]
  int64_t n_keys;
  float m[kMaxGroup], l[kMaxGroup], alpha[kMaxGroup];
  alignas(32) float s[kMaxGroup][kChunk];
};

void BeginRow(RowState* r, const float* q, float* out, int64_t n_keys, int64_t group,
              int64_t d) {
  r->q = q;
  r->out = out;
  r->n_keys = n_keys;
  // Every slot set, as the softmax step works 8 heads at a time.
  std::fill(r->m, r->m + kMaxGroup, -INFINITY);
  std::fill(r->l, r->l + kMaxGroup, 0.0f);
  std::fill(out, out + group * d, 0.0f);
}

// Score tiles over a flat list of query vectors: 6 at a time (12 accumulator chains: more than
// FMA latency × ports) while what is left is not 7-9 (then 4s: 8 = 4 + 4, not 6 + 2, whose 4
// chains would wait on FMA latency), then 4, 2, 1.
template <typename F>
void ForTiles(int64_t n, F&& tile) {
  int64_t i = 0;
  for (; n - i == 6 || n - i >= 10; i += 6) tile(std::integral_constant<int, 6>{}, i);
  for (; i + 4 <= n; i += 4) tile(std::integral_constant<int, 4>{}, i);
  for (; i + 2 <= n; i += 2) tile(std::integral_constant<int, 2>{}, i);
  for (; i < n; ++i) tile(std::integral_constant<int, 1>{}, i);
}

// Folds a chunk of n keys into rows [r0, r1): the scores of all their heads' query vectors
// together (each key vector feeds up to six of them, across rows), the online-softmax update 8
// heads at a time per row, then the values one head at a time (o_g lives in L1). Every score
// and output element is one chain in a fixed order, so a row's result does not depend on its
// companions. (Values across rows too, 6 query vectors × 16 dims per tile, measured slower at
// decode: 16 sequences × 1024 keys 0.82× the per-head loop, paired medians of 16 rounds.)
void FoldRows(RowState* st, int64_t r0, int64_t r1, const ChunkKeys& keys, const Chunk& c,
              int64_t n, int64_t group, int64_t d, float scale) {
  const int64_t nq = (r1 - r0) * group;
  const float* q[kMaxAttendRows * kMaxGroup];
  float* s[kMaxAttendRows * kMaxGroup];
  for (int64_t i = 0; i < nq; ++i) {
    RowState& r = st[r0 + i / group];
    q[i] = r.q + (i % group) * d;
    s[i] = r.s[i % group];
  }
  if (keys.bf16) {
    ForTiles(nq, [&](auto h, int64_t i) { ScoreTile<h(), true>(q + i, s + i, d, keys, scale); });
  } else {
    ForTiles(nq, [&](auto h, int64_t i) { ScoreTile<h(), false>(q + i, s + i, d, keys, scale); });
  }
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t g = 0; g < group; g += 8) {
      SoftmaxStep8(st[r].s, g, std::min<int64_t>(8, group - g), n, st[r].m, st[r].l, st[r].alpha);
    }
    for (int64_t g = 0; g < group; ++g) {
      AccumulateValues(st[r].out + g * d, d, st[r].alpha[g], st[r].s[g], n, c);
    }
  }
}

void FinishRow(const RowState& r, int64_t group, int64_t d) {
  for (int64_t g = 0; g < group; ++g) {
    const __m256 inv = _mm256_set1_ps(1.0f / r.l[g]);
    float* og = r.out + g * d;
    for (int64_t j = 0; j < d; j += 8) {
      _mm256_storeu_ps(og + j, _mm256_mul_ps(_mm256_loadu_ps(og + j), inv));
    }
  }
}

// Consecutive query rows of one sequence (row r sees n_keys0 + r keys) for one KV head. Rows
// share every chunk that they all cut the same way (the chunks full for the first row): it is
// widened once for them all. Each row then finishes its own last keys alone. A row's chunks, and
// so its result, are the same as when it is attended alone.
template <bool kBf16>
void AttendRows(const float* q, int64_t q_stride, int64_t rows, int64_t n_keys0, int64_t kvh,
                int64_t group, const KvLayerView& kv, const int32_t* block_table, float scale,
                float* out, int64_t out_stride) {
  const int64_t d = kv.head_dim;
  thread_local RowState st[kMaxAttendRows];
  thread_local Chunk chunk;
  for (int64_t r = 0; r < rows; ++r) {
    BeginRow(&st[r], q + r * q_stride, out + r * out_stride, n_keys0 + r, group, d);
  }
  // A chunk stays inside one block (any block_size works; 16 is one chunk per block): its
  // head's block starts at element `head` of K and of V, its first key at `in_block` in it.
  struct ChunkAt {
    int64_t head, in_block, n;
  };
  auto chunk_at = [&](int64_t p0, int64_t n_keys) {
    const int64_t in_block = p0 % kv.block_size;
    return ChunkAt{block_table[p0 / kv.block_size] * kv.BlockStride() + kvh * kv.HeadStride(),
                   in_block, std::min({kChunk, n_keys - p0, kv.block_size - in_block})};
  };
  // One chunk at p0 for rows [r0, r1), prefetching the next (without, decode attention over a
  // long context stalls on every chunk's loads: kernels_bench 31 → 41 GFLOP/s at 16 sequences ×
  // 1024 keys, 4 interleaved rounds).
  auto fold = [&](int64_t p0, const ChunkAt& c, int64_t r0, int64_t r1) {
    // The last chunk "prefetches" itself: no branch in LoadChunk's loops.
    const int64_t last_keys = st[r1 - 1].n_keys;
    const ChunkAt nc = p0 + c.n < last_keys ? chunk_at(p0 + c.n, last_keys) : c;
    constexpr int64_t kSize = kBf16 ? 2 : 4;
    const NextChunk next{static_cast<const char*>(kv.k) + (nc.head + nc.in_block) * kSize,
                         static_cast<const char*>(kv.v) + (nc.head + nc.in_block * d) * kSize};
    const int64_t k = c.head + c.in_block;
    const bool whole = c.in_block + kChunk <= kv.block_size;  // KeySlot's group of 16
    // f32 keys in a whole group read the same from the cache as from a copy.
    const bool copy = !whole || (kBf16 && (r1 - r0) * group > kMaxDirectKeyVectors);
    const ChunkKeys keys = copy ? ChunkKeys{&chunk.kt[0][0], kChunk, false}
                                : ChunkKeys{static_cast<const char*>(kv.k) + k * kSize,
                                            kv.block_size, kBf16};
    LoadChunk<kBf16>(kv, k, c.head + c.in_block * d, c.n, whole, copy, next, &chunk);
    FoldRows(st, r0, r1, keys, chunk, c.n, group, d, scale);
  };
  int64_t shared_end = 0;
  while (shared_end < n_keys0) {
    const ChunkAt c = chunk_at(shared_end, n_keys0);
    if (c.n < std::min(kChunk, kv.block_size - c.in_block)) break;  // partial
    fold(shared_end, c, 0, rows);
    shared_end += c.n;
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t p0 = shared_end; p0 < st[r].n_keys;) {
      const ChunkAt c = chunk_at(p0, st[r].n_keys);
      fold(p0, c, r, r + 1);
      p0 += c.n;
    }
    FinishRow(st[r], group, d);
  }
}

}  // namespace

void AttendRowsAvx2(const float* q, int64_t q_stride, int64_t rows, int64_t n_keys0,
                    int64_t kvh, int64_t group, const KvLayerView& kv,
                    const int32_t* block_table, float scale, float* out, int64_t out_stride) {
  if (kv.dtype == DType::kBF16) {
    AttendRows<true>(q, q_stride, rows, n_keys0, kvh, group, kv, block_table, scale, out,
                     out_stride);
  } else {
    AttendRows<false>(q, q_stride, rows, n_keys0, kvh, group, kv, block_table, scale, out,
                      out_stride);
  }
}

}  // namespace cpm::kernels
