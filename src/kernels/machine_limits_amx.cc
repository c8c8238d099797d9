// The AMX-BF16 peak (machine_limits.h): TDPBF16PS on tiles that never leave the registers.
#include <immintrin.h>

#include "kernels/amx.h"
#include "kernels/machine_limits.h"

namespace cpm::kernels {

double AmxBf16PeakLoop(int64_t iterations) {
  // Four independent 16 × 16 f32 sums (tiles 0-3) from two x tiles (4, 5) and two weight tiles
  // (6, 7), all full size: 16 rows of 64 bytes.
  UseTileConfig(TilesOf64Bytes(16));
  // Zeroed here: a configuration this thread already had is not loaded again, and the tiles
  // then still hold a kernel's last operands.
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  // A TDPBF16PS takes ~16 cycles where the FMA loop's iteration takes ~6: a sixteenth as many.
  const int64_t rounds = iterations / 16;
  for (int64_t r = 0; r < rounds; ++r) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  ReleaseTiles();
  constexpr double kFlopsPerTile = 2.0 * 16 * 16 * 32;
  return static_cast<double>(rounds) * 4 * kFlopsPerTile;
}

}  // namespace cpm::kernels
