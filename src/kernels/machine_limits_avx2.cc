// AVX2 loops for machine_limits: FMAs on 12 independent registers (more chains than latency ×
// ports, so only throughput limits them) and a streaming read, optionally software-prefetched.
// Built with -mavx2 -mfma.
#include <immintrin.h>

#include "kernels/machine_limits.h"
#include "kernels/prefetch.h"

namespace cpm::kernels {

double FmaPeakLoopAvx2(int64_t iterations) {
  __m256 a[12];
  const __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(static_cast<float>(i));
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(a[i], b, c);
  }
  __m256 s = a[0];
#pragma GCC unroll 12
  for (int i = 1; i < 12; ++i) s = _mm256_add_ps(s, a[i]);
  volatile float sink = _mm256_cvtss_f32(s);
  (void)sink;
  return static_cast<double>(iterations) * 12 * 8 * 2;
}

double Int8DotPeakLoopAvx2(int64_t iterations) {
  // The Q8_0 AVX2 kernel's mix (q8_avx2.cc): vpmaddubsw (u8 × s8 pairs into int16), vpmaddwd by
  // ones (pairs of those into int32), vpaddd into the accumulator; 8 independent chains.
  __m256i a[8];
  __m256i b = _mm256_set1_epi8(3), c = _mm256_set1_epi8(-2);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int i = 0; i < 8; ++i) a[i] = _mm256_setzero_si256();
  for (int64_t it = 0; it < iterations; ++it) {
    // Opaque to the compiler, so the products are not hoisted out of the loop (no instruction).
    asm volatile("" : "+x"(b), "+x"(c));
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      a[i] = _mm256_add_epi32(a[i], _mm256_madd_epi16(_mm256_maddubs_epi16(b, c), ones));
    }
  }
  __m256i s = a[0];
#pragma GCC unroll 8
  for (int i = 1; i < 8; ++i) s = _mm256_add_epi32(s, a[i]);
  volatile int sink = _mm256_extract_epi32(s, 0);
  (void)sink;
  // Each step: 32 u8 × s8 products and their sum = 64 ops.
  return static_cast<double>(iterations) * 8 * 64;
}

uint64_t StreamReadAvx2(const void* p, int64_t bytes, int64_t prefetch_bytes,
                        int64_t run_bytes) {
  // Four streams a quarter of the range apart, 128 B from each in turn: one sequential stream
  // leaves DRAM bandwidth unused on this kind of machine (the matmul kernels also read several
  // weight panels at once). Four independent XOR chains: the loads, not the ALU, are the limit.
  // With run_bytes, the same over each group of four runs in turn.
  const char* base = static_cast<const char*>(p);
  const int64_t run = run_bytes > 0 ? run_bytes / 128 * 128 : bytes / 4 / 128 * 128;
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (int64_t group = 0; run > 0 && group + 4 * run <= bytes; group += 4 * run) {
    for (int64_t off = 0; off < run; off += 128) {
      for (int q = 0; q < 4; ++q) {
        const char* line = base + group + q * run + off;
        if (prefetch_bytes > 0) {  // a branch the predictor always gets right
          PrefetchL1(line + prefetch_bytes);
          PrefetchL1(line + prefetch_bytes + 64);
        }
        const __m256i* v = reinterpret_cast<const __m256i*>(line);
        s0 = _mm256_xor_si256(s0, _mm256_load_si256(v));
        s1 = _mm256_xor_si256(s1, _mm256_load_si256(v + 1));
        s2 = _mm256_xor_si256(s2, _mm256_load_si256(v + 2));
        s3 = _mm256_xor_si256(s3, _mm256_load_si256(v + 3));
      }
    }
  }
  s0 = _mm256_xor_si256(_mm256_xor_si256(s0, s1), _mm256_xor_si256(s2, s3));
  return static_cast<uint64_t>(_mm256_extract_epi64(s0, 0) ^ _mm256_extract_epi64(s0, 1) ^
                               _mm256_extract_epi64(s0, 2) ^ _mm256_extract_epi64(s0, 3));
}

}  // namespace cpm::kernels
