// Q8_0 matmul on AVX2 (q8.h), for CPUs without AVX-512 VNNI. vpmaddubsw multiplies unsigned by
// signed bytes and adds pairs into int16 with saturation, so the operands are |x| (≤ 128) and
// w with x's sign (vpsignb, |w| ≤ 127): a pair sums to at most 2·128·127 = 32512, exact. vpmaddwd
// by ones then sums pairs of those into int32: each lane holds 4 products, as vpdpbusd's do, and
// a block's 8 steps give its exact dot product per column. A panel's 16 columns are two ymm
// halves; registers (16) allow tiles of 1 row × 2 panels or 2 rows × 1.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/matmul_impl.h"
#include "kernels/prefetch.h"
#include "kernels/q8.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kPrefetchBytes = 8192;
constexpr int kSteps = kQ8Block / kQ8GroupK;

int32_t Load4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <int MR, int NP>
void Tile(const Q8X& x, int64_t row0, const uint8_t* panel, const uint16_t* scales,
          int64_t panel_bytes, int64_t scale_stride, int64_t blocks, float out_scale, float* y,
          int64_t ys, bool round, int64_t n_valid) {
  const int64_t ahead = kPrefetchBytes / NP;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR][NP][2];
  for (int r = 0; r < MR; ++r) {
    for (int q = 0; q < NP; ++q) acc[r][q][0] = acc[r][q][1] = _mm256_setzero_ps();
  }
  for (int64_t b = 0; b < blocks; ++b) {
    __m256i dot[MR][NP][2];
    for (int r = 0; r < MR; ++r) {
      for (int q = 0; q < NP; ++q) dot[r][q][0] = dot[r][q][1] = _mm256_setzero_si256();
    }
    const uint8_t* block = panel + b * kQ8PanelBlockBytes;
#pragma GCC unroll 8
    for (int s = 0; s < kSteps; ++s) {
      __m256i xs[MR], xa[MR];
      for (int r = 0; r < MR; ++r) {
        xs[r] = _mm256_set1_epi32(Load4(x.q + (row0 + r) * x.q_stride + b * kQ8Block + s * 4));
        xa[r] = _mm256_abs_epi8(xs[r]);
      }
      for (int q = 0; q < NP; ++q) {
        const uint8_t* p = block + q * panel_bytes + s * 64;
        PrefetchL1(reinterpret_cast<const char*>(p) + ahead);
        for (int h = 0; h < 2; ++h) {
          const __m256i w = _mm256_xor_si256(
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * h)), flip);
          for (int r = 0; r < MR; ++r) {
            const __m256i pairs = _mm256_maddubs_epi16(xa[r], _mm256_sign_epi8(w, xs[r]));
            dot[r][q][h] = _mm256_add_epi32(dot[r][q][h], _mm256_madd_epi16(pairs, ones));
          }
        }
      }
    }
    for (int q = 0; q < NP; ++q) {
      const uint16_t* sp = scales + q * scale_stride + b * kQ8PanelWidth;
      for (int h = 0; h < 2; ++h) {
        const __m256 sw =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sp + 8 * h)));
        for (int r = 0; r < MR; ++r) {
          const __m256 dx = _mm256_set1_ps(x.d[(row0 + r) * x.blocks + b]);
          acc[r][q][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot[r][q][h]),
                                         _mm256_mul_ps(sw, dx), acc[r][q][h]);
        }
      }
    }
  }
  const __m256 scale = _mm256_set1_ps(out_scale);
  for (int r = 0; r < MR; ++r) {
    for (int q = 0; q < NP; ++q) {
      for (int h = 0; h < 2; ++h) {
        __m256 v = _mm256_mul_ps(acc[r][q][h], scale);
        if (round) v = avx2::RoundBf16(v);
        float* yp = y + r * ys + q * kQ8PanelWidth + 8 * h;
        if (NP == 1 && n_valid < kQ8PanelWidth) {
          _mm256_maskstore_ps(yp, avx2::FirstLanes(n_valid - 8 * h), v);
        } else {
          _mm256_storeu_ps(yp, v);
        }
      }
    }
  }
}

}  // namespace

void MatMulPanelsQ8Avx2(const Q8X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                        int64_t panel_end, float* y, int64_t y_stride, Round round) {
  const uint8_t* data = pw.data.as<uint8_t>();
  const uint16_t* scales = pw.scales.as<uint16_t>();
  const int64_t ss = pw.num_groups * kQ8PanelWidth;
  const bool to_bf16 = round == Round::kBf16;
  for (int64_t r = 0; r < m;) {
    const int64_t rows = m - r >= 2 ? 2 : 1;
    for (int64_t p = panel_begin; p < panel_end;) {
      const int64_t nv = std::min<int64_t>(kQ8PanelWidth, pw.n - p * kQ8PanelWidth);
      const uint8_t* panel = data + p * pw.panel_elems;
      const uint16_t* sp = scales + p * ss;
      float* yp = y + r * y_stride + (p - panel_begin) * kQ8PanelWidth;
      if (rows == 1 && p + 2 <= panel_end && (p + 2) * kQ8PanelWidth <= pw.n) {
        Tile<1, 2>(x, r, panel, sp, pw.panel_elems, ss, pw.num_groups, pw.out_scale, yp,
                   y_stride, to_bf16, kQ8PanelWidth);
        p += 2;
      } else if (rows == 1) {
        Tile<1, 1>(x, r, panel, sp, pw.panel_elems, ss, pw.num_groups, pw.out_scale, yp,
                   y_stride, to_bf16, nv);
        ++p;
      } else {
        Tile<2, 1>(x, r, panel, sp, pw.panel_elems, ss, pw.num_groups, pw.out_scale, yp,
                   y_stride, to_bf16, nv);
        ++p;
      }
    }
    r += rows;
  }
}

}  // namespace cpm::kernels
