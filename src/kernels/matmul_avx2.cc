// AVX2+FMA matmul: an outer-product register tile (≤ 6 rows of x × 16 output columns) over
// packed weight panels, plus a dot-product kernel for weights that were never packed.
// Compiled with -mavx2 -mfma -mf16c; only called when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/matmul_impl.h"

namespace cpm::kernels {
namespace {

// Blocking. A k-block of one panel (kKc·32 B bf16) stays in L1 while every row tile of the
// row block passes over it; a row block of x (kMc·kKc·4 B) stays in L2 across the panels.
constexpr int64_t kMaxTileRows = 6;  // 12 accumulators + 2 weight vectors + 1 broadcast
constexpr int64_t kKcDecode = 512;
constexpr int64_t kKcPrefill = 256;
constexpr int64_t kMc = 120;

// Widens one panel row of 16 weights: w0 = columns 0..7, w1 = columns 8..15.
template <bool kBf16>
inline void LoadPanelRow(const void* panel, int64_t kk, __m256* w0, __m256* w1) {
  if constexpr (kBf16) {
    const __m256i v = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(panel) + kk * 16));
    *w0 = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    *w1 = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536)));
  } else {
    const float* p = static_cast<const float*>(panel) + kk * 16;
    *w0 = _mm256_loadu_ps(p);
    *w1 = _mm256_loadu_ps(p + 8);
  }
}

// y[MR, 16] (+)= x[MR, k0:k0+kc] · panel[k0:k0+kc, 16]. `panel` points at panel row k0, x at
// column k0. KS independent accumulator sets split k so that small tiles still keep ≥ 8 FMA
// chains in flight (FMA latency 4 × 2 ports); they are summed at the end.
template <int MR, int KS, bool kBf16>
void Tile(const float* x, int64_t xs, const void* panel, int64_t kc, float* y, int64_t ys,
          int64_t n_valid, bool accumulate) {
  // Every loop over the tile is fully unrolled so that `acc` lives in registers (GCC keeps an
  // array in memory if any loop indexes it with a variable).
  __m256 acc[KS][MR][2];
#pragma GCC unroll 4
  for (int s = 0; s < KS; ++s) {
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) acc[s][r][0] = acc[s][r][1] = _mm256_setzero_ps();
  }
  int64_t kk = 0;
  // Two steps per iteration at least: fewer loop/address uops between the FMAs.
#pragma GCC unroll 2
  for (; kk + KS <= kc; kk += KS) {
#pragma GCC unroll 4
    for (int s = 0; s < KS; ++s) {
      __m256 w0, w1;
      LoadPanelRow<kBf16>(panel, kk + s, &w0, &w1);
#pragma GCC unroll 6
      for (int r = 0; r < MR; ++r) {
        const __m256 b = _mm256_broadcast_ss(x + r * xs + kk + s);
        acc[s][r][0] = _mm256_fmadd_ps(b, w0, acc[s][r][0]);
        acc[s][r][1] = _mm256_fmadd_ps(b, w1, acc[s][r][1]);
      }
    }
  }
  for (; kk < kc; ++kk) {
    __m256 w0, w1;
    LoadPanelRow<kBf16>(panel, kk, &w0, &w1);
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      const __m256 b = _mm256_broadcast_ss(x + r * xs + kk);
      acc[0][r][0] = _mm256_fmadd_ps(b, w0, acc[0][r][0]);
      acc[0][r][1] = _mm256_fmadd_ps(b, w1, acc[0][r][1]);
    }
  }
#pragma GCC unroll 4
  for (int s = 1; s < KS; ++s) {
#pragma GCC unroll 6
    for (int r = 0; r < MR; ++r) {
      acc[0][r][0] = _mm256_add_ps(acc[0][r][0], acc[s][r][0]);
      acc[0][r][1] = _mm256_add_ps(acc[0][r][1], acc[s][r][1]);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < MR; ++r) {
    float* yr = y + r * ys;
    if (n_valid == 16) {
      if (accumulate) {
        acc[0][r][0] = _mm256_add_ps(acc[0][r][0], _mm256_loadu_ps(yr));
        acc[0][r][1] = _mm256_add_ps(acc[0][r][1], _mm256_loadu_ps(yr + 8));
      }
      _mm256_storeu_ps(yr, acc[0][r][0]);
      _mm256_storeu_ps(yr + 8, acc[0][r][1]);
    } else {  // last panel of a matrix whose width is not a multiple of 16
      alignas(32) float tmp[16];
      _mm256_store_ps(tmp, acc[0][r][0]);
      _mm256_store_ps(tmp + 8, acc[0][r][1]);
      for (int64_t j = 0; j < n_valid; ++j) yr[j] = accumulate ? yr[j] + tmp[j] : tmp[j];
    }
  }
}

template <bool kBf16>
void RunTile(int64_t rows, const float* x, int64_t xs, const void* panel, int64_t kc, float* y,
             int64_t ys, int64_t n_valid, bool accumulate) {
  switch (rows) {
    case 1: return Tile<1, 4, kBf16>(x, xs, panel, kc, y, ys, n_valid, accumulate);
    case 2: return Tile<2, 2, kBf16>(x, xs, panel, kc, y, ys, n_valid, accumulate);
    case 3: return Tile<3, 2, kBf16>(x, xs, panel, kc, y, ys, n_valid, accumulate);
    case 4: return Tile<4, 1, kBf16>(x, xs, panel, kc, y, ys, n_valid, accumulate);
    case 5: return Tile<5, 1, kBf16>(x, xs, panel, kc, y, ys, n_valid, accumulate);
    default: return Tile<6, 1, kBf16>(x, xs, panel, kc, y, ys, n_valid, accumulate);
  }
}

template <bool kBf16>
void Panels(const float* x, int64_t xs, int64_t m, const PackedWeight& pw, int64_t pb,
            int64_t pe, float* y, int64_t ys) {
  using T = std::conditional_t<kBf16, uint16_t, float>;
  const T* data = pw.data.as<T>();
  const int64_t k = pw.k;
  const int64_t kc_max = m <= 16 ? kKcDecode : kKcPrefill;
  for (int64_t i0 = 0; i0 < m; i0 += kMc) {
    const int64_t rows = std::min(kMc, m - i0);
    // Balanced tiles: 16 rows -> 6+5+5 rather than 6+6+4.
    const int64_t n_tiles = (rows + kMaxTileRows - 1) / kMaxTileRows;
    for (int64_t k0 = 0; k0 < k; k0 += kc_max) {
      const int64_t kc = std::min(kc_max, k - k0);
      for (int64_t p = pb; p < pe; ++p) {
        const T* panel = data + p * pw.panel_elems + k0 * 16;
        const int64_t n_valid = std::min<int64_t>(16, pw.n - p * 16);
        int64_t r = 0;
        for (int64_t t = 0; t < n_tiles; ++t) {
          const int64_t tr = (rows - r + (n_tiles - t) - 1) / (n_tiles - t);
          const int64_t row = i0 + r;
          RunTile<kBf16>(tr, x + row * xs + k0, xs, panel, kc, y + row * ys + p * 16, ys,
                         n_valid, k0 > 0);
          r += tr;
        }
      }
    }
  }
}

// ---- Unpacked weights: 4 weight rows at a time against each x row (dot-product form). ----

inline __m256 LoadBf16x8(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

inline float HSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

template <bool kBf16>
inline __m256 LoadW(const void* base, int64_t idx) {
  if constexpr (kBf16) return LoadBf16x8(static_cast<const uint16_t*>(base) + idx);
  else return _mm256_loadu_ps(static_cast<const float*>(base) + idx);
}

template <bool kBf16>
inline float WAt(const void* base, int64_t idx) {
  if constexpr (kBf16) return Bf16ToF32(static_cast<const uint16_t*>(base)[idx]);
  else return static_cast<const float*>(base)[idx];
}

template <bool kBf16>
void Rows(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w, int64_t rb,
          int64_t re, float* y, int64_t y_stride) {
  const int64_t k = w.in_features, k8 = k & ~int64_t{7};
  int64_t r = rb;
  for (; r + 4 <= re; r += 4) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * x_stride;
      __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t j = 0; j < k8; j += 8) {
        __m256 xv = _mm256_loadu_ps(xi + j);
        a0 = _mm256_fmadd_ps(xv, LoadW<kBf16>(w.data, (r + 0) * k + j), a0);
        a1 = _mm256_fmadd_ps(xv, LoadW<kBf16>(w.data, (r + 1) * k + j), a1);
        a2 = _mm256_fmadd_ps(xv, LoadW<kBf16>(w.data, (r + 2) * k + j), a2);
        a3 = _mm256_fmadd_ps(xv, LoadW<kBf16>(w.data, (r + 3) * k + j), a3);
      }
      float s[4] = {HSum(a0), HSum(a1), HSum(a2), HSum(a3)};
      for (int64_t j = k8; j < k; ++j) {
        for (int q = 0; q < 4; ++q) s[q] += xi[j] * WAt<kBf16>(w.data, (r + q) * k + j);
      }
      for (int q = 0; q < 4; ++q) y[i * y_stride + r + q] = s[q];
    }
  }
  for (; r < re; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * x_stride;
      __m256 a = _mm256_setzero_ps();
      for (int64_t j = 0; j < k8; j += 8) {
        a = _mm256_fmadd_ps(_mm256_loadu_ps(xi + j), LoadW<kBf16>(w.data, r * k + j), a);
      }
      float s = HSum(a);
      for (int64_t j = k8; j < k; ++j) s += xi[j] * WAt<kBf16>(w.data, r * k + j);
      y[i * y_stride + r] = s;
    }
  }
}

}  // namespace

void MatMulPanelsAvx2(const float* x, int64_t x_stride, int64_t m, const PackedWeight& pw,
                      int64_t panel_begin, int64_t panel_end, float* y, int64_t y_stride) {
  if (pw.layout == PackedLayout::kPanel16Bf16) {
    Panels<true>(x, x_stride, m, pw, panel_begin, panel_end, y, y_stride);
  } else {
    Panels<false>(x, x_stride, m, pw, panel_begin, panel_end, y, y_stride);
  }
}

void MatMulRowsAvx2(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  if (w.dtype == DType::kBF16) Rows<true>(x, x_stride, m, w, row_begin, row_end, y, y_stride);
  else Rows<false>(x, x_stride, m, w, row_begin, row_end, y, y_stride);
}

bool AllBf16ExactAvx2(const float* x, int64_t x_stride, int64_t m, int64_t k) {
  const __m256i low = _mm256_set1_epi32(0xffff);
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * x_stride;
    __m256i any = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 8 <= k; j += 8) {
      any = _mm256_or_si256(any, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xi + j)));
    }
    if (!_mm256_testz_si256(any, low)) return false;
    for (; j < k; ++j) {
      uint32_t bits;
      std::memcpy(&bits, xi + j, 4);
      if (bits & 0xffff) return false;
    }
  }
  return true;
}

}  // namespace cpm::kernels
