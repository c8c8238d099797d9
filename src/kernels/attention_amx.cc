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
// cache's pair rows: CopyValuePairs), the outputs the sums, loaded rescaled and stored back
// once per span. Decode rows take it too. When first made, with the
// values packed into pairs from a row per key (the cache's layout then), kernels_bench
// against the AMX scores with AVX-512 P·V, 2 interleaved rounds (ms): a 512-token prefill
// 3.01-3.06 -> 1.76-1.77, 256 tokens at depth 2048 10.0-10.5 -> 5.2-5.3, V-4.6's heads 17.6-18.6
// -> 8.4-9.5; decode, one sequence over 1024 / 8192 keys 0.029-0.031 -> 0.021-0.022 /
// 0.243-0.255 -> 0.182-0.186, 16 sequences 0.51-0.56 -> 0.42-0.44 / 4.19 -> 3.30-3.35, V-4.6's
// 0.65-0.72 -> 0.65-0.68 and 1.38 -> 1.21-1.30.
// A prefill's rows (up to 8 a call) share the tiles: after every row's softmax update of the
// span, the heads of the rows with as many steps are one run of tile rows, two row tiles (32
// heads, 4 MiniCPM4 rows) × two column tiles at a time, where each row took its own 8-row tile
// (half a tile's rows, four chains waiting on each other's latency, and every value tile loaded
// again for each row). kernels_bench, 5 interleaved rounds (min / median): a 512-token prefill
// 0.71 / 0.69× the time, 256 tokens at depth 2048 0.73 / 0.74×, V-4.6's heads 0.72 / 0.75×;
// decode level. cpmserve bench pp512, 3 alternated runs: attention 15.0-15.8% -> 12.3-12.9% of
// the prompt's time, tokens/s 1.02-1.11×.
//
// Built with CPM_AVX512_FLAGS plus -mamx-tile -mamx-bf16.
#include <immintrin.h>

#include <algorithm>
#include <array>

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

// Where one span's P·V of a run of P rows (a row's heads, several rows' one after another) reads
// and writes: P's pairs (rows `ps` bytes apart), the outputs (rows `os` bytes apart), the
// values' pairs (`vs` bytes a pair row), d, the steps of 16 key pairs, and whether the sums
// start from zero.
struct PvRows {
  const uint32_t* p;
  int64_t ps;
  float* o;
  int64_t os;
  const uint32_t* vp;
  int64_t vs, d, steps;
  bool fresh;
};

// Tiles 0-3 (the sums of 4 column tiles of 16 dims) from/to o + 16t, rows os bytes apart.
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

inline void ZeroOutputs(int tiles) {
  _tile_zero(0);
  if (tiles > 1) _tile_zero(1);
  if (tiles > 2) _tile_zero(2);
  if (tiles > 3) _tile_zero(3);
}

// Outputs [j0, j0 + 16T) of ≤ 16 P rows (tile 4) against the values' pairs (tiles 6 and 7 in
// turn, 16 pair rows of 16 dims): one row tile, T column tiles.
template <int T>
void ValueColumns(const PvRows& v, int64_t j0) {
  float* o = v.o + j0;
  if (v.fresh) ZeroOutputs(T);
  else LoadOutputs<T>(o, v.os);
  for (int64_t s = 0; s < v.steps; ++s) {
    _tile_loadd(4, v.p + 16 * s, v.ps);
    const uint32_t* b = v.vp + 16 * s * v.d + j0;
    _tile_loadd(6, b, v.vs);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (T > 1) {
      _tile_loadd(7, b + 16, v.vs);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (T > 2) {
      _tile_loadd(6, b + 32, v.vs);
      _tile_dpbf16ps(2, 4, 6);
    }
    if constexpr (T > 3) {
      _tile_loadd(7, b + 48, v.vs);
      _tile_dpbf16ps(3, 4, 7);
    }
  }
  StoreOutputs<T>(o, v.os);
}

// Outputs [j0, j0 + 32) of 16 + ≤ 16 P rows (tiles 4 and 5) against two column tiles (6, 7):
// tiles 0, 1 the first 16 rows' sums, 2, 3 the rest's. Four independent chains of full tiles a
// step, where one row tile's four chains of its heads waited on each other's latency (perf: two
// thirds of the one-tile loop's samples on its first product).
void ValueBlock(const PvRows& v, int64_t j0) {
  float* o0 = v.o + j0;
  float* o1 = reinterpret_cast<float*>(reinterpret_cast<char*>(o0) + 16 * v.os);
  const uint32_t* p1 = v.p + 16 * (v.ps / static_cast<int64_t>(sizeof(uint32_t)));
  if (v.fresh) {
    ZeroOutputs(4);
  } else {
    LoadOutputs<2>(o0, v.os);
    _tile_loadd(2, o1, v.os);
    _tile_loadd(3, o1 + 16, v.os);
  }
  for (int64_t s = 0; s < v.steps; ++s) {
    const uint32_t* b = v.vp + 16 * s * v.d + j0;
    _tile_loadd(4, v.p + 16 * s, v.ps);
    _tile_loadd(6, b, v.vs);
    _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, b + 16, v.vs);
    _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(5, p1 + 16 * s, v.ps);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  StoreOutputs<2>(o0, v.os);
  _tile_stored(2, o1, v.os);
  _tile_stored(3, o1 + 16, v.os);
}

// ValueBlock's shapes: tiles 0, 1, 4 16 rows, 2, 3, 5 `rows1` (1-16), 6, 7 16 pair rows. At 16,
// TileConfig(16): the score tiles' shapes of a prefill's rows, so no load between the two.
constexpr std::array<AmxTileConfig, 17> kBlockTiles = [] {
  std::array<AmxTileConfig, 17> t{};
  for (int rows1 = 1; rows1 <= 16; ++rows1) {
    t[rows1] = TilesOf64Bytes(16);
    for (int i : {2, 3, 5}) t[rows1].rows[i] = static_cast<uint8_t>(rows1);
  }
  return t;
}();

// The run's P rows: pairs of row tiles, then ≤ 16 rows by the one-tile loop.
void RunValues(PvRows v, int64_t p_rows) {
  const int64_t p_step = v.ps / static_cast<int64_t>(sizeof(uint32_t));
  const int64_t o_step = v.os / static_cast<int64_t>(sizeof(float));
  for (; p_rows > 16; p_rows -= 32) {
    UseTileConfig(kBlockTiles[std::min<int64_t>(p_rows - 16, 16)]);
    for (int64_t j0 = 0; j0 < v.d; j0 += 32) ValueBlock(v, j0);
    v.p += 32 * p_step;
    v.o += 32 * o_step;
  }
  if (p_rows <= 0) return;
  UseTileConfig(TileConfig(p_rows));
  int64_t j0 = 0;
  for (; j0 + 64 <= v.d; j0 += 64) ValueColumns<4>(v, j0);
  if (j0 < v.d) ValueColumns<2>(v, j0);  // d % 32 == 0: 32 dims left
}

}  // namespace

// A row's first span starts its sums from zeroed tiles rather than rescaling and tile-loading
// BeginRow's zeros (0 · alpha = +0 all the same): a tile load waits for the vector stores made
// just before it (perf put most of this function's samples on its first product).
// kernels_bench BM_PagedAttention, 7 interleaved rounds (medians): 16 sequences over 64 / 128
// keys 0.97-0.98x the time, a 512-token prefill 0.98x; in cpmserve bench pp512's attention
// 0.98x, batch 16's level.
void SpanValuesAmx(RowState* st, int64_t rows, int64_t group, int64_t d, const uint32_t* vp,
                   int64_t p0, int64_t p1) {
  const auto keys = [&](int64_t r) { return std::min(p1, st[r].n_keys) - p0; };
  for (int64_t r = 0; r < rows;) {
    const int64_t n = keys(r);
    if (n <= 0) {
      ++r;
      continue;
    }
    // The run [r, e): rows with as many steps and as fresh.
    const int64_t steps = (n + 31) / 32;
    int64_t e = r + 1;
    while (e < rows && keys(e) > 0 && (keys(e) + 31) / 32 == steps &&
           st[e].fresh == st[r].fresh) {
      ++e;
    }
    // o_h · alpha_h first, as the AVX-512 tiles' accumulators start.
    for (int64_t i = r; i < e && !st[r].fresh; ++i) {
      for (int64_t g = 0; g < group; ++g) {
        const __m512 a = _mm512_set1_ps(st[i].alpha[g]);
        float* o = st[i].out + g * d;
        for (int64_t j = 0; j < d; j += 16) {
          _mm512_storeu_ps(o + j, _mm512_mul_ps(_mm512_loadu_ps(o + j), a));
        }
      }
    }
    RunValues({&st[r].p_pairs[0][0], static_cast<int64_t>(sizeof st[r].p_pairs[0]), st[r].out,
               d * static_cast<int64_t>(sizeof(float)), vp,
               d * static_cast<int64_t>(sizeof(uint32_t)), d, steps, st[r].fresh},
              (e - r) * group);
    for (int64_t i = r; i < e; ++i) st[i].fresh = false;
    r = e;
  }
}

}  // namespace cpm::kernels::attn
