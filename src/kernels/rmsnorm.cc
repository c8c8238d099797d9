// RMSNorm: dispatch plus the scalar reference.
#include "kernels/rmsnorm.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
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

void RmsNormToPairs(const float* x, int64_t x_stride, const float* w, uint32_t* pairs,
                    int64_t pairs_stride, int64_t rows, int64_t dim, const RmsNormParams& p) {
  CPM_CHECK(p.round == Round::kBf16);
  if (ActiveIsa() == Isa::kAvx512) {
    return RmsNormToPairsAvx512(x, x_stride, w, pairs, pairs_stride, rows, dim, p);
  }
  // Elsewhere (no matmul reads pairs below AVX-512; tests): RmsNorm a row, then its high halves.
  std::vector<float> y(static_cast<size_t>(dim));
  for (int64_t r = 0; r < rows; ++r) {
    RmsNorm(x + r * x_stride, x_stride, w, y.data(), dim, 1, dim, p);
    uint32_t* pr = pairs + r * pairs_stride;
    for (int64_t j = 0; j < dim; j += 2) {
      uint32_t lo, hi = 0;
      std::memcpy(&lo, &y[j], 4);
      if (j + 1 < dim) std::memcpy(&hi, &y[j + 1], 4);
      pr[j / 2] = (lo >> 16) | (hi & 0xffff0000u);
    }
  }
}

}  // namespace cpm::kernels
