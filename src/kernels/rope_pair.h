// One rotated pair of RopeNeox, the scalar reference's arithmetic: included only by files built
// with -ffp-contract=off (rope.cc, and rope_avx2.cc for its tail), so no product fuses into an
// FMA.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace cpm::kernels {

// v[i], v[i + half] rotated by (c, s); `round_results` / `round_products`: bf16 roundings.
inline void RotatePair(float* v, int64_t i, int64_t half, float c, float s, bool round_results,
                       bool round_products) {
  const float a = v[i], b = v[i + half];
  float ac = a * c, bs = b * s, bc = b * c, as = a * s;
  if (round_products) {
    ac = RoundBf16(ac);
    bs = RoundBf16(bs);
    bc = RoundBf16(bc);
    as = RoundBf16(as);
  }
  float y0 = ac - bs, y1 = bc + as;
  if (round_results) {
    y0 = RoundBf16(y0);
    y1 = RoundBf16(y1);
  }
  v[i] = y0;
  v[i + half] = y1;
}

}  // namespace cpm::kernels
