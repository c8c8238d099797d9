// Per-ISA matmul row kernels (internal to kernels/): each computes output rows
// [row_begin, row_end) of y = x · Wᵀ for all m rows of x, with the MatMulRef signature.
#pragma once

#include "kernels/matmul.h"

namespace cpm::kernels {

void MatMulRowsAvx2(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
                    int64_t row_begin, int64_t row_end, float* y, int64_t y_stride);

}  // namespace cpm::kernels
