// Paged attention's two products on AMX tiles (attention_tiles.h), for the rows with bf16
// dot-product scores where UseAmxScores(d).
//
// Scores (ScoreTilesAmx): the query vectors' bf16 pairs (kQpStride apart) are tile rows as they
// are, and a whole chunk's 16 keys are a column tile per 16 dim pairs, loaded from the cache as
// they lie (a bf16 cache keeps each key's dims in pairs: KeyIndex). Two tiles of vectors × two
// chunks at a time (tiles 0-3 the sums, 4 and 5 the vectors, 6 and 7 the chunks; tiles a call has
// no vectors or chunk for are left out), in TileConfig's shapes, which the caller loads: a decode
// row's GQA heads fill its vector tiles (8 rows for MiniCPM4), which then do no work for rows that
// hold nothing.
// kernels_bench BM_PagedAttention, 2 vCPUs of a Xeon with AMX, 2 interleaved rounds against
// CPM_AMX=0 (ms): MiniCPM4's heads, a 512-token prefill 3.36-3.55 -> 2.30-2.48, 256 tokens at
// depth 2048 10.9-11.8 -> 7.2-7.5; decode, one sequence over 1024 and 8192 keys 1.2x and
// 1.07-1.15x faster, 16 sequences level to 5% slower; V-4.6's 256-dim heads, prefill 19.9-21.0
// -> 14.2-14.3, decode 14-17% slower (4 vectors a row: its dot-product tiles took four chunks
// a call). cpmserve bench at MiniCPM4's dimensions: pp512 +9-20%, pp2048 +18-23% (1047-1079 ->
// 1271-1293 tokens/s), decode at depth 1024 within the noise.
//
// P·V (SpanValuesAmx): the span's P, already bf16 pairs of keys in p_pairs, is tile A as it
// lies (a row per head), the values' pairs tile B (16 key pairs × 16 dims, copied from the
// cache's pair rows: CopyValuePairs), the outputs the sums, 4 column tiles at a time, loaded
// rescaled and stored back once per span. Decode rows take it too. When first made, with the
// values packed into pairs from a row per key (the cache's layout then), kernels_bench
// against the AMX scores with AVX-512 P·V, 2 interleaved rounds (ms): a 512-token prefill
// 3.01-3.06 -> 1.76-1.77, 256 tokens at depth 2048 10.0-10.5 -> 5.2-5.3, V-4.6's heads 17.6-18.6
// -> 8.4-9.5; decode, one sequence over 1024 / 8192 keys 0.029-0.031 -> 0.021-0.022 /
// 0.243-0.255 -> 0.182-0.186, 16 sequences 0.51-0.56 -> 0.42-0.44 / 4.19 -> 3.30-3.35, V-4.6's
// 0.65-0.72 -> 0.65-0.68 and 1.38 -> 1.21-1.30.
//
// Built with CPM_AVX512_FLAGS plus -mamx-tile -mamx-bf16.
#include <immintrin.h>

#include <algorithm>

#include "kernels/amx.h"
#include "kernels/attention_tiles.h"

namespace cpm::kernels::attn {

void ScoreTilesAmx(const uint32_t* qp, float* const* s, int64_t nq, int64_t d,
                   const uint16_t* const* keys, int64_t n_chunks, int64_t row, float scale,
                   const Prefetch* pf) {
  alignas(64) float sums[32][32];
  const int64_t qs = kQpStride * static_cast<int64_t>(sizeof(uint32_t));
  const int64_t ks = row * static_cast<int64_t>(sizeof(uint16_t));  // a chunk's pair rows
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t v0 = 0; v0 < nq; v0 += 32) {
    const char* a0 = reinterpret_cast<const char*>(qp + v0 * kQpStride);
    const bool two_rows = nq > v0 + 16;  // a second tile of vectors
    for (int64_t c0 = 0; c0 < n_chunks; c0 += 2) {
      const bool two_chunks = c0 + 1 < n_chunks;
      const char* b0 = reinterpret_cast<const char*>(keys[c0]);
      const char* b1 = two_chunks ? reinterpret_cast<const char*>(keys[c0 + 1]) : b0;
      // Chunk c's requests for the step's pairs [p + i0, p + i1), made once (the first tile
      // of vectors) and spread between the tile instructions.
      const auto request = [&](int64_t c, int64_t p, int64_t i0, int64_t i1) {
        if (v0 > 0) return;
        for (int64_t i = i0; i < i1; ++i) RequestDims(pf[c], 2 * (p + i));
      };
      _tile_zero(0);
      if (two_chunks) _tile_zero(1);
      if (two_rows) _tile_zero(2);
      if (two_rows && two_chunks) _tile_zero(3);
      for (int64_t p = 0; p < d / 2; p += 16) {  // 16 dim pairs a step: 64 bytes of each
        _tile_loadd(4, a0 + p * 4, qs);
        request(c0, p, 0, 8);
        _tile_loadd(6, b0 + p * ks, ks);
        _tile_dpbf16ps(0, 4, 6);
        request(c0, p, 8, 16);
        if (two_chunks) {
          _tile_loadd(7, b1 + p * ks, ks);
          _tile_dpbf16ps(1, 4, 7);
          request(c0 + 1, p, 0, 16);
        }
        if (two_rows) {
          _tile_loadd(5, a0 + 16 * qs + p * 4, qs);
          _tile_dpbf16ps(2, 5, 6);
          if (two_chunks) _tile_dpbf16ps(3, 5, 7);
        }
      }
      _tile_stored(0, &sums[0][0], 128);
      if (two_chunks) _tile_stored(1, &sums[0][16], 128);
      if (two_rows) _tile_stored(2, &sums[16][0], 128);
      if (two_rows && two_chunks) _tile_stored(3, &sums[16][16], 128);
      const int64_t vectors = std::min<int64_t>(32, nq - v0);
      const int64_t chunks = std::min<int64_t>(2, n_chunks - c0);
      for (int64_t i = 0; i < vectors; ++i) {
        for (int64_t c = 0; c < chunks; ++c) {
          _mm512_storeu_ps(s[v0 + i] + 16 * (c0 + c),
                           _mm512_mul_ps(_mm512_load_ps(&sums[i][16 * c]), sc));
        }
      }
    }
  }
}

namespace {

// Tiles 0-3 (the sums of 4 column tiles of 16 dims) from/to o + 16t, rows d floats apart.
template <int T>
inline void LoadOutputs(const float* o, int64_t os) {
  _tile_loadd(0, o, os);
  if constexpr (T > 1) _tile_loadd(1, o + 16, os);
  if constexpr (T > 2) _tile_loadd(2, o + 32, os);
  if constexpr (T > 3) _tile_loadd(3, o + 48, os);
}
template <int T>
inline void StoreOutputs(float* o, int64_t os) {
  _tile_stored(0, o, os);
  if constexpr (T > 1) _tile_stored(1, o + 16, os);
  if constexpr (T > 2) _tile_stored(2, o + 32, os);
  if constexpr (T > 3) _tile_stored(3, o + 48, os);
}

// Outputs [j0, j0 + 16T) of every head over `steps` steps of 16 key pairs: P's pairs (tile 4,
// a row per head) against the values' pairs (tiles 6 and 7 in turn, 16 pair rows of 16 dims).
template <int T>
void ValueColumns(RowState& r, int64_t d, const uint32_t* vp, int64_t j0, int64_t steps) {
  const int64_t os = d * static_cast<int64_t>(sizeof(float));
  const int64_t vs = d * static_cast<int64_t>(sizeof(uint32_t));  // a pair row
  const int64_t ps = static_cast<int64_t>(sizeof r.p_pairs[0]);
  float* o = r.out + j0;
  if (r.fresh) {
    _tile_zero(0);
    if constexpr (T > 1) _tile_zero(1);
    if constexpr (T > 2) _tile_zero(2);
    if constexpr (T > 3) _tile_zero(3);
  } else {
    LoadOutputs<T>(o, os);
  }
  for (int64_t s = 0; s < steps; ++s) {
    _tile_loadd(4, &r.p_pairs[0][16 * s], ps);
    const uint32_t* v = vp + 16 * s * d + j0;
    _tile_loadd(6, v, vs);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (T > 1) {
      _tile_loadd(7, v + 16, vs);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (T > 2) {
      _tile_loadd(6, v + 32, vs);
      _tile_dpbf16ps(2, 4, 6);
    }
    if constexpr (T > 3) {
      _tile_loadd(7, v + 48, vs);
      _tile_dpbf16ps(3, 4, 7);
    }
  }
  StoreOutputs<T>(o, os);
}

}  // namespace

// A row's first span starts its sums from zeroed tiles rather than rescaling and tile-loading
// BeginRow's zeros (0 · alpha = +0 all the same): a tile load waits for the vector stores made
// just before it (perf put most of this function's samples on its first product; P's and the
// values' tiles, stored just before too, keep most of them there still).
// kernels_bench BM_PagedAttention, 7 interleaved rounds (medians): 16 sequences over 64 / 128
// keys 0.97-0.98x the time, a 512-token prefill 0.98x; in cpmserve bench pp512's attention
// 0.98x, batch 16's level.
void SpanValuesAmx(RowState& r, int64_t group, int64_t d, const uint32_t* vp, int64_t n) {
  // o_h · alpha_h first, as the AVX-512 tiles' accumulators start.
  for (int64_t g = 0; !r.fresh && g < group; ++g) {
    const __m512 a = _mm512_set1_ps(r.alpha[g]);
    float* o = r.out + g * d;
    for (int64_t j = 0; j < d; j += 16) {
      _mm512_storeu_ps(o + j, _mm512_mul_ps(_mm512_loadu_ps(o + j), a));
    }
  }
  const int64_t steps = (n + 31) / 32;
  int64_t j0 = 0;
  for (; j0 + 64 <= d; j0 += 64) ValueColumns<4>(r, d, vp, j0, steps);
  if (j0 < d) ValueColumns<2>(r, d, vp, j0, steps);  // d % 32 == 0: 32 dims left
  r.fresh = false;
}

}  // namespace cpm::kernels::attn
