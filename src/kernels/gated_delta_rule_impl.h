// SIMD variants of the gated delta rule's hot loops (kernels/ only); gated_delta_rule.cc calls
// them by ActiveIsa(). Same results as the scalar code up to FMA rounding; the AVX-512 and AVX2
// recurrent forms round alike (bitwise equal).
#pragma once

#include <cstdint>

#include "kernels/gated_delta_rule.h"

namespace cpm::kernels {

// GatedDeltaRuleRecurrent for dv % 8 == 0.
void GatedDeltaRuleRecurrentAvx2(const GdnHead& h, int64_t t, int64_t dk, int64_t dv);

// GatedDeltaRuleRecurrent for dv % 16 == 0.
void GatedDeltaRuleRecurrentAvx512(const GdnHead& h, int64_t t, int64_t dk, int64_t dv);

// GatedDeltaRuleChunked over AVX2 primitives.
void GatedDeltaRuleChunkedAvx2(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t chunk,
                               float* scratch);

}  // namespace cpm::kernels
