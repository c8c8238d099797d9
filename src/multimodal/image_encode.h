// JPEG encoding of RGB pixels (libjpeg-turbo), for the images cpmserve sends itself: the
// benchmark client's random images, as vLLM's random-mm dataset sends JPEG data URLs.
#pragma once

#include <string>

#include "multimodal/image.h"

namespace cpm {

// Baseline JPEG (4:2:0) of `image` at `quality` (1..100), or with `gray` of its red channel.
// `image` must be non-empty; libjpeg cannot fail on valid in-memory pixels.
std::string EncodeJpeg(const RgbImage& image, int quality, bool gray = false);

}  // namespace cpm
