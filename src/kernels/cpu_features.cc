#include "kernels/cpu_features.h"

#include <cpuid.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace cpm::kernels {
namespace {

uint64_t Xgetbv() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures Detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & bit_OSXSAVE;
  const bool has_fma = c & bit_FMA;
  const bool has_f16c = c & bit_F16C;
  if (!osxsave) return f;
  const uint64_t xcr0 = Xgetbv();
  const bool ymm_ok = (xcr0 & 0x6) == 0x6;
  const bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
  f.avx2 = ymm_ok && (b & bit_AVX2);
  f.fma = ymm_ok && has_fma;
  f.f16c = ymm_ok && has_f16c;
  f.avx512f = zmm_ok && (b & bit_AVX512F);
  f.avx512bw = zmm_ok && (b & bit_AVX512BW);
  f.avx512vl = zmm_ok && (b & bit_AVX512VL);
  f.avx512vnni = zmm_ok && (c & bit_AVX512VNNI);
  f.avx512vbmi = zmm_ok && (c & bit_AVX512VBMI);
  f.bmi2 = b & bit_BMI2;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512bf16 = zmm_ok && (a & bit_AVX512BF16);
  return f;
}

Isa FromEnv(Isa best) {
  const char* s = std::getenv("CPM_ISA");
  if (!s) return best;
  Isa want = best;
  if (!std::strcmp(s, "scalar")) want = Isa::kScalar;
  else if (!std::strcmp(s, "avx2")) want = Isa::kAvx2;
  else if (!std::strcmp(s, "avx512")) want = Isa::kAvx512;
  return static_cast<int>(want) <= static_cast<int>(best) ? want : best;
}

std::atomic<int>& ActiveSlot() {
  static std::atomic<int> active{static_cast<int>(FromEnv(BestIsa()))};
  return active;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

const char* ToString(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kCount: break;
  }
  return "?";
}

Isa BestIsa() {
  const CpuFeatures& f = GetCpuFeatures();
  if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) return Isa::kAvx512;
  if (f.avx2 && f.fma && f.f16c) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa ActiveIsa() { return static_cast<Isa>(ActiveSlot().load(std::memory_order_relaxed)); }

bool SetActiveIsa(Isa isa) {
  if (static_cast<int>(isa) > static_cast<int>(BestIsa())) return false;
  ActiveSlot().store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

}  // namespace cpm::kernels
