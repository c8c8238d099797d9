#include "kernels/rope.h"

#include "tensor/dtype.h"

namespace cpm::kernels {

void RopeNeox(float* x, int64_t x_stride, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
              int64_t rot_dim, const float* cos, const float* sin, Round round) {
  const int64_t half = rot_dim / 2;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos + t * half;
    const float* s = sin + t * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * x_stride + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        // volatile-free separate products: this file is built with -ffp-contract=off.
        const float a = v[i], b = v[i + half];
        const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
        float y0 = ac - bs, y1 = bc + as;
        if (round == Round::kBf16) {
          y0 = RoundBf16(y0);
          y1 = RoundBf16(y1);
        }
        v[i] = y0;
        v[i + half] = y1;
      }
    }
  }
}

}  // namespace cpm::kernels
