// CPU feature detection and the instruction-set level kernels dispatch on, chosen once at start-up.
#pragma once

namespace cpm::kernels {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512bf16 = false;
  bool avx512vnni = false;
  bool avx512vbmi = false;
  bool bmi2 = false;
};

// Read once from cpuid (and the OS's XSAVE state) on first use.
const CpuFeatures& GetCpuFeatures();

enum class Isa { kScalar, kAvx2, kAvx512, kCount };
const char* ToString(Isa isa);

// The best level this CPU supports (kAvx2 needs AVX2+FMA+F16C; kAvx512 needs F+BW+VL).
Isa BestIsa();
// The level kernels use now: BestIsa() unless overridden (tests compare every level the CPU has,
// and CPM_ISA=scalar|avx2|avx512 may lower it for debugging). Never above BestIsa().
Isa ActiveIsa();
// Overrides the active level; returns false (and changes nothing) if the CPU lacks it.
bool SetActiveIsa(Isa isa);

}  // namespace cpm::kernels
