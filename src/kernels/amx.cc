#include "kernels/amx.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace cpm::kernels {
namespace {

// Linux's permission request for the tile data state (arch/x86/include/uapi/asm/prctl.h).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtileData = 18;

bool DetectAmx() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  constexpr unsigned kAmxBf16 = 1u << 22, kAmxTile = 1u << 24;
  if ((d & kAmxBf16) == 0 || (d & kAmxTile) == 0) return false;
  // The tile data is 8 KiB of state per thread, so Linux hands it out on request only; refused
  // (older kernels, or a sandbox that masks it): no AMX.
  if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtileData) != 0) return false;
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  constexpr uint32_t kTileCfgAndData = (1u << 17) | (1u << 18);
  return (lo & kTileCfgAndData) == kTileCfgAndData;
}

}  // namespace

bool AmxUsable() {
  static const bool usable = DetectAmx();
  return usable;
}

}  // namespace cpm::kernels
