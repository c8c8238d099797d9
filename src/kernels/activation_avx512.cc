// AVX-512 SiLU-and-multiply: activation_avx2.cc's arithmetic on 16 lanes, the tail too (under a
// mask, where AVX2 calls expf). 512-bit divides halve the AVX2 version's dominant cost.
#include <cmath>

#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, activation_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {

namespace {

using avx512::FirstLanes;

// silu(g) · u on the lanes of m (the others 0), rounded as `rb` says.
inline __m512 SiluMul16(const float* g, const float* u, __mmask16 m, bool rb) {
  const __m512 gv = avx512::MaskzLoadu(m, g);
  __m512 s = avx512::DivOnePlusExpNeg(gv, gv);
  if (rb) s = avx512::RoundBf16(s);
  __m512 v = _mm512_mul_ps(s, avx512::MaskzLoadu(m, u));
  if (rb) v = avx512::RoundBf16(v);
  return v;
}

}  // namespace

void SiluMulAvx512(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                   float* out, int64_t out_stride, int64_t rows, int64_t dim, Round round) {
  const bool rb = round == Round::kBf16;
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * gate_stride;
    const float* u = up + r * up_stride;
    float* o = out + r * out_stride;
    for (int64_t j = 0; j < dim; j += 16) {
      const __mmask16 m = FirstLanes(dim - j);
      avx512::MaskStoreu(o + j, m, SiluMul16(g + j, u + j, m, rb));
    }
  }
}

namespace {

// Where one group of 32 whole columns of a row is read and written.
struct PairGroup {
  const float* g;
  const float* u;
  uint32_t* p;
};

// Groups of 32 columns (two vectors each) finished together, taken in order over the rows (a
// gate/up task of a long prefill has only 64 columns): an e^x is a chain of ~25 dependent
// operations, and the core overlaps eight of them side by side where the two of one group leave
// it waiting on their latency. The same arithmetic; 512 rows × 64 columns from L2 1.58x faster
// (Zen 5), the model's pp512 and batch-16 decode 0.99x the time (interleaved steps, 6 of 6 and
// 2 of 3).
constexpr int kGroups = 4;

inline void SiluMulPairGroups(const PairGroup (&q)[kGroups]) {
  __m512 s[2 * kGroups];
#pragma GCC unroll 8
  for (int i = 0; i < 2 * kGroups; ++i) {
    const __m512 gv = _mm512_loadu_ps(q[i / 2].g + 16 * (i % 2));
    s[i] = avx512::DivOnePlusExpNeg(gv, gv);
  }
#pragma GCC unroll 8
  for (int i = 0; i < 2 * kGroups; ++i) {
    const __m512 u = _mm512_loadu_ps(q[i / 2].u + 16 * (i % 2));
    s[i] = avx512::RoundBf16(_mm512_mul_ps(avx512::RoundBf16(s[i]), u));
  }
#pragma GCC unroll 4
  for (int i = 0; i < kGroups; ++i) {
    _mm512_storeu_si512(q[i].p, avx512::Bf16Pairs(s[2 * i], s[2 * i + 1]));
  }
}

}  // namespace

void SiluMulToPairsAvx512(const float* gate, int64_t gate_stride, const float* up,
                          int64_t up_stride, uint32_t* pairs, int64_t pairs_stride, int64_t rows,
                          int64_t dim) {
  const int64_t whole = dim / 32 * 32;
  PairGroup q[kGroups];
  int n = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < whole; j += 32) {
      q[n++] = {gate + r * gate_stride + j, up + r * up_stride + j,
                pairs + r * pairs_stride + j / 2};
      if (n == kGroups) {
        SiluMulPairGroups(q);
        n = 0;
      }
    }
  }
  if (n > 0) {  // a short last batch: its last group again in the empty places (stored twice)
    for (int i = n; i < kGroups; ++i) q[i] = q[n - 1];
    SiluMulPairGroups(q);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * gate_stride;
    const float* u = up + r * up_stride;
    uint32_t* p = pairs + r * pairs_stride;
    for (int64_t j = whole; j < dim; j += 32) {
      const __m512 lo = SiluMul16(g + j, u + j, FirstLanes(dim - j), true);
      const __m512 hi = dim - j > 16
                            ? SiluMul16(g + j + 16, u + j + 16, FirstLanes(dim - j - 16), true)
                            : _mm512_setzero_ps();
      const __m512i packed = avx512::Bf16Pairs(lo, hi);
      // An odd last element's pair gets a zero partner (a masked-off lane is 0).
      const __mmask16 m = FirstLanes((dim - j + 1) / 2);
      if (m == 0xffff) {
        _mm512_storeu_si512(p + j / 2, packed);
      } else {
        avx512::MaskStoreu(reinterpret_cast<float*>(p + j / 2), m, _mm512_castsi512_ps(packed));
      }
    }
  }
}

}  // namespace CPM_AVX512_NAMESPACE
