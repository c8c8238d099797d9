// Test-only: gated_norm_avx512.cc compiled over SIMDe's portable AVX-512 into namespace
// cpm::kernels::emulated, so that CPUs without AVX-512 check it too.
#define CPM_EMULATE_AVX512
#include "kernels/gated_norm_avx512.cc"  // NOLINT(bugprone-suspicious-include)
