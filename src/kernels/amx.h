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

// LDTILECFG of `c` unless it is the configuration this thread's tiles already have. The
// instruction waits for the tiles' earlier work: ~130 ns a load on a Xeon with AMX (2 vCPUs,
// a standalone loop), where a 16-row decode matmul's task streams its 64 KiB panel in ~4 µs;
// a load per task, as the kernels once made (each call loaded and released its tiles), held
// ~1.2% of a MiniCPM4 batch-16 step's perf samples. Every kernel loads its tiles' shapes
// through here (and ReleaseTiles below), so that this thread's record of them is never stale;
// a tile's contents are then whatever the last kernel left, so each zeroes or loads its sums.
void UseTileConfig(const AmxTileConfig& c);
// Every tile `rows` rows (at most 16) of 64 bytes: 16 bf16 pairs, or 16 f32 sums, a row.
constexpr AmxTileConfig TilesOf64Bytes(int rows) {
  AmxTileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = static_cast<uint8_t>(rows);
    c.colsb[t] = 64;
  }
  return c;
}

// TILERELEASE (where AMX is usable): this thread's tiles back to their initial state (no
// configuration), so that a thread about to sleep does not carry 8 KiB of tile data through its
// context switches (the engine's pool calls it on a worker before the worker sleeps). The next
// UseTileConfig loads.
void ReleaseTiles();

}  // namespace cpm::kernels
