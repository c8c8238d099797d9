// AMX (Intel's Advanced Matrix Extensions, Sapphire Rapids and later): whether this process may
// use the tiles, and the tile configuration LDTILECFG takes. Kernels on tiles live in files
// built with -mamx-tile -mamx-bf16 (matmul_amx.cc, machine_limits_amx.cc).
#pragma once

#include <cstdint>

namespace cpm::kernels {

// Whether this CPU has AMX-TILE and AMX-BF16 and the OS granted this process the tile data
// state (Linux ≥ 5.16 asks for it; asked once, the grant is process-wide).
bool AmxUsable();

// LDTILECFG's 64-byte operand, palette 1: tile i has rows[i] rows of colsb[i] bytes. Loading a
// configuration zeroes every tile.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(AmxTileConfig) == 64);

// LDTILECFG. Not GCC 12's _tile_loadconfig: its asm names only a pointer's worth of the operand
// as read, so the compiler drops the stores that fill in the rest (seen: every tile left 0 × 0,
// and the first TDPBF16PS faulted).
inline void LoadTileConfig(const AmxTileConfig& c) { __asm__ volatile("ldtilecfg %0" : : "m"(c)); }
// Every tile `rows` rows (at most 16) of 64 bytes: 16 bf16 pairs, or 16 f32 sums, a row.
inline AmxTileConfig TilesOf64Bytes(int rows) {
  AmxTileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = static_cast<uint8_t>(rows);
    c.colsb[t] = 64;
  }
  return c;
}

// TILERELEASE: the tiles back to their initial state (no configuration), so that a thread that
// then sleeps does not carry 8 KiB of tile data through its context switches. As the load, an
// instruction any translation unit may emit.
inline void ReleaseTiles() { __asm__ volatile("tilerelease" ::: "memory"); }

}  // namespace cpm::kernels
