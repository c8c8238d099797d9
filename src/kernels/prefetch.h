// Software prefetch requests that the optimizer cannot drop. GCC 12's IPA mod/ref analysis
// summarises _mm_prefetch (__builtin_prefetch) as touching nothing, so a lambda or function whose
// only work is prefetching is taken for one that does nothing, and its calls are deleted: the
// AMX score tiles' KV requests (a `request` lambda around RequestDims) and the short
// convolution's row requests compiled to no instruction at all (objdump: no prefetcht0 in
// attention_amx.o or conv1d_avx512.o), while the same requests written inline were kept. A
// volatile asm is never deleted or merged, and is the same single instruction.
#pragma once

namespace cpm::kernels {

// The line holding p into L1 (prefetcht0) or into L2 (prefetcht1); p need not be valid memory
// (a prefetch never faults), so requests may run past the end of a buffer.
inline void PrefetchL1(const void* p) {
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
}
inline void PrefetchL2(const void* p) {
  asm volatile("prefetcht1 %0" : : "m"(*static_cast<const char*>(p)));
}

}  // namespace cpm::kernels
