// Paged attention's dot-product scores on AMX tiles (attention_tiles.h: ScoreTilesAmx): the
// query vectors' bf16 pairs (kQpStride apart) are tile rows as they are, and a whole chunk's 16
// keys, their dims paired by PackKeyPairsAvx512, are a column tile per 16 dim pairs. Two tiles
// of vectors × two chunks at a time (tiles 0-3 the sums, 4 and 5 the vectors, 6 and 7 the
// chunks; tiles a call has no vectors or chunk for are left out), in ScoreTileConfig's shapes,
// which the caller loads: a decode row's GQA heads fill its vector tiles (8 rows for MiniCPM4),
// which then do no work for rows that hold nothing. Built with CPM_AVX512_FLAGS plus -mamx-tile
// -mamx-bf16; called only where UseAmxScores().
// kernels_bench BM_PagedAttention, 2 vCPUs of a Xeon with AMX, 2 interleaved rounds against
// CPM_AMX=0 (ms): MiniCPM4's heads, a 512-token prefill 3.36-3.55 -> 2.30-2.48, 256 tokens at
// depth 2048 10.9-11.8 -> 7.2-7.5; decode, one sequence over 1024 and 8192 keys 1.2x and
// 1.07-1.15x faster, 16 sequences level to 5% slower; V-4.6's 256-dim heads, prefill 19.9-21.0
// -> 14.2-14.3, decode 14-17% slower (4 vectors a row: its dot-product tiles took four chunks
// a call). cpmserve bench at MiniCPM4's dimensions: pp512 +9-20%, pp2048 +18-23% (1047-1079 ->
// 1271-1293 tokens/s), decode at depth 1024 within the noise.
#include <immintrin.h>

#include <algorithm>

#include "kernels/amx.h"
#include "kernels/attention_tiles.h"

namespace cpm::kernels::attn {

void ScoreTilesAmx(const uint32_t* qp, float* const* s, int64_t nq, int64_t d,
                   const uint16_t* const* keys, int64_t n_chunks, int64_t row, float scale,
                   const Prefetch* pf) {
  alignas(64) thread_local uint32_t pairs[kMaxTileChunks][kMaxHeadDim / 2 * kChunk];
  for (int64_t c = 0; c < n_chunks; ++c) PackKeyPairsAvx512(keys[c], row, d, pf[c], pairs[c]);
  alignas(64) float sums[32][32];
  const int64_t qs = kQpStride * static_cast<int64_t>(sizeof(uint32_t));
  const __m512 sc = _mm512_set1_ps(scale);
  for (int64_t v0 = 0; v0 < nq; v0 += 32) {
    const char* a0 = reinterpret_cast<const char*>(qp + v0 * kQpStride);
    const bool two_rows = nq > v0 + 16;  // a second tile of vectors
    for (int64_t c0 = 0; c0 < n_chunks; c0 += 2) {
      const char* b0 = reinterpret_cast<const char*>(pairs[c0]);
      const char* b1 = reinterpret_cast<const char*>(pairs[c0 + 1]);
      const bool two_chunks = c0 + 1 < n_chunks;
      _tile_zero(0);
      if (two_chunks) _tile_zero(1);
      if (two_rows) _tile_zero(2);
      if (two_rows && two_chunks) _tile_zero(3);
      for (int64_t p = 0; p < d / 2; p += 16) {  // 16 dim pairs a step: 64 bytes of each
        _tile_loadd(4, a0 + p * 4, qs);
        _tile_loadd(6, b0 + p * 64, 64);
        _tile_dpbf16ps(0, 4, 6);
        if (two_chunks) {
          _tile_loadd(7, b1 + p * 64, 64);
          _tile_dpbf16ps(1, 4, 7);
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

}  // namespace cpm::kernels::attn
