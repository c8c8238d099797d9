// MiniCPM-V-4.6's image slicing ("LLaVA-UHD", spec minicpmv46.md §6.1) and the placeholder text
// that stands for one image in the prompt (§6.2), as HF's MiniCPMV4_6 image processor and
// processor do them: a thumbnail of the whole image, plus, for large images, a rows × cols grid
// of slices cut from a refined resize; every side a multiple of 4 patches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "multimodal/image.h"

namespace cpm {

// preprocessor_config.json (HF defaults where a key is absent).
struct SliceConfig {
  int64_t scale_resolution = 448;
  int64_t max_slice_nums = 9;
  int64_t patch_size = 14;
  bool slice_mode = true;
  bool use_image_id = true;
  float image_mean[3] = {0.5f, 0.5f, 0.5f};
  float image_std[3] = {0.5f, 0.5f, 0.5f};
  // Patches per placeholder token: 16 ("16x": ViT merger and merger) or 4 ("4x": merger only).
  int64_t patches_per_token = 16;
};

// Parses preprocessor_config.json's text; `path` names the file in errors.
// Fields the file leaves out keep `defaults`' values.
StatusOr<SliceConfig> ParseSliceConfig(const std::string& text, const std::string& path,
                                       SliceConfig defaults = {});

// vLLM's --mm-processor-kwargs (a JSON object's text) over `c`: max_slice_nums (the model card
// suggests 36 for images), scale_resolution, slice_mode, use_image_id. Unknown keys and bad
// values are errors naming `where`; so is a scale_resolution above `max_scale_resolution`
// (0: no upper bound).
Status ApplySliceOverrides(const std::string& kwargs_json, const std::string& where, SliceConfig* c,
                           int64_t max_scale_resolution = 0);

// Sizes in pixels, height first.
struct PixelSize {
  int64_t height = 0;
  int64_t width = 0;
  bool operator==(const PixelSize&) const = default;
};

// How one image is cut: the thumbnail, and (rows > 0) the grid of equal slices.
struct SlicePlan {
  PixelSize thumbnail;
  int64_t rows = 0, cols = 0;  // 0: no slices
  PixelSize slice;             // each slice; the refined resize is rows·slice × cols·slice
};

SlicePlan PlanSlices(PixelSize image, const SliceConfig& c);

// Pixels of the plan's thumbnail and slices: what MakeSlices resizes the image to (and then
// holds as floats, 12 bytes a pixel).
int64_t PlanPixels(const SlicePlan& plan);

// The most pixels a plan's thumbnail and slices may hold (64 Mpixel: 768 MiB as floats).
inline constexpr int64_t kMaxPlanPixels = int64_t{1} << 26;

// Refuses, before any pixel is resized:
// - plans of more than kMaxPlanPixels, whatever the image's own size. The plan, not the image, sets
//   the size: a large scale_resolution upscales even a tiny image, a large max_slice_nums cuts
//   a large one into that many slices of about scale_resolution² pixels each. The released
//   config stays under 3.2 Mpixel, the model card's 36 slices under 8.6.
// - plans whose thumbnail or slices exceed 4 × (scale_resolution / patch_size)² patches: an
//   extremely elongated image (aspect ratio beyond ~1000:1) keeps its whole length in one
//   thumbnail, and attention over its patches grows with their square (a 1×100000 image would
//   be 28 576 patches, 3 GB of scores per head); ordinary images stay near (448/14)² = 1024.
Status CheckPlan(const SlicePlan& plan, PixelSize image, const SliceConfig& c);

// Placeholder tokens one slice of `size` stands for: (H/14)·(W/14)/16 in 16x mode.
int64_t SliceTokens(PixelSize size, const SliceConfig& c);
// Every placeholder token of the image (thumbnail, then slices).
int64_t ImageTokens(const SlicePlan& plan, const SliceConfig& c);

// The thumbnail or slice of the most patches that PlanSlices makes of an image whose sides are
// within 4:1 of each other (at the released scale_resolution 448: 336×672 or 672×336, 1152
// patches; a square image's is 448×448, 1024; 16:9 gives 1056): what the start-up warm-up encodes,
// so that usual images never grow the encoder's buffers after it.
PixelSize LargestSlice(const SliceConfig& c);

// The text that replaces image `index`'s `<|image_pad|>` in the rendered prompt:
//   <image_id>k</image_id><image>{pad × N}</image><slice>{pad × n}</slice>...\n<slice>...
std::string PlaceholderText(const SlicePlan& plan, int64_t index, const SliceConfig& c,
                            const std::string& pad = "<|image_pad|>");

// One slice ready for the vision tower: normalized channel values, [height][width][3] (RGB).
struct PixelSlice {
  PixelSize size;
  std::vector<float> pixels;
};

// The thumbnail, then the slices row-major (PIL-exact bicubic resizes, then (u8/255 − mean)/std).
std::vector<PixelSlice> MakeSlices(const RgbImage& image, const SlicePlan& plan, const SliceConfig& c);

}  // namespace cpm
