// RoPE (NeoX): dispatch plus the scalar reference; built with -ffp-contract=off.
#include "kernels/rope.h"

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "kernels/rope_pair.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

void RopeNeox(float* x, int64_t x_stride, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
              int64_t rot_dim, const float* cos, const float* sin, Round round,
              RopeRounding rounding) {
  const bool products = round == Round::kBf16 && rounding == RopeRounding::kEveryOp;
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      return RopeNeoxAvx512(x, x_stride, n_tokens, n_heads, head_dim, rot_dim, cos, sin, round,
                            products);
    case Isa::kAvx2:
      return RopeNeoxAvx2(x, x_stride, n_tokens, n_heads, head_dim, rot_dim, cos, sin, round,
                          products);
    default: break;
  }
  const int64_t half = rot_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * x_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        RotatePair(v, i, half, c[i], s[i], round == Round::kBf16, products);
      }
    }
  }
}

}  // namespace cpm::kernels
