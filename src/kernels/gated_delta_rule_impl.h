// SIMD variants of the gated delta rule's hot loops (kernels/ only); gated_delta_rule.cc calls
// them by ActiveIsa(). Same results as the scalar code up to FMA rounding; the AVX-512 and AVX2
// recurrent forms round alike (bitwise equal). The AVX-512 ones are declared in ops_avx512.h.
#pragma once

#include <cstdint>

#include "kernels/gated_delta_rule.h"

namespace cpm::kernels {

// GatedDeltaRuleRecurrent for dv % 8 == 0.
void GatedDeltaRuleRecurrentAvx2(const GdnHead& h, int64_t t, int64_t dk, int64_t dv);

// GatedDeltaRuleChunked over AVX2 primitives.
void GatedDeltaRuleChunkedAvx2(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t chunk,
                               float* scratch);

// The AVX2 form's Scale, Transpose and DecayMasks (gated_delta_rule_chunked.h), for the AVX-512
// form to share: called across files, so that no inline code is built under both ISAs' flags.
void GdnScaleAvx2(const float* src, int64_t n, float a, float* dst);
void GdnTransposeAvx2(const float* src, int64_t ss, int64_t rows, int64_t cols, float* dst,
                      int64_t ds);
void GdnDecayMasksAvx2(const float* gam, const float* bet, int64_t n, int64_t C, float* A,
                       float* P);

}  // namespace cpm::kernels
