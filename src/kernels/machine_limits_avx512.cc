// AVX-512 peak loops for machine_limits: f32 FMA, bf16 dot products (vdpbf16ps) and int8 dot
// products (vpdpbusd) on 16 independent registers. Built with AVX-512 flags; called only when the CPU has them.
#include <immintrin.h>

#include "kernels/machine_limits.h"

// GCC 12 warns about the `undefined` operand inside its own _mm512_reduce_add_ps.
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace cpm::kernels {

double FmaPeakLoopAvx512(int64_t iterations) {
  __m512 a[16];
  const __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(a[i], b, c);
  }
  __m512 s = a[0];
#pragma GCC unroll 16
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return static_cast<double>(iterations) * 16 * 16 * 2;
}

double Bf16DotPeakLoopAvx512(int64_t iterations) {
  __m512 a[16];
  const __m512i b = _mm512_set1_epi32(0x3f803f80), c = _mm512_set1_epi32(0x33d633d6);
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_ps();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbf16_ps(a[i], (__m512bh)b, (__m512bh)c);
  }
  __m512 s = a[0];
#pragma GCC unroll 16
  for (int i = 1; i < 16; ++i) s = _mm512_add_ps(s, a[i]);
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  // Each lane: two bf16 products and their sum added to the accumulator = 4 FLOPs.
  return static_cast<double>(iterations) * 16 * 16 * 4;
}

double Int8DotPeakLoopAvx512(int64_t iterations) {
  __m512i a[16];
  const __m512i b = _mm512_set1_epi8(3), c = _mm512_set1_epi8(-2);
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_si512();
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbusd_epi32(a[i], b, c);
  }
  __m512i s = a[0];
#pragma GCC unroll 16
  for (int i = 1; i < 16; ++i) s = _mm512_add_epi32(s, a[i]);
  // The sums wrap (they are only kept live): take one lane, as _mm512_reduce_add_epi32's signed
  // C additions would overflow, which UBSan rightly stops.
  volatile int sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(s));
  (void)sink;
  // Each 32-bit lane: four u8 × s8 products and their sum added to the accumulator = 8 ops.
  return static_cast<double>(iterations) * 16 * 16 * 8;
}

}  // namespace cpm::kernels
