// AVX-512 ExpScaled (sampling_ops.h): ExpScaledAvx2's arithmetic on 16 lanes, so that the two
// agree to the bit (sampling_ops_test, natively and over SIMDe) and a seeded draw from the same
// logits does not depend on the ISA: each vector of 16 is the AVX2 loop's two vectors of 8, whose sums s0 and
// s1 are its low and high lanes, added in the same order; the same tail. Compiled with AVX-512
// flags; called only when the CPU has them.
#include <cmath>

#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, sampling_ops_avx512_emulated.cc).
#if defined(CPM_EMULATE_AVX512)
namespace cpm::kernels::emulated {
#else
namespace cpm::kernels {
#endif
namespace {

// Vectors per step: four e^x side by side, which the core overlaps where one at a time leaves
// it waiting on each one's chain of ~25 dependent operations.
constexpr int kChains = 4;

inline __m512 ExpAt(const float* x, __m512 shift, __m512 scale) {
  return avx512::Exp(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x), shift), scale));
}

// avx2::HSum of the low eight lanes plus the high eight (the AVX2 loop's s0 + s1), defined
// here so that no AVX-512-compiled copy of the shared inline function can be the one linked.
inline float SumOfHalves(__m512 v) {
  const __m256 lo8 = _mm512_castps512_ps256(v);
  const __m256 hi8 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 s = _mm256_add_ps(lo8, hi8);
  __m128 lo = _mm256_castps256_ps128(s), hi = _mm256_extractf128_ps(s, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_shuffle_ps(lo, lo, 1));
  return _mm_cvtss_f32(lo);
}

}  // namespace

float ExpScaledAvx512(const float* x, int64_t n, float shift, float scale, float* out) {
  const __m512 vs = _mm512_set1_ps(shift), vc = _mm512_set1_ps(scale);
  __m512 sum = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 * kChains <= n; i += 16 * kChains) {
    __m512 e[kChains];
#pragma GCC unroll 4
    for (int q = 0; q < kChains; ++q) e[q] = ExpAt(x + i + 16 * q, vs, vc);
#pragma GCC unroll 4
    for (int q = 0; q < kChains; ++q) {
      _mm512_storeu_ps(out + i + 16 * q, e[q]);
      sum = _mm512_add_ps(sum, e[q]);
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m512 e = ExpAt(x + i, vs, vc);
    _mm512_storeu_ps(out + i, e);
    sum = _mm512_add_ps(sum, e);
  }
  float s = SumOfHalves(sum);
  for (; i < n; ++i) s += out[i] = std::exp((x[i] - shift) * scale);
  return s;
}

}  // namespace cpm::kernels (or cpm::kernels::emulated)
