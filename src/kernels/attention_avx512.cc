// AVX-512 tiles of the attention kernel (attention_tiles.h): a chunk's 16 keys in one zmm per
// query vector, and 16 output dims per zmm. Each computes the AVX2 tiles' chains (one FMA chain
// per score over the dims in order; per output element, the running output times alpha, then
// one FMA per key in order), so the results are bitwise the AVX2 kernel's and a row's result
// still does not depend on its batch. So does the softmax update on 16 lanes. The bf16
// dot-product tiles (AVX512_BF16, for bf16 queries over a bf16 cache), for the scores and for
// P·V with its own softmax update, sum the same products in another order, the same for a row
// alone or in a batch. Compiled with CPM_AVX512_FLAGS; called at the AVX-512 level only.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/attention_impl.h"
#include "kernels/attention_tiles.h"
#include "kernels/exp_poly.h"
#include "kernels/simd_avx2.h"
#include "kernels/simd_avx512.h"

namespace cpm::kernels::attn {
namespace {

// H query vectors' scores against a whole chunk's 16 keys. H ≤ 12: 12 chains cover the FMA
// latency × ports; each key vector feeds all H: f32, a dim's row; bf16, one 64-byte row of a dim
// pair (KeyIndex) widened exactly into both dims' vectors, 2p's by a shift and 2p + 1's by a
// mask (each key's pair is one 32-bit lane).
template <int H, bool kBf16, bool kPrefetch>
[[gnu::noinline]] void ScoreTile(const float* qt, int64_t q_stride, float* const* s, int64_t d,
                                 const void* keys, int64_t row, float scale,
                                 const Prefetch& pf) {
  __m512 acc[H];
#pragma GCC unroll 12
  for (int h = 0; h < H; ++h) acc[h] = _mm512_setzero_ps();
  const auto dim = [&](__m512 k, int64_t j) {
    const float* qj = qt + j * q_stride;
#pragma GCC unroll 12
    for (int h = 0; h < H; ++h) acc[h] = _mm512_fmadd_ps(_mm512_set1_ps(qj[h]), k, acc[h]);
  };
  for (int64_t j = 0; j < d; j += 2) {
    if constexpr (kPrefetch) RequestDims(pf, j);
    if constexpr (kBf16) {
      const __m512i pair = _mm512_loadu_si512(static_cast<const uint16_t*>(keys) + j / 2 * row);
      dim(_mm512_castsi512_ps(_mm512_slli_epi32(pair, 16)), j);
      dim(_mm512_castsi512_ps(_mm512_and_si512(pair, _mm512_set1_epi32(-65536))), j + 1);
    } else {
      const float* f = static_cast<const float*>(keys) + j * row;
      dim(_mm512_loadu_ps(f), j);
      dim(_mm512_loadu_ps(f + row), j + 1);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 12
  for (int h = 0; h < H; ++h) _mm512_storeu_ps(s[h], _mm512_mul_ps(acc[h], sc));
}

// acc[h][i] = o_{h0+h}[j0 + 16i, j0 + 16i + 16) · alpha_{h0+h}: a value tile's running outputs
// rescaled for the span (kTail: the last of the S vectors holds 8 dims, the rest 0).
template <int H, int S, bool kTail>
[[gnu::always_inline]] inline void LoadRescaled(const RowState& r, int64_t h0, int64_t j0,
                                                int64_t d, __m512 (&acc)[H][S]) {
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
    const __m512 a = _mm512_set1_ps(r.alpha[h0 + h]);
#pragma GCC unroll 4
    for (int i = 0; i < S; ++i) {
      const __mmask16 lanes = kTail && i == S - 1 ? 0x00ff : 0xffff;
      acc[h][i] = _mm512_mul_ps(
          avx512::MaskzLoadu(lanes, r.out + (h0 + h) * d + j0 + 16 * i), a);
    }
  }
}

// Dims [j, j + 16) of a bf16 cache's value as f32 (ForChunkValues): the key's halves of a pair
// row's 32 words, by a shift (the low halves) or a mask, or its own row's 16 words widened.
template <ValueHalf kHalf>
inline __m512 WidenValue16(const uint16_t* row, int64_t j) {
  if constexpr (kHalf == ValueHalf::kOwnRow) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + j));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  const __m512i w = _mm512_loadu_si512(row + 2 * j);
  if constexpr (kHalf == ValueHalf::kLow) return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
  return _mm512_castsi512_ps(_mm512_and_si512(w, _mm512_set1_epi32(-65536)));
}

// o_h[j0, j0 + 16·S) = o_h · alpha_h + Σ_t p_h[t] · v_t[j0, j0 + 16·S) for H heads from h0
// (the AVX2 ValueTile on 16 lanes).
template <int H, int S, bool kBf16>
[[gnu::noinline]] void ValueTile(RowState& r, int64_t h0, int64_t j0, int64_t d, const void* v,
                                 int64_t bs, const Chunk* chunks, int64_t n) {
  __m512 acc[H][S];
  LoadRescaled<H, S, false>(r, h0, j0, d, acc);
  int64_t o = 0;  // the span's key
  const auto key = [&](const __m512 (&vv)[S]) {
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m512 p = _mm512_set1_ps(r.s[h0 + h][o]);
#pragma GCC unroll 4
      for (int i = 0; i < S; ++i) acc[h][i] = _mm512_fmadd_ps(p, vv[i], acc[h][i]);
    }
    ++o;
  };
  for (; o < n; ++chunks) {
    const int64_t nc = std::min(chunks->n, n - o);
    if constexpr (kBf16) {
      const uint16_t* head = static_cast<const uint16_t*>(v) + chunks->head;
      ForChunkValues(head, chunks->in_block, nc, bs, d, [&](const uint16_t* row, auto half) {
        __m512 vv[S];
#pragma GCC unroll 4
        for (int i = 0; i < S; ++i) vv[i] = WidenValue16<half()>(row, j0 + 16 * i);
        key(vv);
      });
    } else {
      for (int64_t t = 0; t < nc; ++t) {
        const float* f = static_cast<const float*>(v) + chunks->v + t * d + j0;
        __m512 vv[S];
#pragma GCC unroll 4
        for (int i = 0; i < S; ++i) vv[i] = _mm512_loadu_ps(f + 16 * i);
        key(vv);
      }
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int i = 0; i < S; ++i) _mm512_storeu_ps(r.out + (h0 + h) * d + j0 + 16 * i, acc[h][i]);
  }
}

template <bool kBf16>
void SpanValues(RowState& r, int64_t group, int64_t d, const void* v, int64_t bs,
                const Chunk* chunks, int64_t n) {
  // Tiles of 4 heads × 64 dims (16 chains, 4 value loads and 4 broadcasts per 16 FMAs), then
  // 32 and 16 dims, and 2 and 1 heads for what is left.
  const auto heads = [&](auto h, int64_t h0) {
    int64_t j0 = 0;
    for (; j0 + 64 <= d; j0 += 64) ValueTile<h(), 4, kBf16>(r, h0, j0, d, v, bs, chunks, n);
    if (j0 + 32 <= d) {
      ValueTile<h(), 2, kBf16>(r, h0, j0, d, v, bs, chunks, n);
      j0 += 32;
    }
    if (j0 < d) ValueTile<h(), 1, kBf16>(r, h0, j0, d, v, bs, chunks, n);
  };
  ForHeadTiles(group, heads);
}

template <bool kBf16>
void ScoreTiles(const float* qt, int64_t q_stride, float* const* s, int64_t nq, int64_t d,
                const void* keys, int64_t row, float scale, const Prefetch& pf) {
  int64_t i = 0;
  auto tile = [&](auto h) {
    if (i == 0) ScoreTile<h(), kBf16, true>(qt, q_stride, s, d, keys, row, scale, pf);
    else ScoreTile<h(), kBf16, false>(qt + i, q_stride, s + i, d, keys, row, scale, pf);
    i += h();
  };
  while (i + 12 <= nq) tile(std::integral_constant<int, 12>{});
  while (i + 8 <= nq) tile(std::integral_constant<int, 8>{});
  while (i + 4 <= nq) tile(std::integral_constant<int, 4>{});
  while (i + 2 <= nq) tile(std::integral_constant<int, 2>{});
  while (i < nq) tile(std::integral_constant<int, 1>{});
}

// H query vectors' scores against C chunks of 16 keys (ScoreTilesDotAvx512): H·C chains, each
// chunk's key vector of a dim pair one load of its row (KeyIndex: the pairs as vdpbf16ps takes
// them), each query pair broadcast once for all C chunks.
template <int H, int C, bool kPrefetch>
[[gnu::noinline]] void ScoreTileDot(const uint32_t* qp, float* const* s,
                                    int64_t d, const uint16_t* const* keys, int64_t row,
                                    float scale, const Prefetch* pf) {
  __m512 acc[H][C];
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) acc[h][c] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < d / 2; ++p, ++qp) {
    __m512i k[C];
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) {
      if constexpr (kPrefetch) RequestDims(pf[c], 2 * p);
      k[c] = _mm512_loadu_si512(keys[c] + p * row);
    }
#pragma GCC unroll 8
    for (int h = 0; h < H; ++h) {
      const __m512bh q = (__m512bh)_mm512_set1_epi32(static_cast<int>(qp[h * kQpStride]));
#pragma GCC unroll 4
      for (int c = 0; c < C; ++c) acc[h][c] = _mm512_dpbf16_ps(acc[h][c], q, (__m512bh)k[c]);
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
#pragma GCC unroll 8
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(s[h] + 16 * c, _mm512_mul_ps(acc[h][c], sc));
  }
}

// Tiles of 8 query vectors (16 chains with two chunks; 4 with four chunks), then 4, 2, 1; the
// first prefetches.
template <int C>
void ScoreTilesDot(const uint32_t* qp, float* const* s, int64_t nq, int64_t d,
                   const uint16_t* const* keys, int64_t row, float scale, const Prefetch* pf) {
  int64_t i = 0;
  auto tile = [&](auto h) {
    if (i == 0) ScoreTileDot<h(), C, true>(qp, s, d, keys, row, scale, pf);
    else ScoreTileDot<h(), C, false>(qp + i * kQpStride, s + i, d, keys, row, scale, pf);
    i += h();
  };
  if constexpr (C < 4) {
    while (i + 8 <= nq) tile(std::integral_constant<int, 8>{});
  }
  while (i + 4 <= nq) tile(std::integral_constant<int, 4>{});
  while (i + 2 <= nq) tile(std::integral_constant<int, 2>{});
  while (i < nq) tile(std::integral_constant<int, 1>{});
}

// o_h[j0, j0 + 16·S) = o_h · alpha_h + Σ_u P_h[u] · V[u] over the key pairs u of the row's n
// keys for H heads from h0, by bf16 dot products: P_h[u] = pp[h0 + h][u] (keys 2u, 2u + 1 as one
// bf16 pair), V[u] the pair row of the run that holds keys 2u, 2u + 1 (each dim's two values as
// one pair), an odd count's last with its high halves cleared. One chain per output element over
// the pairs in order. kTail: the last of the S vectors holds only 8 dims (d % 16 == 8).
template <int H, int S, bool kTail>
[[gnu::noinline]] void ValueTileDot(RowState& r, const uint32_t (*pp)[kSpan / 2], int64_t h0,
                                    int64_t j0, int64_t d, const ValueRun* runs, int64_t n) {
  const auto lanes = [](int i) -> __mmask16 { return kTail && i == S - 1 ? 0x00ff : 0xffff; };
  __m512 acc[H][S];
  LoadRescaled<H, S, kTail>(r, h0, j0, d, acc);
  const auto pair = [&](const uint32_t* row, int64_t u, auto half) {
    __m512i vv[S];
#pragma GCC unroll 4
    for (int i = 0; i < S; ++i) {
      vv[i] = kTail && i == S - 1 ? _mm512_maskz_loadu_epi32(lanes(i), row + j0 + 16 * i)
                                  : _mm512_loadu_si512(row + j0 + 16 * i);
      if constexpr (half()) vv[i] = _mm512_and_si512(vv[i], _mm512_set1_epi32(0xffff));
    }
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const __m512bh p = (__m512bh)_mm512_set1_epi32(static_cast<int>(pp[h0 + h][u]));
#pragma GCC unroll 4
      for (int i = 0; i < S; ++i) acc[h][i] = _mm512_dpbf16_ps(acc[h][i], p, (__m512bh)vv[i]);
    }
  };
  int64_t u = 0;  // the span's key pair
  for (int64_t o = 0; o < n; ++runs) {
    const int64_t nc = std::min(runs->n, n - o);
    const uint32_t* row = runs->rows;
    for (const int64_t end = u + nc / 2; u < end; ++u, row += d) pair(row, u, std::false_type{});
    if (nc % 2 != 0) pair(row, u++, std::true_type{});
    o += nc;
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int i = 0; i < S; ++i) {
      avx512::MaskStoreu(r.out + (h0 + h) * d + j0 + 16 * i, lanes(i), acc[h][i]);
    }
  }
}

// e^x for x ≤ 0 (and NaN) in about half of avx512::Exp's instructions, bit for bit avx2::Exp,
// which the AVX2 softmax update uses (checked over every non-positive float): a softmax's
// arguments e^(s − max) are never positive, so the clamp from above goes; x·log2 e is rounded
// to the integer n by one vroundscaleps (round to nearest even, as avx2::Exp's vroundps; the
// 1.5·2^23 shift of avx512::Exp, kept for the emulated build where SIMDe 0.7 got roundscale
// wrong, is contracted by GCC into an FMA that rounds x·log2 e only once, so it picks another n
// for 20 of those floats); and p·2^n is one vscalefps, which rounds p·2^n once, as the two exact
// power-of-two products do (the first stays normal, the second rounds the exact product,
// subnormal or not). The softmax update had become the largest part of prefill attention
// (perf: 32% at 256 rows over 2048 keys) once P·V took dot products.
inline __m512 ExpNonPositive(__m512 x) {
  namespace c = exp_poly;
  const __m512 lo = _mm512_set1_ps(c::kLo);
  const __mmask16 too_small = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_max_ps(x, lo);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(c::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 p = avx512::ExpMantissa(x, n);
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~too_small), p, n);
}

// The first half of the span's softmax update: each head's new running max m over its n scores
// of the span, and alpha = e^(m_old − m_new), all 16 slots at once (the AVX2 kernel's 8 at a
// time; slots past the group are never read). A max is exact in any order: the whole vectors
// of scores go to two chains without masks, after the partial one (alone, 8 heads × 128 keys:
// 201 cycles with a mask per vector, 111 so).
[[gnu::always_inline]] inline void UpdateRunningMax(RowState* r, int64_t group, int64_t n) {
  alignas(64) float m_span[kMaxGroup];
  std::fill(m_span, m_span + kMaxGroup, -INFINITY);
  const int64_t whole = n / 16 * 16;
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  for (int64_t g = 0; g < group; ++g) {
    const float* s = r->s[g];
    __m512 a = _mm512_mask_loadu_ps(neg_inf, avx512::FirstLanes(n - whole), s + whole);
    __m512 b = neg_inf;
    int64_t t = 0;
    for (; t + 32 <= whole; t += 32) {
      a = _mm512_max_ps(a, _mm512_loadu_ps(s + t));
      b = _mm512_max_ps(b, _mm512_loadu_ps(s + t + 16));
    }
    if (t < whole) a = _mm512_max_ps(a, _mm512_loadu_ps(s + t));
    m_span[g] = _mm512_reduce_max_ps(_mm512_max_ps(a, b));
  }
  const __m512 m_old = _mm512_loadu_ps(r->m);
  const __m512 m_new = _mm512_max_ps(m_old, _mm512_load_ps(m_span));
  _mm512_storeu_ps(r->alpha, ExpNonPositive(_mm512_sub_ps(m_old, m_new)));
  _mm512_storeu_ps(r->m, m_new);
}

}  // namespace

void SpanValuesDotAvx512(RowState& r, int64_t group, int64_t d, const ValueRun* runs,
                         int64_t n) {
  const uint32_t(*pp)[kSpan / 2] = r.p_pairs;
  // Tiles of 4 heads × 64 dims (16 chains: 4 value loads and 4 broadcasts per 16 dot
  // products), then 32 and 16 dims (the last maybe 8), and 2 and 1 heads for what is left.
  const auto heads = [&](auto h, int64_t h0) {
    int64_t j0 = 0;
    for (; j0 + 64 <= d; j0 += 64) ValueTileDot<h(), 4, false>(r, pp, h0, j0, d, runs, n);
    if (j0 + 32 <= d) {
      ValueTileDot<h(), 2, false>(r, pp, h0, j0, d, runs, n);
      j0 += 32;
    }
    if (j0 + 16 <= d) {
      ValueTileDot<h(), 1, false>(r, pp, h0, j0, d, runs, n);
      j0 += 16;
    }
    if (j0 < d) ValueTileDot<h(), 1, true>(r, pp, h0, j0, d, runs, n);
  };
  ForHeadTiles(group, heads);
}

void SpanSoftmaxAvx512(RowState* r, int64_t group, int64_t n, bool round_p) {
  UpdateRunningMax(r, group, n);
  const auto valid = [n](int64_t t) { return avx512::FirstLanes(n - t); };
  for (int64_t g = 0; g < group; ++g) {
    const __m512 m = _mm512_set1_ps(r->m[g]);
    __m256 sum = _mm256_setzero_ps();
    for (int64_t t = 0; t < n; t += 16) {
      const __m512 e = _mm512_maskz_mov_ps(
          valid(t), ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(r->s[g] + t), m)));
      _mm512_storeu_ps(r->s[g] + t, round_p ? avx512::RoundBf16(e) : e);
      // The AVX2 kernel's order: its vectors of 8 scores one after the other.
      sum = _mm256_add_ps(sum, _mm512_castps512_ps256(e));
      const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1));
      if (t + 8 < n) sum = _mm256_add_ps(sum, high);
    }
    r->l[g] = r->l[g] * r->alpha[g] + avx2::HSum(sum);
  }
}

void SpanSoftmaxDotAvx512(RowState* r, int64_t group, int64_t n) {
  UpdateRunningMax(r, group, n);
  const auto valid = [n](int64_t t) { return avx512::FirstLanes(n - t); };
  // 32 keys a step: two vectors of exps, one conversion into their 16 pairs. Past n the exps are
  // 0 (so an odd n's last pair has a zero partner): masks only after the last whole 32 keys
  // (alone, 8 heads × 128 keys: 868 cycles with a mask on every vector, 711 so; with the max
  // above, kernels_bench prefill 512 over 512 and 256 over 2048 keys 0.97–0.99× the time).
  const int64_t whole = n / 32 * 32;
  for (int64_t g = 0; g < group; ++g) {
    const float* s = r->s[g];
    const __m512 m = _mm512_set1_ps(r->m[g]);
    __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
    const auto step = [&](int64_t t, __mmask16 lanes0, __mmask16 lanes1) {
      const __m512 e0 = _mm512_maskz_mov_ps(
          lanes0, ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(s + t), m)));
      const __m512 e1 = _mm512_maskz_mov_ps(
          lanes1, ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(s + t + 16), m)));
      sum0 = _mm512_add_ps(sum0, e0);
      sum1 = _mm512_add_ps(sum1, e1);
      _mm512_store_si512(r->p_pairs[g] + t / 2, (__m512i)_mm512_cvtne2ps_pbh(e1, e0));
    };
    for (int64_t t = 0; t < whole; t += 32) step(t, 0xffff, 0xffff);
    if (whole < n) step(whole, valid(whole), valid(whole + 16));
    r->l[g] = r->l[g] * r->alpha[g] + _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1));
  }
}

void ScoreTilesDotAvx512(const uint32_t* qp, float* const* s, int64_t nq,
                         int64_t d, const uint16_t* const* keys, int64_t n_chunks, int64_t row,
                         float scale, const Prefetch* pf) {
  const auto run = n_chunks == 4   ? ScoreTilesDot<4>
                   : n_chunks == 2 ? ScoreTilesDot<2>
                                   : ScoreTilesDot<1>;
  run(qp, s, nq, d, keys, row, scale, pf);
}

void ScoreTilesAvx512(const float* qt, int64_t q_stride, float* const* s, int64_t nq, int64_t d,
                      const void* keys, int64_t row, bool bf16, float scale, const Prefetch& pf) {
  if (bf16) return ScoreTiles<true>(qt, q_stride, s, nq, d, keys, row, scale, pf);
  ScoreTiles<false>(qt, q_stride, s, nq, d, keys, row, scale, pf);
}

void SpanValuesAvx512(RowState& r, int64_t group, int64_t d, const void* v, bool bf16,
                      int64_t block_size, const Chunk* chunks, int64_t n) {
  if (bf16) return SpanValues<true>(r, group, d, v, block_size, chunks, n);
  SpanValues<false>(r, group, d, v, block_size, chunks, n);
}

}  // namespace cpm::kernels::attn

namespace cpm::kernels {

bool HoldsBf16OnlyAvx512(const float* x, int64_t n) {
  __m512i low = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) low = _mm512_or_si512(low, _mm512_loadu_si512(x + i));
  low = _mm512_or_si512(low, _mm512_maskz_loadu_epi32(avx512::FirstLanes(n - i), x + i));
  return _mm512_test_epi32_mask(low, _mm512_set1_epi32(0xffff)) == 0;
}

}  // namespace cpm::kernels
