// Test-only: dense_attention_avx512.cc compiled over SIMDe's portable AVX-512 into namespace
// cpm::kernels::emulated, so that CPUs without AVX-512 BF16 check it too.
#define CPM_EMULATE_AVX512
#include "kernels/dense_attention_avx512.cc"  // NOLINT(bugprone-suspicious-include)
