// AVX-512 SiLU-and-multiply: activation_avx2.cc's arithmetic on 16 lanes, the tail too (under a
// mask, where AVX2 calls expf). 512-bit divides halve the AVX2 version's dominant cost.
#include <cmath>

#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, activation_avx512_emulated.cc).
#if defined(CPM_EMULATE_AVX512)
namespace cpm::kernels::emulated {
#else
namespace cpm::kernels {
#endif

void SiluMulAvx512(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                   float* out, int64_t out_stride, int64_t rows, int64_t dim, Round round) {
  const bool rb = round == Round::kBf16;
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * gate_stride;
    const float* u = up + r * up_stride;
    float* o = out + r * out_stride;
    for (int64_t j = 0; j < dim; j += 16) {
      const __mmask16 m =
          dim - j >= 16 ? 0xffff : static_cast<__mmask16>((1u << (dim - j)) - 1);
      const __m512 gv = avx512::MaskzLoadu(m, g + j);
      __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, avx512::Exp(_mm512_sub_ps(zero, gv))));
      if (rb) s = avx512::RoundBf16(s);
      __m512 v = _mm512_mul_ps(s, avx512::MaskzLoadu(m, u + j));
      if (rb) v = avx512::RoundBf16(v);
      avx512::MaskStoreu(o + j, m, v);
    }
  }
}

}  // namespace cpm::kernels (or cpm::kernels::emulated)
