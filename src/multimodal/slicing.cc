// Slicing arithmetic of HF's MiniCPMV4_6 image processor (spec minicpmv46.md §6.1-6.2).
#include "multimodal/slicing.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "model/json_fields.h"
#include "multimodal/resize.h"

namespace cpm {
namespace {

// max(round(L / d) · d, d) with Python's round (half to even): nearbyint in the default mode.
int64_t EnsureDivide(double length, int64_t d) {
  return std::max(static_cast<int64_t>(std::nearbyint(length / static_cast<double>(d))) * d, d);
}

// HF `find_best_resize`: shrink (or, with upscale, grow) to about scale_resolution² pixels
// keeping the aspect ratio, then round each side to a multiple of 4 patches. `int()` truncates.
PixelSize BestResize(double h, double w, const SliceConfig& c, bool upscale) {
  const double s = static_cast<double>(c.scale_resolution);
  if (h * w > s * s || upscale) {
    const double aspect = w / h;
    h = std::trunc(s / std::sqrt(aspect));
    w = std::trunc(h * aspect);
  }
  const int64_t unit = 4 * c.patch_size;
  return {EnsureDivide(h, unit), EnsureDivide(w, unit)};
}

// HF `get_sliced_grid`: 0 rows when the image is small enough for the thumbnail alone;
// otherwise the factorization cols × rows of m−1, m or m+1 slices whose aspect ratio is
// nearest the image's (first strict minimum wins).
void SliceGrid(PixelSize image, const SliceConfig& c, int64_t* rows, int64_t* cols) {
  *rows = *cols = 0;
  const double s = static_cast<double>(c.scale_resolution);
  const double ratio = static_cast<double>(image.width) * static_cast<double>(image.height) / (s * s);
  const int64_t m = std::min<int64_t>(static_cast<int64_t>(std::ceil(ratio)), c.max_slice_nums);
  if (m <= 1) return;
  const double log_aspect = std::log(static_cast<double>(image.width) / static_cast<double>(image.height));
  double best = std::numeric_limits<double>::infinity();
  for (int64_t n : {m - 1, m, m + 1}) {
    if (n == 1 || n > c.max_slice_nums) continue;
    for (int64_t a = 1; a <= n; ++a) {
      if (n % a != 0) continue;
      const int64_t b = n / a;
      const double err = std::fabs(log_aspect - std::log(static_cast<double>(a) / static_cast<double>(b)));
      if (err < best) {
        best = err;
        *cols = a;
        *rows = b;
      }
    }
  }
}

// x = (u8 / 255 − mean) / std per channel, [H][W][3].
PixelSlice Normalize(const RgbImage& img, const SliceConfig& c) {
  PixelSlice s;
  s.size = {img.height, img.width};
  s.pixels.resize(img.pixels.size());
  for (size_t i = 0; i < img.pixels.size(); ++i) {
    const int ch = static_cast<int>(i % 3);
    s.pixels[i] = (static_cast<float>(img.pixels[i]) / 255.0f - c.image_mean[ch]) / c.image_std[ch];
  }
  return s;
}

// The `h`×`w` block at (top, left) of `img`.
RgbImage Crop(const RgbImage& img, int64_t top, int64_t left, int64_t h, int64_t w) {
  RgbImage out = BlankRgbImage(static_cast<int>(w), static_cast<int>(h));
  for (int64_t y = 0; y < h; ++y) {
    const uint8_t* src = img.pixels.data() + ((top + y) * img.width + left) * 3;
    std::copy(src, src + w * 3, out.pixels.data() + y * w * 3);
  }
  return out;
}

Status ReadFloat3(const JsonFields& f, const std::string& key, float out[3]) {
  if (!f.Has(key)) return OkStatus();
  std::vector<double> v;
  CPM_RETURN_IF_ERROR(f.FloatList(key, &v));
  if (v.size() != 3) return InvalidArgument(f.where() + ": field '" + key + "' must hold 3 numbers");
  for (int i = 0; i < 3; ++i) out[i] = static_cast<float>(v[i]);
  return OkStatus();
}

// downsample_mode, when given: "16x" (ViT merger and merger, 16 patches a token) or "4x" (the
// merger alone: 4 patches a token, four times the tokens of a slice).
Status ReadDownsampleMode(const JsonFields& f, const std::string& where, SliceConfig* c) {
  if (!f.Has("downsample_mode")) return OkStatus();
  std::string mode;
  CPM_RETURN_IF_ERROR(f.OptString("downsample_mode", &mode));
  if (mode != "16x" && mode != "4x")
    return InvalidArgument(where + ": field 'downsample_mode' must be \"16x\" or \"4x\", got \"" + mode + "\"");
  c->patches_per_token = mode == "16x" ? 16 : 4;
  return OkStatus();
}

}  // namespace

StatusOr<SliceConfig> ParseSliceConfig(const std::string& text, const std::string& path,
                                       SliceConfig c) {
  CPM_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJsonConfig(text, path));
  JsonFields f(j, path);
  CPM_RETURN_IF_ERROR(f.OptInt("scale_resolution", &c.scale_resolution));
  CPM_RETURN_IF_ERROR(f.OptInt("max_slice_nums", &c.max_slice_nums));
  CPM_RETURN_IF_ERROR(f.OptInt("patch_size", &c.patch_size));
  CPM_RETURN_IF_ERROR(f.OptBool("slice_mode", &c.slice_mode));
  CPM_RETURN_IF_ERROR(f.OptBool("use_image_id", &c.use_image_id));
  CPM_RETURN_IF_ERROR(ReadFloat3(f, "image_mean", c.image_mean));
  CPM_RETURN_IF_ERROR(ReadFloat3(f, "image_std", c.image_std));
  for (auto [name, x] : {std::pair{"scale_resolution", c.scale_resolution},
                         {"max_slice_nums", c.max_slice_nums}, {"patch_size", c.patch_size}}) {
    if (x <= 0) return InvalidArgument(path + ": field '" + name + "' must be positive");
  }
  for (float s : c.image_std) {
    if (s == 0.0f) return InvalidArgument(path + ": field 'image_std' must not hold 0");
  }
  CPM_RETURN_IF_ERROR(ReadDownsampleMode(f, path, &c));
  return c;
}

Status ApplySliceOverrides(const std::string& kwargs_json, const std::string& where, SliceConfig* c,
                           int64_t max_scale_resolution) {
  if (kwargs_json.empty()) return OkStatus();
  nlohmann::json j = nlohmann::json::parse(kwargs_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(where + ": not a JSON object: " + kwargs_json);
  static const char* kKnown[] = {"max_slice_nums", "scale_resolution", "slice_mode", "use_image_id",
                                 "downsample_mode"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    // Other processors' keys (Qwen-VL's max_pixels, fps, ...), which clients send to every
    // model: ignored with a warning, as vLLM drops the kwargs its processor does not take.
    if (std::find_if(std::begin(kKnown), std::end(kKnown), [&](const char* k) { return it.key() == k; }) ==
        std::end(kKnown)) {
      // The key as JSON: a client's text, escaped so that it cannot forge log lines.
      CPM_LOG_WARN("{}: key {} ignored (MiniCPM-V-4.6's processor takes max_slice_nums, "
                   "scale_resolution, slice_mode, use_image_id, downsample_mode)",
                   where, nlohmann::json(it.key()).dump());
    }
  }
  JsonFields f(j, where);
  CPM_RETURN_IF_ERROR(f.OptInt("max_slice_nums", &c->max_slice_nums));
  CPM_RETURN_IF_ERROR(f.OptInt("scale_resolution", &c->scale_resolution));
  CPM_RETURN_IF_ERROR(f.OptBool("slice_mode", &c->slice_mode));
  CPM_RETURN_IF_ERROR(f.OptBool("use_image_id", &c->use_image_id));
  CPM_RETURN_IF_ERROR(ReadDownsampleMode(f, where, c));
  if (c->max_slice_nums < 1 || c->scale_resolution < 4 * c->patch_size)
    return InvalidArgument(where + ": max_slice_nums must be >= 1 and scale_resolution >= " +
                           std::to_string(4 * c->patch_size));
  if (max_scale_resolution > 0 && c->scale_resolution > max_scale_resolution)
    return InvalidArgument(where + ": scale_resolution must be at most " + std::to_string(max_scale_resolution) +
                           ", got " + std::to_string(c->scale_resolution));
  return OkStatus();
}

SlicePlan PlanSlices(PixelSize image, const SliceConfig& c) {
  SlicePlan p;
  if (c.slice_mode) SliceGrid(image, c, &p.rows, &p.cols);
  const double h = static_cast<double>(image.height), w = static_cast<double>(image.width);
  p.thumbnail = BestResize(h, w, c, /*upscale=*/p.rows == 0);
  if (p.rows > 0) {
    // HF `get_refine_size`: each slice is a best resize of the image's share of a grid cell.
    const int64_t refine_w = EnsureDivide(w, p.cols), refine_h = EnsureDivide(h, p.rows);
    p.slice = BestResize(static_cast<double>(refine_h) / static_cast<double>(p.rows),
                         static_cast<double>(refine_w) / static_cast<double>(p.cols), c, /*upscale=*/true);
  }
  return p;
}

int64_t PlanPixels(const SlicePlan& plan) {
  return plan.thumbnail.height * plan.thumbnail.width +
         plan.rows * plan.cols * plan.slice.height * plan.slice.width;
}

Status CheckPlan(const SlicePlan& plan, PixelSize image, const SliceConfig& c) {
  const std::string what = "image: " + std::to_string(image.width) + "x" + std::to_string(image.height) + " pixels";
  if (const int64_t pixels = PlanPixels(plan); pixels > kMaxPlanPixels) {
    return InvalidArgument(what + " with scale_resolution " + std::to_string(c.scale_resolution) +
                           " and max_slice_nums " + std::to_string(c.max_slice_nums) + " would be resized to " +
                           std::to_string(pixels) + " pixels of thumbnail and slices, more than the limit of " +
                           std::to_string(kMaxPlanPixels));
  }
  const int64_t side = c.scale_resolution / c.patch_size, limit = 4 * side * side;
  for (PixelSize s : {plan.thumbnail, plan.slice}) {
    if ((s.height / c.patch_size) * (s.width / c.patch_size) > limit) {
      return InvalidArgument(what + " is too elongated: a slice of it would be " + std::to_string(s.width) + "x" +
                             std::to_string(s.height) + " pixels, more than " + std::to_string(limit) + " patches");
    }
  }
  return OkStatus();
}

int64_t SliceTokens(PixelSize size, const SliceConfig& c) {
  return (size.height / c.patch_size) * (size.width / c.patch_size) / c.patches_per_token;
}

PixelSize LargestSlice(const SliceConfig& c) {
  // Every thumbnail and slice is a BestResize that scales by the aspect ratio alone (a grid's
  // thumbnail too: its image is over scale_resolution²). Ratios from 1:4 to 4:1 in steps that
  // move a side by well under a pixel meet every truncation of the sides.
  constexpr int kSteps = 1 << 16;
  PixelSize best;
  for (int i = 0; i <= kSteps; ++i) {
    const double aspect = std::exp(std::log(4.0) * (2.0 * i / kSteps - 1.0));  // width / height
    const PixelSize p = BestResize(1.0, aspect, c, /*upscale=*/true);
    if (p.height * p.width > best.height * best.width) best = p;
  }
  return best;
}

int64_t ImageTokens(const SlicePlan& plan, const SliceConfig& c) {
  return SliceTokens(plan.thumbnail, c) + plan.rows * plan.cols * SliceTokens(plan.slice, c);
}

std::string PlaceholderText(const SlicePlan& plan, int64_t index, const SliceConfig& c, const std::string& pad) {
  auto pads = [&](PixelSize s) {
    std::string out;
    for (int64_t i = SliceTokens(s, c); i > 0; --i) out += pad;
    return out;
  };
  std::string text;
  if (c.use_image_id) text += "<image_id>" + std::to_string(index) + "</image_id>";
  text += "<image>" + pads(plan.thumbnail) + "</image>";
  const std::string slice = "<slice>" + pads(plan.slice) + "</slice>";
  for (int64_t r = 0; r < plan.rows; ++r) {
    if (r > 0) text += "\n";
    for (int64_t col = 0; col < plan.cols; ++col) text += slice;
  }
  return text;
}

std::vector<PixelSlice> MakeSlices(const RgbImage& image, const SlicePlan& plan, const SliceConfig& c) {
  std::vector<PixelSlice> out;
  out.push_back(Normalize(ResizeBicubic(image, static_cast<int>(plan.thumbnail.width),
                                        static_cast<int>(plan.thumbnail.height)), c));
  if (plan.rows == 0) return out;
  const RgbImage refined = ResizeBicubic(image, static_cast<int>(plan.slice.width * plan.cols),
                                         static_cast<int>(plan.slice.height * plan.rows));
  for (int64_t r = 0; r < plan.rows; ++r) {
    for (int64_t col = 0; col < plan.cols; ++col) {
      out.push_back(Normalize(Crop(refined, r * plan.slice.height, col * plan.slice.width,
                                   plan.slice.height, plan.slice.width), c));
    }
  }
  return out;
}

}  // namespace cpm
