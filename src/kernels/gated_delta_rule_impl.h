// AVX2 variants of the gated delta rule's hot loops (kernels/ only); gated_delta_rule.cc calls
// them when ActiveIsa() >= kAvx2. Same results as the scalar code up to FMA rounding.
#pragma once

#include <cstdint>

#include "kernels/gated_delta_rule.h"

namespace cpm::kernels {

// GatedDeltaRuleRecurrent for dv % 8 == 0.
void GatedDeltaRuleRecurrentAvx2(const GdnHead& h, int64_t t, int64_t dk, int64_t dv);

// Y[m, n] += alpha · X[m, k] · B[k, n] (row strides xs, bs, ys).
void MatAccAvx2(const float* X, int64_t xs, int64_t m, int64_t k, const float* B, int64_t bs,
                float* Y, int64_t ys, int64_t n, float alpha);

}  // namespace cpm::kernels
