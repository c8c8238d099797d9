// SiLU-and-multiply: dispatch plus the scalar reference.
#include "kernels/activation.h"

#include <cmath>

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

void SiluMul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
             float* out, int64_t out_stride, int64_t rows, int64_t dim, Round round) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return SiluMulAvx512(gate, gate_stride, up, up_stride, out, out_stride, rows, dim, round);
    case Isa::kAvx2:
      return SiluMulAvx2(gate, gate_stride, up, up_stride, out, out_stride, rows, dim, round);
    default: break;
  }
  const bool rb = round == Round::kBf16;
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate + r * gate_stride;
    const float* u = up + r * up_stride;
    float* o = out + r * out_stride;
    for (int64_t j = 0; j < dim; ++j) {
      float s = g[j] / (1.0f + std::exp(-g[j]));
      if (rb) s = RoundBf16(s);
      float v = s * u[j];
      o[j] = rb ? RoundBf16(v) : v;
    }
  }
}

}  // namespace cpm::kernels
