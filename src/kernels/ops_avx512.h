// The AVX-512 kernels (ops_avx512_list.inc), called by their dispatchers when the active ISA is
// AVX-512 (cpu_features.h); the contracts are the scalar functions'.
#pragma once

#include <cstdint>

#include "kernels/gated_delta_rule.h"
#include "kernels/matmul_impl.h"
#include "kernels/rmsnorm.h"
#include "kernels/rounding.h"

namespace cpm {
class ThreadPool;
}  // namespace cpm

namespace cpm::kernels {
#include "kernels/ops_avx512_list.inc"  // IWYU pragma: export
}  // namespace cpm::kernels
