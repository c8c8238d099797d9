// AVX-512 RMSNorm: rmsnorm_avx2.cc's arithmetic on 16 lanes. A row's sum of squares is the AVX2
// form's (SumSquaresAvx2: 8 lanes in two chains), so the inverse is the same to the bit, and the
// scaling pass is elementwise and exact (a row's last dim % 16 elements under a mask), so the two
// forms agree to the bit. Why 512 bits: most of the scaling pass's instructions, with MiniCPM's two
// bf16 roundings, are the rounding's integer ops (perf on a 512-token MiniCPM4 prefill), which 16
// lanes halve. RmsNormToPairsAvx512 stores the same bf16 outputs as the matmul's x pairs.
// Compiled with AVX-512 flags; called only when the CPU has them.
#include <cmath>

#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, rmsnorm_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {
namespace {

using avx512::FirstLanes;
using avx512::MaskStoreu;
using avx512::MaskzLoadu;

// The inverse RMS of a row.
inline __m512 InverseRms(const float* xr, int64_t dim, float eps) {
  const float ss = SumSquaresAvx2(xr, dim);
  return _mm512_set1_ps(1.0f / std::sqrt(ss / static_cast<float>(dim) + eps));
}

// bf?(bf?(x · inv) · (offset + w)) on the lanes of m (the others 0), each rounding where its flag
// says.
template <bool kRoundNormalized, bool kRoundOut>
inline __m512 Norm16(const float* x, const float* w, __m512 inv, __m512 offset, __mmask16 m) {
  __m512 v = _mm512_mul_ps(MaskzLoadu(m, x), inv);
  if (kRoundNormalized) v = avx512::RoundBf16(v);
  v = _mm512_mul_ps(v, _mm512_add_ps(offset, MaskzLoadu(m, w)));
  if (kRoundOut) v = avx512::RoundBf16(v);
  return v;
}

template <bool kRoundNormalized, bool kRoundOut>
void NormRows(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride,
              int64_t rows, int64_t dim, const RmsNormParams& p) {
  const __m512 offset = _mm512_set1_ps(p.weight_offset);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    const __m512 inv = InverseRms(xr, dim, p.eps);
    for (int64_t j = 0; j < dim; j += 16) {
      const __mmask16 m = FirstLanes(dim - j);
      MaskStoreu(yr + j, m, Norm16<kRoundNormalized, kRoundOut>(xr + j, w + j, inv, offset, m));
    }
  }
}

// NormRows rounded to bf16, stored as pairs: 32 elements a step, two vectors' high halves.
template <bool kRoundNormalized>
void NormRowsToPairs(const float* x, int64_t x_stride, const float* w, uint32_t* pairs,
                     int64_t pairs_stride, int64_t rows, int64_t dim, const RmsNormParams& p) {
  const __m512 offset = _mm512_set1_ps(p.weight_offset);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    uint32_t* pr = pairs + r * pairs_stride;
    const __m512 inv = InverseRms(xr, dim, p.eps);
    for (int64_t j = 0; j < dim; j += 32) {
      const __m512 lo =
          Norm16<kRoundNormalized, true>(xr + j, w + j, inv, offset, FirstLanes(dim - j));
      const __m512 hi = Norm16<kRoundNormalized, true>(xr + j + 16, w + j + 16, inv, offset,
                                                       FirstLanes(dim - j - 16));
      // An odd last element's pair gets a zero partner (a masked-off lane is 0).
      MaskStoreu(reinterpret_cast<float*>(pr + j / 2), FirstLanes((dim - j + 1) / 2),
                 _mm512_castsi512_ps(avx512::Bf16Pairs(lo, hi)));
    }
  }
}

}  // namespace

void RmsNormAvx512(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride,
                   int64_t rows, int64_t dim, const RmsNormParams& p) {
  const bool round_out = p.round == Round::kBf16;
  if (p.round_normalized) {
    (round_out ? NormRows<true, true> : NormRows<true, false>)(x, x_stride, w, y, y_stride, rows,
                                                                dim, p);
  } else {
    (round_out ? NormRows<false, true> : NormRows<false, false>)(x, x_stride, w, y, y_stride,
                                                                  rows, dim, p);
  }
}

void RmsNormToPairsAvx512(const float* x, int64_t x_stride, const float* w, uint32_t* pairs,
                         int64_t pairs_stride, int64_t rows, int64_t dim, const RmsNormParams& p) {
  (p.round_normalized ? NormRowsToPairs<true> : NormRowsToPairs<false>)(
      x, x_stride, w, pairs, pairs_stride, rows, dim, p);
}

}  // namespace CPM_AVX512_NAMESPACE
