// Test-only: the AVX-512 kernel files compiled over SIMDe (each *_avx512_emulated.cc) define
// their functions in cpm::kernels::emulated, so that the tests check them against the scalar
// references on CPUs without AVX-512. Declared from the list the native kernels are declared from.
#pragma once

#include "kernels/ops_avx512.h"

namespace cpm::kernels::emulated {
#include "kernels/ops_avx512_list.inc"  // IWYU pragma: export

// Whether the emulated CPU has AVX512_BF16 (matmul_avx512.cc takes vdpbf16ps or widens by it):
// the matmul tests try both.
extern bool g_have_avx512bf16;
}  // namespace cpm::kernels::emulated
