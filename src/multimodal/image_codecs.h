// The per-format decoders behind DecodeImage (image.h); private to src/multimodal. Each gets the
// whole encoded file and returns RGB pixels already checked against kMaxImagePixels.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "multimodal/image.h"

namespace cpm::image_internal {

StatusOr<RgbImage> DecodePng(std::string_view bytes, AlphaPolicy policy);
StatusOr<RgbImage> DecodeJpeg(std::string_view bytes);  // never has alpha
StatusOr<RgbImage> DecodeWebp(std::string_view bytes, AlphaPolicy policy);

// Called by each decoder once the header gives the size, before any pixel memory is allocated.
Status CheckImageSize(int64_t width, int64_t height, std::string_view format);

// Fills `image` (already allocated) from straight RGBA pixels of the same size, composited over
// white as AlphaPolicy::kVllmWhiteBackground prescribes.
void CompositeOverWhite(const uint8_t* rgba, RgbImage* image);

}  // namespace cpm::image_internal
