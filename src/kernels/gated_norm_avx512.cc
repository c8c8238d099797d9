// AVX-512 gated RMSNorm, per-head L2 norm and sigmoid gate (MiniCPM-V-4.6's Gated DeltaNet output
// norm and q/k norm, gated attention's output gate): gated_norm_avx2.cc's arithmetic on 16 lanes.
// Each lane computes what the AVX2 form's lane does (the same sums of squares, the shared exp
// polynomial, a divide, the same rounding points), and a row's last dim % 16 elements go as the
// AVX2 form splits them (one 8-lane piece under a mask, then the scalar formulas), so the two
// agree to the bit (hybrid_kernels_test). The norm and the gate are bound by their exp and
// divide, which 512-bit vectors halve; the L2 norm's scaling pass takes half the instructions.
// Compiled with AVX-512 flags; called only when the CPU has them.
#include <cmath>

#include "kernels/gated_norm_impl.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"
#include "tensor/dtype.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, gated_norm_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {
namespace {

using avx512::DivOnePlusExpNeg;
using avx512::FirstLanes;

// Calls f(j, lanes) over [0, dim & ~7) in vectors of 16 and a last one of 8: the elements the
// AVX2 forms take in vectors. The rest, dim % 8, are the caller's, by the scalar formulas.
template <typename F>
inline int64_t ForVectors(int64_t dim, F&& f) {
  const int64_t d8 = dim & ~int64_t{7};
  int64_t j = 0;
  for (; j + 16 <= d8; j += 16) f(j, static_cast<__mmask16>(0xffff));
  if (j < d8) {
    f(j, FirstLanes(8));
    j += 8;
  }
  return j;
}

}  // namespace

void GatedRmsNormAvx512(const float* x, int64_t x_stride, const float* z, int64_t z_stride,
                        const float* w, float* y, int64_t y_stride, int64_t rows, int64_t dim,
                        float eps, Round round) {
  const bool rb = round == Round::kBf16;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    const float* zr = z + r * z_stride;
    float* yr = y + r * y_stride;
    // The AVX2 form's sum (8 lanes in two chains): the same inverse to the bit.
    const float inv = 1.0f / std::sqrt(SumSquaresAvx2(xr, dim) / static_cast<float>(dim) + eps);
    const __m512 vinv = _mm512_set1_ps(inv);
    int64_t j = ForVectors(dim, [&](int64_t j, __mmask16 m) {
      __m512 n = _mm512_mul_ps(avx512::MaskzLoadu(m, xr + j), vinv);
      const __m512 wj = avx512::MaskzLoadu(m, w + j);
      n = rb ? avx512::RoundBf16(_mm512_mul_ps(wj, avx512::RoundBf16(n))) : _mm512_mul_ps(n, wj);
      const __m512 zj = avx512::MaskzLoadu(m, zr + j);
      const __m512 v = _mm512_mul_ps(n, DivOnePlusExpNeg(zj, zj));
      avx512::MaskStoreu(yr + j, m, rb ? avx512::RoundBf16(v) : v);
    });
    GatedRmsNormElements(xr, zr, w, yr, j, dim, inv, rb);  // the scalar tail
  }
}

void L2NormHeadsAvx512(float* x, int64_t x_stride, int64_t rows, int64_t heads, int64_t dim,
                       float eps, float scale) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * x_stride + h * dim;
      const __m512 f = _mm512_set1_ps(scale / std::sqrt(SumSquaresAvx2(v, dim) + eps));
      for (int64_t j = 0; j < dim; j += 16) {
        const __mmask16 m = FirstLanes(dim - j);
        avx512::MaskStoreu(v + j, m, _mm512_mul_ps(avx512::MaskzLoadu(m, v + j), f));
      }
    }
  }
}

void SigmoidMulAvx512(float* x, int64_t x_stride, const float* gate, int64_t gate_stride,
                      int64_t rows, int64_t dim, Round round) {
  const bool rb = round == Round::kBf16;
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * x_stride;
    const float* gr = gate + r * gate_stride;
    int64_t j = ForVectors(dim, [&](int64_t j, __mmask16 m) {
      __m512 s = DivOnePlusExpNeg(_mm512_set1_ps(1.0f), avx512::MaskzLoadu(m, gr + j));
      if (rb) s = avx512::RoundBf16(s);
      const __m512 v = _mm512_mul_ps(avx512::MaskzLoadu(m, xr + j), s);
      avx512::MaskStoreu(xr + j, m, rb ? avx512::RoundBf16(v) : v);
    });
    SigmoidMulElements(xr, gr, j, dim, rb);  // the scalar tail
  }
}

}  // namespace CPM_AVX512_NAMESPACE
