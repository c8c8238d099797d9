// Test-only: sampling_ops_avx512.cc compiled over SIMDe's portable AVX-512 into namespace
// cpm::kernels::emulated, so that it is checked against the AVX2 form on CPUs without AVX-512.
#define CPM_EMULATE_AVX512
#include "kernels/sampling_ops_avx512.cc"  // NOLINT(bugprone-suspicious-include)
