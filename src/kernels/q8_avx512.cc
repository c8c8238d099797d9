// Q8_0 matmul on AVX-512 VNNI, and the activations' quantization on AVX-512 (q8.h).
// A register tile is rows × NP panels of 16 columns: per step of 4 inputs, each panel's 64
// bytes of weights (q + 128, unsigned) meet a broadcast of the row's 4 signed input bytes in one
// vpdpbusd, which sums 4 products per column into an int32 lane; a block's 8 steps start from
// −128·Σq_x (the unsigned offset's share, the same for every column), so the lanes end as the
// exact block dot products, then scaled and added in f32 (fma) as the scalar kernel does.
// Compiled with the AVX-512 flags (VNNI included); only called where the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_impl.h"
#include "kernels/prefetch.h"
#include "kernels/q8.h"
#include "kernels/simd_avx512.h"

namespace cpm::kernels {
namespace {

// Bytes of weights requested ahead per thread, split over a tile's panel streams (as the bf16
// decode tiles, matmul_avx512.cc). Half as far for tiles of 1-2 rows: timed call by call
// against 8 KiB on the same weights (Zen 5, 2 threads, MiniCPM4's gate and head shapes), m = 1
// and 2 took 0.97-0.98x the time, while m = 4 took 1.03x; with the scales' prefetch below, the
// model's batch-1 decode 1.01-1.12x tokens/s in 4 interleaved rounds.
constexpr int64_t PrefetchBytes(int rows) { return rows <= 2 ? 4096 : 8192; }
constexpr int kSteps = kQ8Block / kQ8GroupK;  // vpdpbusd steps per block

struct TileArgs {
  const Q8X* x;
  int64_t row0;             // the tile's first row of x
  const uint8_t* panel;     // the tile's first panel
  const uint16_t* scales;   // its scales
  int64_t panel_bytes;      // between consecutive panels
  int64_t scale_stride;     // elements between consecutive panels' scales
  int64_t blocks;
  float out_scale;
  float* y;
  int64_t ys;
  bool round;
};

int32_t Load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <int MR, int NP>
void Tile(const TileArgs& a, int64_t n_valid) {
  const Q8X& x = *a.x;
  const int64_t ahead = PrefetchBytes(MR) / NP;
  __m512 acc[MR][NP];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) acc[r][q] = _mm512_setzero_ps();
  }
  const int8_t* xr[MR];
  const float* dr[MR];
  const int32_t* cr[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
    xr[r] = x.q + (a.row0 + r) * x.q_stride;
    dr[r] = x.d + (a.row0 + r) * x.blocks;
    cr[r] = x.corr + (a.row0 + r) * x.blocks;
  }
  for (int64_t b = 0; b < a.blocks; ++b) {
    __m512i dot[MR][NP];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512i c = _mm512_set1_epi32(cr[r][b]);
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) dot[r][q] = c;
    }
    const uint8_t* block = a.panel + b * kQ8PanelBlockBytes;
#pragma GCC unroll 8
    for (int s = 0; s < kSteps; ++s) {
      __m512i w[NP];
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) {
        const uint8_t* p = block + q * a.panel_bytes + s * 64;
        PrefetchL1(reinterpret_cast<const char*>(p) + ahead);
        w[q] = _mm512_loadu_si512(p);
      }
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) {
        const __m512i xb = _mm512_set1_epi32(Load4(xr[r] + b * kQ8Block + s * kQ8GroupK));
#pragma GCC unroll 4
        for (int q = 0; q < NP; ++q) dot[r][q] = _mm512_dpbusd_epi32(dot[r][q], w[q], xb);
      }
    }
    __m512 sw[NP];
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      const uint16_t* sp = a.scales + q * a.scale_stride + b * kQ8PanelWidth;
      // One request per line: a 64-byte line holds two blocks' 16 scales (m = 1: 0.98x).
      if (b % 2 == 0) PrefetchL1(reinterpret_cast<const char*>(sp) + ahead / 16);
      sw[q] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sp)));
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const __m512 dx = _mm512_set1_ps(dr[r][b]);
#pragma GCC unroll 4
      for (int q = 0; q < NP; ++q) {
        acc[r][q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][q]), _mm512_mul_ps(sw[q], dx),
                                    acc[r][q]);
      }
    }
  }
  const __m512 scale = _mm512_set1_ps(a.out_scale);
  const __mmask16 valid = avx512::FirstLanes(n_valid);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int q = 0; q < NP; ++q) {
      __m512 v = _mm512_mul_ps(acc[r][q], scale);
      if (a.round) v = avx512::RoundBf16(v);
      float* yp = a.y + r * a.ys + q * kQ8PanelWidth;
      if (NP == 1) {
        avx512::MaskStoreu(yp, valid, v);
      } else {
        _mm512_storeu_ps(yp, v);
      }
    }
  }
}

// All panels [0, panels) of the task for MR rows: NP at a time while whole, then singly.
template <int MR>
void RowTile(TileArgs a, int64_t panels, int64_t n_valid_last) {
  constexpr int NP = Q8PanelsPerTile(MR);
  int64_t q = 0;
  const auto advance = [&](int64_t by) {
    a.panel += by * a.panel_bytes;
    a.scales += by * a.scale_stride;
    a.y += by * kQ8PanelWidth;
  };
  for (; q + NP <= panels && (q + NP < panels || n_valid_last == kQ8PanelWidth); q += NP) {
    Tile<MR, NP>(a, kQ8PanelWidth);
    advance(NP);
  }
  for (; q < panels; ++q) {
    Tile<MR, 1>(a, q + 1 == panels ? n_valid_last : kQ8PanelWidth);
    advance(1);
  }
}

void RunRowTile(int64_t rows, const TileArgs& a, int64_t panels, int64_t n_valid_last) {
  switch (rows) {
    case 1: return RowTile<1>(a, panels, n_valid_last);
    case 2: return RowTile<2>(a, panels, n_valid_last);
    case 3: return RowTile<3>(a, panels, n_valid_last);
    case 4: return RowTile<4>(a, panels, n_valid_last);
    case 5: return RowTile<5>(a, panels, n_valid_last);
    case 6: return RowTile<6>(a, panels, n_valid_last);
    case 7: return RowTile<7>(a, panels, n_valid_last);
    default: return RowTile<8>(a, panels, n_valid_last);
  }
}

}  // namespace

// Rows in tiles of ≤ 8 (balanced: 12 rows are 6 + 6), each over all the task's panels. A
// prefill's tiles reread the task's panels from L2 (16 KiB per panel at k = 1024).
void MatMulPanelsQ8Vnni(const Q8X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                        int64_t panel_end, float* y, int64_t y_stride, Round round) {
  const int64_t panels = panel_end - panel_begin;
  const int64_t n_valid_last =
      std::min<int64_t>(kQ8PanelWidth, pw.n - (panel_end - 1) * kQ8PanelWidth);
  const int64_t tiles = (m + kQ8MaxTileRows - 1) / kQ8MaxTileRows;
  TileArgs a{&x,
             0,
             pw.data.as<uint8_t>() + panel_begin * pw.panel_elems,
             pw.scales.as<uint16_t>() + panel_begin * pw.num_groups * kQ8PanelWidth,
             pw.panel_elems,
             pw.num_groups * kQ8PanelWidth,
             pw.num_groups,
             pw.out_scale,
             y,
             y_stride,
             round == Round::kBf16};
  for (int64_t t = 0, r = 0; t < tiles; ++t) {
    const int64_t rows = (m - r + (tiles - t) - 1) / (tiles - t);
    a.row0 = r;
    a.y = y + r * y_stride;
    RunRowTile(rows, a, panels, n_valid_last);
    r += rows;
  }
}

// Per block: amax over two vectors (the block's tail masked off), then q = cvtps2dq(x / d's
// reciprocal) saturated to int8 (vpmovsdb): the scalar code's operations, in the same order.
void QuantizeRowsQ8Avx512(const float* x, int64_t x_stride, int64_t k, int64_t row_begin,
                          int64_t row_end, int8_t* q, float* d, int32_t* corr) {
  const int64_t blocks = Q8Blocks(k), qs = Q8XStride(k);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const float* xi = x + i * x_stride;
    int8_t* qi = q + i * qs;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kQ8Block, left = k - c0;
      const __m512 v0 = avx512::MaskzLoadu(avx512::FirstLanes(left), xi + c0);
      const __m512 v1 = avx512::MaskzLoadu(avx512::FirstLanes(left - 16), xi + c0 + 16);
      const float amax =
          _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const float db = amax / 127.0f, inv = db != 0 ? 1.0f / db : 0.0f;
      const __m512 vinv = _mm512_set1_ps(inv);
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, vinv));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, vinv));
      const __m128i b0 = _mm512_cvtsepi32_epi8(q0), b1 = _mm512_cvtsepi32_epi8(q1);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qi + c0), b0);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qi + c0 + 16), b1);
      // Σ of the saturated bytes, widened back.
      const __m512i s = _mm512_add_epi32(_mm512_cvtepi8_epi32(b0), _mm512_cvtepi8_epi32(b1));
      d[i * blocks + b] = db;
      corr[i * blocks + b] = -128 * _mm512_reduce_add_epi32(s);
    }
  }
}

}  // namespace cpm::kernels
