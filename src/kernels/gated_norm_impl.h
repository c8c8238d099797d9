// The scalar element formulas of gated_norm.h's ops, shared by the scalar references and the
// vector forms' tails (gated_norm.cc, built without ISA flags: called out of line, so that no
// inline copy is built under several ISAs' flags), so that a tail computes what the reference
// does, to the bit. Kernels only.
#pragma once

#include <cstdint>

namespace cpm::kernels {

// y[j] = n_j · silu(z[j]) for j in [j0, dim), n_j = bf(w[j] · bf(x[j] · inv)) when `rb` (then
// the product rounded too), x[j] · inv · w[j] otherwise: GatedRmsNorm's elements.
void GatedRmsNormElements(const float* x, const float* z, const float* w, float* y, int64_t j0,
                          int64_t dim, float inv, bool rb);

// x[j] = x[j] · s_j, s_j = sigmoid(gate[j]) (both rounded when `rb`) for j in [j0, dim):
// SigmoidMul's elements.
void SigmoidMulElements(float* x, const float* gate, int64_t j0, int64_t dim, bool rb);

}  // namespace cpm::kernels
