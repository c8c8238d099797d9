// RMSNorm: dispatch plus the scalar reference.
#include "kernels/rmsnorm.h"

#include <cmath>

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

void RmsNorm(const float* x, int64_t x_stride, const float* w, float* y, int64_t y_stride,
             int64_t rows, int64_t dim, const RmsNormParams& p) {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return RmsNormAvx512(x, x_stride, w, y, y_stride, rows, dim, p);
    case Isa::kAvx2: return RmsNormAvx2(x, x_stride, w, y, y_stride, rows, dim, p);
    default: break;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    float* yr = y + r * y_stride;
    float ss = 0.0f;
    for (int64_t j = 0; j < dim; ++j) ss += xr[j] * xr[j];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + p.eps);
    for (int64_t j = 0; j < dim; ++j) {
      float v = xr[j] * inv;
      if (p.round_normalized) v = RoundBf16(v);
      v *= (p.weight_offset + w[j]);
      yr[j] = p.round == Round::kBf16 ? RoundBf16(v) : v;
    }
  }
}

}  // namespace cpm::kernels
