// Test-only: conv1d_avx512.cc compiled over SIMDe's portable AVX-512 into namespace
// cpm::kernels::emulated, so that CPUs without AVX-512 check it too (as
// activation_avx512_emulated.cc does for SiluMul).
#define CPM_EMULATE_AVX512
#include "kernels/conv1d_avx512.cc"  // NOLINT(bugprone-suspicious-include)
