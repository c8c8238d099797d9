// Test-only: rope_avx512.cc compiled over SIMDe's portable AVX-512 into namespace
// cpm::kernels::emulated, so that it is checked against the scalar reference on CPUs without
// AVX-512 (as matmul_avx512_emulated.cc does for the matmul).
#define CPM_EMULATE_AVX512
#include "kernels/rope_avx512.cc"  // NOLINT(bugprone-suspicious-include)
