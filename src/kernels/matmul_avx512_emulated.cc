// Test-only: matmul_avx512.cc compiled over SIMDe's portable AVX-512 (libsimde-dev) into
// namespace cpm::kernels::emulated, so that the AVX-512 kernels are checked against the scalar
// reference on CPUs without AVX-512 (the dev and CI machines). Built with the AVX2 flags: SIMDe
// maps each 512-bit operation onto two 256-bit ones.
#define CPM_EMULATE_AVX512
#include "kernels/matmul_avx512.cc"  // NOLINT(bugprone-suspicious-include)
