// Decoded images and the decoder front door: bytes from a request (PNG, JPEG or WebP, told apart
// by their magic bytes) to 8-bit RGB pixels equal to what HF image processors see, i.e. to
// Pillow's `Image.open(...).convert("RGB")` (Debian's python3-pil 9.4 over the same system
// libjpeg-turbo and libwebp): palette and gray expand to RGB; alpha follows AlphaPolicy.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace cpm {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> pixels;  // [height][width][3] RGB, row-major
};

// An image of `width` x `height` with its pixel buffer allocated (zeroed).
RgbImage BlankRgbImage(int width, int height);

// Decompression-bomb guard: a few hundred bytes of PNG or JPEG header can promise gigabytes of
// pixels. Pillow's own error threshold (2 x its MAX_IMAGE_PIXELS of 89,478,485), which vLLM
// keeps: a larger image is refused before any pixel is decoded (~512 MiB of RGB at the limit).
inline constexpr int64_t kMaxImagePixels = int64_t{2} * 89'478'485;

// What happens to transparency. The two differ only for files Pillow 9.4 opens as mode "RGBA":
// PNG colour type 6 (8- and 16-bit), PNG 16-bit gray+alpha (Pillow widens it to RGBA; 8-bit
// gray+alpha is "LA") and WebP whose header announces alpha. Palette or colour-key tRNS, 8-bit
// gray+alpha and JPEG never composite.
enum class AlphaPolicy {
  kDrop,  // Pillow convert("RGB"), what HF processors see: alpha is dropped, never composited
  // vLLM's loader (vllm/multimodal/image.py convert_image_mode -> rgba_to_rgb): mode-"RGBA"
  // images are pasted over white with their alpha as the mask; every other mode is kDrop.
  kVllmWhiteBackground,
};

// Corrupt, truncated, oversized or unrecognised data -> InvalidArgument naming the problem.
StatusOr<RgbImage> DecodeImage(std::string_view bytes, AlphaPolicy policy = AlphaPolicy::kDrop);

}  // namespace cpm
