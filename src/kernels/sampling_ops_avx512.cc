// AVX-512 ExpScaled and SumExp (sampling_ops.h): the AVX2 forms' arithmetic on 16 lanes, so that
// each pair agrees to the bit (sampling_ops_test, natively and over SIMDe) and neither a seeded
// draw nor a log-prob from the same logits depends on the ISA: each vector of 16 is the AVX2
// loop's two vectors of 8, whose sums are its low and high lanes, added in the same order; the
// same tail. Compiled with AVX-512 flags; called only when the CPU has them.
#include <cmath>

#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, sampling_ops_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {
namespace {

// Vectors per step: four e^x side by side, which the core overlaps where one at a time leaves
// it waiting on each one's chain of ~25 dependent operations.
constexpr int kChains = 4;

inline __m512 ExpAt(const float* x, __m512 shift, __m512 scale) {
  return avx512::Exp(_mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x), shift), scale));
}

// The high eight lanes of v.
inline __m256 High8(__m512 v) {
  return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
}

// avx2::HSum of the low eight lanes plus the high eight (the AVX2 loop's s0 + s1), defined
// here so that no AVX-512-compiled copy of the shared inline function can be the one linked.
inline float SumOfHalves(__m512 v) {
  const __m256 s = _mm256_add_ps(_mm512_castps512_ps256(v), High8(v));
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

// SumExpAvx2's two f64 chains, s0 over lanes 0-3 of each vector of 8 and s1 over lanes 4-7, are
// the low and high halves of one 8-lane f64 chain here, which takes a vector of 16's two halves
// in turn: each lane's additions in the AVX2 loop's order. The e^x on 16 lanes, four vectors side
// by side: LogSoftmax over 73448 logits 48 → 24 µs (Zen 5, kernels_bench BM_LogSoftmax, the two
// ISAs in one run).
double SumExpAvx512(const float* x, int64_t n, float shift) {
  const __m512 vs = _mm512_set1_ps(shift);
  __m512d s = _mm512_setzero_pd();
  const auto add8 = [&](__m256 e) { s = _mm512_add_pd(s, avx512::WidenToF64(e)); };
  int64_t i = 0;
  for (; i + 16 * kChains <= n; i += 16 * kChains) {
    __m512 e[kChains];
#pragma GCC unroll 4
    for (int q = 0; q < kChains; ++q) {
      e[q] = avx512::Exp(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16 * q), vs));
    }
#pragma GCC unroll 4
    for (int q = 0; q < kChains; ++q) {
      add8(_mm512_castps512_ps256(e[q]));
      add8(High8(e[q]));
    }
  }
  for (; i + 8 <= n; i += 8) {  // the AVX2 loop's steps of 8 that are left
    add8(_mm512_castps512_ps256(
        avx512::Exp(_mm512_sub_ps(avx512::MaskzLoadu(0x00ff, x + i), vs))));
  }
  // s0 + s1, then the AVX2 form's lane order and scalar tail.
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(_mm512_castpd512_pd256(s), _mm512_extractf64x4_pd(s, 1)));
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum += std::exp(x[i] - shift);
  return sum;
}

}  // namespace CPM_AVX512_NAMESPACE
