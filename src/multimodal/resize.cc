// Built with -ffp-contract=off: the weights must round exactly as Pillow's (no FMA) C does.
#include "multimodal/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/check.h"

namespace cpm {
namespace {

// Pillow's fixed point: 8 bits for the pixel, 2 bits of headroom because the weights of one
// output can sum above 1 or go negative, the rest (22) for the fraction.
constexpr int kPrecisionBits = 32 - 8 - 2;
constexpr int32_t kHalf = int32_t{1} << (kPrecisionBits - 1);

// Keys' cubic convolution kernel with a = -0.5, support 2, as Pillow's bicubic_filter.
double Bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// For each output index along one axis: the first source index, how many sources it reads, and
// their fixed-point weights (`stride` slots per output, unused ones zero).
struct Taps {
  int stride = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;
};

int32_t ToFixed(double w) {
  const double scaled = w * (1 << kPrecisionBits);
  return static_cast<int32_t>(w < 0 ? scaled - 0.5 : scaled + 0.5);
}

// Pillow's precompute_coeffs + normalize_coeffs_8bpc for the box (0, in_size), with its exact
// operation order (it decides the last bit of the weights, hence of some pixels).
Taps ComputeTaps(int in_size, int out_size) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filter_scale = std::max(scale, 1.0);  // widen the kernel when shrinking
  const double support = 2.0 * filter_scale;
  const double inv_filter_scale = 1.0 / filter_scale;
  Taps taps;
  taps.stride = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.first.resize(out_size);
  taps.count.resize(out_size);
  taps.weights.assign(static_cast<size_t>(out_size) * taps.stride, 0);
  std::vector<double> w(taps.stride);
  for (int out = 0; out < out_size; ++out) {
    const double center = (out + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int n = std::min(static_cast<int>(center + support + 0.5), in_size) - lo;
    double sum = 0.0;
    for (int i = 0; i < n; ++i) {
      w[i] = Bicubic((i + lo - center + 0.5) * inv_filter_scale);
      sum += w[i];
    }
    int32_t* fixed = &taps.weights[static_cast<size_t>(out) * taps.stride];
    for (int i = 0; i < n; ++i) fixed[i] = ToFixed(sum != 0.0 ? w[i] / sum : w[i]);
    taps.first[out] = lo;
    taps.count[out] = n;
  }
  return taps;
}

uint8_t Clip8(int32_t acc) {
  return static_cast<uint8_t>(std::clamp(acc >> kPrecisionBits, 0, 255));
}

// Resamples rows [row0, row0 + out->height) of `in` along x into `out` (already sized).
void ResampleRows(const RgbImage& in, int row0, const Taps& taps, RgbImage* out) {
  for (int y = 0; y < out->height; ++y) {
    const uint8_t* src = &in.pixels[static_cast<size_t>(row0 + y) * in.width * 3];
    uint8_t* dst = &out->pixels[static_cast<size_t>(y) * out->width * 3];
    for (int x = 0; x < out->width; ++x) {
      const int32_t* k = &taps.weights[static_cast<size_t>(x) * taps.stride];
      const uint8_t* s = src + static_cast<size_t>(taps.first[x]) * 3;
      int32_t r = kHalf, g = kHalf, b = kHalf;
      for (int i = 0; i < taps.count[x]; ++i) {
        r += s[3 * i] * k[i];
        g += s[3 * i + 1] * k[i];
        b += s[3 * i + 2] * k[i];
      }
      dst[3 * x] = Clip8(r);
      dst[3 * x + 1] = Clip8(g);
      dst[3 * x + 2] = Clip8(b);
    }
  }
}

// Resamples `in` along y into `out`; output row y reads source rows taps.first[y] - row0 onward.
// Accumulating a whole row per tap gives the same integer sums as Pillow's per-pixel loop.
void ResampleColumns(const RgbImage& in, int row0, const Taps& taps, RgbImage* out) {
  const size_t row_len = static_cast<size_t>(in.width) * 3;
  std::vector<int32_t> acc(row_len);
  for (int y = 0; y < out->height; ++y) {
    std::fill(acc.begin(), acc.end(), kHalf);
    const int32_t* k = &taps.weights[static_cast<size_t>(y) * taps.stride];
    for (int i = 0; i < taps.count[y]; ++i) {
      const uint8_t* src = &in.pixels[(taps.first[y] - row0 + i) * row_len];
      for (size_t j = 0; j < row_len; ++j) acc[j] += src[j] * k[i];
    }
    uint8_t* dst = &out->pixels[y * row_len];
    for (size_t j = 0; j < row_len; ++j) dst[j] = Clip8(acc[j]);
  }
}

}  // namespace

RgbImage ResizeBicubic(const RgbImage& in, int width, int height) {
  CPM_CHECK(width > 0 && height > 0 && in.width > 0 && in.height > 0);
  CPM_CHECK(in.pixels.size() == static_cast<size_t>(in.width) * in.height * 3);
  // As Pillow, a pass runs only when its axis changes size (at scale 1 the cubic interpolates,
  // so a skipped pass and a run one agree; skipping saves the work).
  const bool horizontal = width != in.width;
  const bool vertical = height != in.height;
  if (!horizontal && !vertical) return in;
  const Taps rows = ComputeTaps(in.height, height);
  if (!horizontal) {
    RgbImage out = BlankRgbImage(width, height);
    ResampleColumns(in, 0, rows, &out);
    return out;
  }
  // The horizontal pass covers only the source rows the vertical pass will read.
  const int row0 = rows.first.front();
  const int row_end = rows.first.back() + rows.count.back();
  RgbImage mid = BlankRgbImage(width, row_end - row0);
  ResampleRows(in, row0, ComputeTaps(in.width, width), &mid);
  if (!vertical) return mid;
  RgbImage out = BlankRgbImage(width, height);
  ResampleColumns(mid, row0, rows, &out);
  return out;
}

}  // namespace cpm
