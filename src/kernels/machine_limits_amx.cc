// The AMX-BF16 peak (machine_limits.h): TDPBF16PS on tiles of model-like operands (not zeros,
// which it multiplies faster) that never leave the registers.
#include <immintrin.h>

#include <cstdint>

#include "kernels/amx.h"
#include "kernels/machine_limits.h"

namespace cpm::kernels {
namespace {

// x's tiles (4, 5) and the weights' (6, 7), 16 rows of 32 bf16 each: see PeakOperandsBf16.
struct OperandTiles {
  alignas(64) uint16_t x[2][16][32];
  alignas(64) uint16_t w[2][16][32];
};

const OperandTiles& Operands() {
  static const OperandTiles t = [] {
    OperandTiles o{};
    PeakOperandsBf16(&o.x[0][0][0], 2 * 16 * 32, 1, 1);
    PeakOperandsBf16(&o.w[0][0][0], 2 * 16 * 32, -5, 2);
    return o;
  }();
  return t;
}

}  // namespace

double AmxBf16PeakLoop(int64_t iterations) {
  // Four independent 16 × 16 f32 sums (tiles 0-3) from two x tiles (4, 5) and two weight tiles
  // (6, 7), all full size: 16 rows of 64 bytes.
  UseTileConfig(TilesOf64Bytes(16));
  // Set here: a configuration this thread already had is not loaded again, and the tiles then
  // still hold a kernel's last operands.
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  const OperandTiles& o = Operands();
  _tile_loadd(4, o.x[0], 64);
  _tile_loadd(5, o.x[1], 64);
  _tile_loadd(6, o.w[0], 64);
  _tile_loadd(7, o.w[1], 64);
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
