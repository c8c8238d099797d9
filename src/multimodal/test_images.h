// Test-only encoders: small PNG (by hand over zlib, any colour type, bit depth and Adam7),
// JPEG (libjpeg) and WebP (libwebp) files for the decoder tests, and deterministic images.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "multimodal/image.h"
#include "multimodal/image_encode.h"

namespace cpm::test_images {

struct PngSpec {
  int width = 0;
  int height = 0;
  int color_type = 2;  // 0 gray, 2 RGB, 3 palette, 4 gray+alpha, 6 RGBA
  int bit_depth = 8;
  std::vector<uint16_t> samples;  // [height][width][channels], unpacked; empty: no image data
  std::vector<uint8_t> palette;   // PLTE: RGB triples
  std::vector<uint8_t> trns;      // tRNS chunk body, as stored
  bool interlace = false;         // Adam7
};
std::string EncodePng(const PngSpec& spec);

// Baseline JPEG (4:2:0 for colour) of an RGB image, or of its red channel when `gray`.
inline std::string EncodeJpeg(const RgbImage& image, int quality, bool gray = false) {
  return cpm::EncodeJpeg(image, quality, gray);
}

// WebP: lossless from RGBA (exact: colours under alpha 0 are kept), lossy from RGB.
std::string EncodeWebpLossless(int width, int height, const std::vector<uint8_t>& rgba);
std::string EncodeWebpLossy(const RgbImage& image, int quality);

// Pixels from a fixed-seed generator (noise) or a smooth gradient (compresses well).
RgbImage NoiseImage(int width, int height, uint32_t seed);
RgbImage GradientImage(int width, int height);

}  // namespace cpm::test_images
