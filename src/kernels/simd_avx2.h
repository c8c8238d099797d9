// Small AVX2 helpers shared by the *_avx2.cc kernels. Include only from files built with
// -mavx2 -mfma -mf16c.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "kernels/exp_poly.h"
#include "tensor/dtype.h"

namespace cpm::kernels::avx2 {

// 8 bf16 -> 8 f32 (exact: a bf16 is the top half of an f32).
inline __m256 LoadBf16(const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// 16 bf16 values stored pairwise, (j, j + 8) in 32-bit lane j (the matmul's panels, the KV cache's
// keys), widened to f32 by one load, a shift and a mask: lo = values 0..7, hi = values 8..15.
inline void LoadBf16Pairs(const uint16_t* p, __m256* lo, __m256* hi) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  *lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  *hi = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(-65536)));
}

inline float HSum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

inline float HMax(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_max_ps(lo, hi);
  lo = _mm_max_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_max_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

// Σ x[j]² over j < n: two 8-lane accumulators, then the last n % 8 in order.
inline float SumSquares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256 v0 = _mm256_loadu_ps(x + j), v1 = _mm256_loadu_ps(x + j + 8);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
  }
  for (; j + 8 <= n; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  float ss = HSum(_mm256_add_ps(a0, a1));
  for (; j < n; ++j) ss += x[j] * x[j];
  return ss;
}

// In-register transpose of an 8×8 block of floats (rows r[0..7] become columns).
inline void Transpose8x8(__m256 r[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
  r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
  r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
  r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
  r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

// All-ones in lanes [0, n) of 8 (n may be ≤ 0 or > 8): the mask of a partial vector.
inline __m256i FirstLanes(int64_t n) {
  const int32_t m = static_cast<int32_t>(n < 0 ? 0 : n > 8 ? 8 : n);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// f32 -> bf16 -> f32, round to nearest even, as F32ToBf16 (NaN stays NaN).
inline __m256 RoundBf16(__m256 x) {
  const __m256i b = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  r = _mm256_and_si256(r, _mm256_set1_epi32(-65536));
  // NaN: keep the top half and set a quiet bit, as the scalar code does.
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  const __m256i qnan = _mm256_or_si256(_mm256_and_si256(b, _mm256_set1_epi32(-65536)),
                                       _mm256_set1_epi32(0x400000));
  return _mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(qnan), nan);
}

// e^x, relative error ≤ ~2 ulp for x in [-87, 88]; x < -87.3 gives 0 (the scalar expf gives a
// denormal there, an absolute difference below 1e-38). Cody-Waite reduction + degree-6 poly.
inline __m256 Exp(__m256 x) {
  namespace c = exp_poly;
  const __m256 lo = _mm256_set1_ps(c::kLo), hi = _mm256_set1_ps(c::kHi);
  const __m256 too_small = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), hi);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(c::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(c::kLn2Hi), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(c::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(c::kP[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c::kP[i]));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n built in two halves so that n = 128 (x near the top) does not overflow the exponent.
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i h1 = _mm256_srai_epi32(ni, 1), h2 = _mm256_sub_epi32(ni, h1);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h1, _mm256_set1_epi32(127)), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h2, _mm256_set1_epi32(127)), 23));
  p = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
  return _mm256_andnot_ps(too_small, p);
}

// num / (1 + e^-v), lane-wise: silu(v) for num = v, sigmoid(v) for num = 1 (one rounding, as
// the scalar num / (1 + exp(-v))).
inline __m256 DivOnePlusExpNeg(__m256 num, __m256 v) {
  const __m256 e = Exp(_mm256_sub_ps(_mm256_setzero_ps(), v));
  return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace cpm::kernels::avx2
