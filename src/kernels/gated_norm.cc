// Gated RMSNorm, per-head L2 norm and the sigmoid gate: dispatch plus the scalar references.
#include "kernels/gated_norm.h"

#include <cmath>

#include "kernels/cpu_features.h"
#include "kernels/gated_norm_impl.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

void GatedRmsNormElements(const float* x, const float* z, const float* w, float* y, int64_t j0,
                          int64_t dim, float inv, bool rb) {
  for (int64_t j = j0; j < dim; ++j) {
    float n = x[j] * inv;
    n = rb ? RoundBf16(w[j] * RoundBf16(n)) : n * w[j];
    const float v = n * (z[j] / (1.0f + std::exp(-z[j])));
    y[j] = rb ? RoundBf16(v) : v;
  }
}

void SigmoidMulElements(float* x, const float* gate, int64_t j0, int64_t dim, bool rb) {
  for (int64_t j = j0; j < dim; ++j) {
    float s = 1.0f / (1.0f + std::exp(-gate[j]));
    if (rb) s = RoundBf16(s);
    const float v = x[j] * s;
    x[j] = rb ? RoundBf16(v) : v;
  }
}

void GatedRmsNorm(const float* x, int64_t x_stride, const float* z, int64_t z_stride,
                  const float* w, float* y, int64_t y_stride, int64_t rows, int64_t dim, float eps,
                  Round round) {
  if (ActiveIsa() == Isa::kAvx512) {
    return GatedRmsNormAvx512(x, x_stride, z, z_stride, w, y, y_stride, rows, dim, eps, round);
  }
  if (ActiveIsa() != Isa::kScalar) {
    return GatedRmsNormAvx2(x, x_stride, z, z_stride, w, y, y_stride, rows, dim, eps, round);
  }
  const bool rb = round == Round::kBf16;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * x_stride;
    const float* zr = z + r * z_stride;
    float* yr = y + r * y_stride;
    float ss = 0.0f;
    for (int64_t j = 0; j < dim; ++j) ss += xr[j] * xr[j];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
    GatedRmsNormElements(xr, zr, w, yr, 0, dim, inv, rb);
  }
}

void L2NormHeads(float* x, int64_t x_stride, int64_t rows, int64_t heads, int64_t dim, float eps,
                 float scale) {
  if (ActiveIsa() == Isa::kAvx512) {
    return L2NormHeadsAvx512(x, x_stride, rows, heads, dim, eps, scale);
  }
  if (ActiveIsa() != Isa::kScalar) {
    return L2NormHeadsAvx2(x, x_stride, rows, heads, dim, eps, scale);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * x_stride + h * dim;
      float ss = 0.0f;
      for (int64_t j = 0; j < dim; ++j) ss += v[j] * v[j];
      const float f = scale / std::sqrt(ss + eps);
      for (int64_t j = 0; j < dim; ++j) v[j] *= f;
    }
  }
}

void SigmoidMul(float* x, int64_t x_stride, const float* gate, int64_t gate_stride, int64_t rows,
                int64_t dim, Round round) {
  if (ActiveIsa() == Isa::kAvx512) {
    return SigmoidMulAvx512(x, x_stride, gate, gate_stride, rows, dim, round);
  }
  if (ActiveIsa() != Isa::kScalar) {
    return SigmoidMulAvx2(x, x_stride, gate, gate_stride, rows, dim, round);
  }
  const bool rb = round == Round::kBf16;
  for (int64_t r = 0; r < rows; ++r) {
    float* xr = x + r * x_stride;
    const float* gr = gate + r * gate_stride;
    SigmoidMulElements(xr, gr, 0, dim, rb);
  }
}

}  // namespace cpm::kernels
