// AVX-512 RMSNorm: rmsnorm_avx2.cc's arithmetic on 16 lanes. A row's sum of squares is the AVX2
// form's (SumSquaresAvx2: 8 lanes in two chains), so the inverse is the same to the bit, and the
// scaling pass is elementwise and exact (a row's last dim % 16 elements under a mask), so the two
// forms agree to the bit. Why 512 bits: most of the scaling pass's instructions, with MiniCPM's two
// bf16 roundings, are the rounding's integer ops (perf on a 512-token MiniCPM4 prefill), which 16
// lanes halve. Compiled with AVX-512 flags; called only when the CPU has them.
#include <cmath>

#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, rmsnorm_avx512_emulated.cc).
#if defined(CPM_EMULATE_AVX512)
namespace cpm::kernels::emulated {
#else
namespace cpm::kernels {
#endif
namespace {

using avx512::FirstLanes;
using avx512::MaskStoreu;
using avx512::MaskzLoadu;

// y = bf?(bf?(x · inv) · (offset + w)) row by row, each rounding where its flag says.
template <bool kRoundNormalized, bool kRoundOut>
void NormRows(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride,
              int64_t rows, int64_t dim, const RmsNormParams& p) {
  const __m512 offset = _mm512_set1_ps(p.weight_offset);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    const float ss = SumSquaresAvx2(xr, dim);
    const __m512 inv = _mm512_set1_ps(1.0f / std::sqrt(ss / static_cast<float>(dim) + p.eps));
    for (int64_t j = 0; j < dim; j += 16) {
      const __mmask16 m = FirstLanes(dim - j);
      __m512 v = _mm512_mul_ps(MaskzLoadu(m, xr + j), inv);
      if (kRoundNormalized) v = avx512::RoundBf16(v);
      v = _mm512_mul_ps(v, _mm512_add_ps(offset, MaskzLoadu(m, w + j)));
      if (kRoundOut) v = avx512::RoundBf16(v);
      MaskStoreu(yr + j, m, v);
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

}  // namespace cpm::kernels (or cpm::kernels::emulated)
