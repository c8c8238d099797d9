// AVX-512 vector helpers shared by the AVX-512 kernel files (compiled with CPM_AVX512_FLAGS). A
// file compiled over SIMDe's emulation (CPM_EMULATE_AVX512, tests) gets the same code on SIMDe's
// types.
#pragma once

#if defined(CPM_EMULATE_AVX512)
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#else
#include <immintrin.h>
#endif

#include <cstdint>

#include "kernels/exp_poly.h"

// GCC 12 warns about the `undefined` operands inside its own AVX-512 intrinsic headers.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// The namespace an AVX-512 kernel file defines its entry points in (ops_avx512_list.inc):
// cpm::kernels, or, compiled over SIMDe for the tests, cpm::kernels::emulated.
#if defined(CPM_EMULATE_AVX512)
#define CPM_AVX512_NAMESPACE cpm::kernels::emulated
#else
#define CPM_AVX512_NAMESPACE cpm::kernels
#endif

namespace cpm::kernels::avx512 {

// Masked unaligned load/store of 16 floats: masked-off lanes are neither read nor written.
#if defined(CPM_EMULATE_AVX512)
// SIMDe 0.7 has no masked unaligned forms; lane-wise equivalents.
inline __m512 MaskzLoadu(__mmask16 k, const float* p) {
  alignas(64) float v[16] = {};
  for (int i = 0; i < 16; ++i) {
    if ((k >> i) & 1) v[i] = p[i];
  }
  return _mm512_load_ps(v);
}
inline void MaskStoreu(float* p, __mmask16 k, __m512 a) {
  alignas(64) float v[16];
  _mm512_store_ps(v, a);
  for (int i = 0; i < 16; ++i) {
    if ((k >> i) & 1) p[i] = v[i];
  }
}
#else
inline __m512 MaskzLoadu(__mmask16 k, const float* p) { return _mm512_maskz_loadu_ps(k, p); }
inline void MaskStoreu(float* p, __mmask16 k, __m512 a) { _mm512_mask_storeu_ps(p, k, a); }
#endif

// Masked load of 16 bf16 values widened to f32 (exact): masked-off lanes are 0 and not read.
#if defined(CPM_EMULATE_AVX512)
// SIMDe 0.7 has no masked 16-bit loads or 16 → 32-bit widening; lane-wise.
inline __m512 MaskzLoadBf16(__mmask16 k, const uint16_t* p) {
  alignas(64) uint32_t v[16] = {};
  for (int i = 0; i < 16; ++i) {
    if ((k >> i) & 1) v[i] = uint32_t{p[i]} << 16;
  }
  return _mm512_castsi512_ps(_mm512_load_si512(v));
}
#else
inline __m512 MaskzLoadBf16(__mmask16 k, const uint16_t* p) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
#endif

// 8 floats widened to f64 (vcvtps2pd), exactly.
#if defined(CPM_EMULATE_AVX512)
// SIMDe 0.7 has no _mm512_cvtps_pd; the two 128-bit halves' AVX conversions.
inline __m512d WidenToF64(__m256 v) {
  return _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_cvtps_pd(_mm256_castps256_ps128(v))),
                            _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), 1);
}
#else
inline __m512d WidenToF64(__m256 v) { return _mm512_cvtps_pd(v); }
#endif

// The high halves of lo's and hi's 32 floats (bf16 values: their low halves are zero) in order,
// as 16 pairs, element 2p in the low half of pair p (the bf16 dot products' x layout): one word
// permutation.
inline __m512i Bf16Pairs(__m512 lo, __m512 hi) {
  const __m512i high_words = _mm512_set_epi16(
      63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19,
      17, 15, 13, 11, 9, 7, 5, 3, 1);
  return _mm512_permutex2var_epi16(_mm512_castps_si512(lo), high_words, _mm512_castps_si512(hi));
}

// The first n lanes of 16 (none for n ≤ 0, all for n ≥ 16): the valid lanes of a row's last,
// partial vector.
inline __mmask16 FirstLanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff)
                 : static_cast<__mmask16>((1u << (n > 0 ? n : 0)) - 1);
}

// f32 → bf16 → f32, round to nearest even; a NaN keeps its top half with the quiet bit set (as
// F32ToBf16 and avx2::RoundBf16).
inline __m512 RoundBf16(__m512 v) {
  const __m512i b = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
  const __m512i top = _mm512_set1_epi32(-65536);
  const __m512i r =
      _mm512_and_si512(_mm512_add_epi32(b, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), top);
  const __m512i qnan = _mm512_or_si512(_mm512_and_si512(b, top), _mm512_set1_epi32(0x400000));
  return _mm512_castsi512_ps(
      _mm512_mask_blend_epi32(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), r, qnan));
}

// e^(x − n·ln 2) for the integer n nearest x·log2 e: avx2::Exp's Cody-Waite reduction and
// polynomial on 16 lanes (e^x is this times 2^n).
inline __m512 ExpMantissa(__m512 x, __m512 n) {
  namespace c = exp_poly;
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(c::kLn2Hi), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(c::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(c::kP[0]);
#pragma GCC unroll 5
  for (int i = 1; i < 6; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c::kP[i]));
  return _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
}

// e^x: avx2::Exp's reduction and polynomial on 16 lanes; ≤ ~2 ulp from expf on [-87, 88], 0
// below -87.3. Written with operations SIMDe 0.7 emulates exactly (it has no 512-bit float → int
// conversion or arithmetic shift, and its roundscale toward −∞ returned −8.5 for −8.26), so that
// the emulated build tests the same arithmetic.
inline __m512 Exp(__m512 x) {
  namespace c = exp_poly;
  const __m512 lo = _mm512_set1_ps(c::kLo), hi = _mm512_set1_ps(c::kHi);
  const __mmask16 too_small = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  // n = round-to-nearest-even(x · log2 e), as _mm256_round_ps: adding 1.5 · 2^23 leaves the
  // integer in the low mantissa bits (|n| ≤ 128), subtracting it gives n as a float.
  const __m512 magic = _mm512_set1_ps(12582912.0f);
  const __m512 shifted =
      _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(c::kLog2e)), magic);
  const __m512 n = _mm512_sub_ps(shifted, magic);
  __m512 p = ExpMantissa(x, n);
  // 2^n in two halves, so that n = 128 does not overflow the exponent: h1 = floor(n / 2) (avx2's
  // n >> 1, from a logical shift of n + 128 ≥ 0), h2 = n − h1.
  const __m512i ni = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_castps_si512(magic));
  const __m512i h1 = _mm512_sub_epi32(
      _mm512_srli_epi32(_mm512_add_epi32(ni, _mm512_set1_epi32(128)), 1), _mm512_set1_epi32(64));
  const __m512i h2 = _mm512_sub_epi32(ni, h1);
  const __m512i bias = _mm512_set1_epi32(127);
  const __m512 s1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h1, bias), 23));
  const __m512 s2 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(h2, bias), 23));
  p = _mm512_mul_ps(_mm512_mul_ps(p, s1), s2);
  return _mm512_maskz_mov_ps(static_cast<__mmask16>(~too_small), p);
}

// num / (1 + e^-v) on 16 lanes, avx2::DivOnePlusExpNeg's operations: silu(v) for num = v,
// sigmoid(v) for num = 1.
inline __m512 DivOnePlusExpNeg(__m512 num, __m512 v) {
  const __m512 e = Exp(_mm512_sub_ps(_mm512_setzero_ps(), v));
  return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

}  // namespace cpm::kernels::avx512
