// Bicubic resize, bit-exact with Pillow's `Image.resize((width, height), Image.BICUBIC)` on an RGB
// image (libImaging/Resample.c as of Pillow 9.4), which is what HF image processors call: a
// separable filter (Keys cubic, a = -0.5) widened by the scale when shrinking (antialiasing),
// weights normalised in double then rounded to 22-bit fixed point, integer accumulation.
#pragma once

#include "multimodal/image.h"

namespace cpm {

// `width` and `height` must be positive; `in` must be a non-empty image.
RgbImage ResizeBicubic(const RgbImage& in, int width, int height);

}  // namespace cpm
