#include "kernels/amx.h"

#include <cpuid.h>
#include <cstring>
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

// This thread's tile configuration, as UseTileConfig last loaded it.
struct ThreadTiles {
  AmxTileConfig config;
  bool loaded = false;
};
thread_local ThreadTiles t_tiles;

}  // namespace

// Both instructions by inline assembly, which any translation unit may emit. Not GCC 12's
// _tile_loadconfig: its asm names only a pointer's worth of the operand as read, so the compiler
// drops the stores that fill in the rest (seen: every tile left 0 × 0, and the first TDPBF16PS
// faulted).
void UseTileConfig(const AmxTileConfig& c) {
  if (t_tiles.loaded && std::memcmp(&t_tiles.config, &c, sizeof c) == 0) return;
  __asm__ volatile("ldtilecfg %0" : : "m"(c));
  t_tiles.config = c;
  t_tiles.loaded = true;
}

// Whatever the record says: Linux starts a thread with a copy of its creator's tiles, which the
// new thread's empty record knows nothing of. TILERELEASE costs ~2 ns; where AMX is not usable
// it would fault.
void ReleaseTiles() {
  if (!AmxUsable()) return;
  __asm__ volatile("tilerelease" ::: "memory");
  t_tiles.loaded = false;
}

bool AmxUsable() {
  static const bool usable = DetectAmx();
  return usable;
}

}  // namespace cpm::kernels
