// AVX2+FMA matmul rows: 4 weight rows at a time against each x row, 8-wide f32 accumulators.
// Compiled with -mavx2 -mfma -mf16c; only called when the CPU has them.
#include <immintrin.h>

#include "kernels/matmul_impl.h"

namespace cpm::kernels {
namespace {

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

void MatMulRowsAvx2(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  if (w.dtype == DType::kBF16) Rows<true>(x, x_stride, m, w, row_begin, row_end, y, y_stride);
  else Rows<false>(x, x_stride, m, w, row_begin, row_end, y, y_stride);
}

}  // namespace cpm::kernels
