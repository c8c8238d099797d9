// AVX-512 variants of the elementwise ops, called by their dispatchers when the active ISA is
// AVX-512 (cpu_features.h); the contracts are the scalar functions'.
#pragma once

#include <cstdint>

#include "kernels/rounding.h"

namespace cpm::kernels {

void SiluMulAvx512(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
                   float* out, int64_t out_stride, int64_t rows, int64_t dim, Round round);

}  // namespace cpm::kernels
