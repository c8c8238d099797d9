// Slicing arithmetic against the worked examples of minicpmv46.md §6.1 (computed there from
// HF's rules), the placeholder layout of §6.2, and the slices' pixels.
#include "multimodal/slicing.h"

#include "multimodal/resize.h"

#include <gtest/gtest.h>

namespace cpm {
namespace {

struct Example {
  PixelSize image;
  int64_t rows, cols;
  PixelSize thumbnail;
  int64_t thumb_tokens;
  PixelSize slice;
  int64_t slice_tokens, total;
};

TEST(SlicingTest, WorkedExamplesOfTheSpec) {
  const SliceConfig c;  // the released preprocessor_config.json's values are the defaults
  const Example examples[] = {
      {{896, 1344}, 2, 3, {392, 560}, 70, {448, 448}, 64, 454},
      {{720, 1280}, 2, 3, {336, 616}, 66, {392, 504}, 63, 444},
      {{1080, 1920}, 2, 4, {336, 616}, 66, {448, 448}, 64, 578},
      {{3000, 1000}, 4, 2, {784, 280}, 70, {560, 392}, 70, 630},
      {{100, 100}, 0, 0, {448, 448}, 64, {0, 0}, 0, 64},
  };
  for (const Example& e : examples) {
    SCOPED_TRACE(std::to_string(e.image.height) + "x" + std::to_string(e.image.width));
    const SlicePlan p = PlanSlices(e.image, c);
    EXPECT_EQ(p.rows, e.rows);
    EXPECT_EQ(p.cols, e.cols);
    EXPECT_EQ(p.thumbnail, e.thumbnail);
    EXPECT_EQ(SliceTokens(p.thumbnail, c), e.thumb_tokens);
    if (e.rows > 0) {
      EXPECT_EQ(p.slice, e.slice);
      EXPECT_EQ(SliceTokens(p.slice, c), e.slice_tokens);
    }
    EXPECT_EQ(ImageTokens(p, c), e.total);
  }
}

TEST(SlicingTest, EverySideIsAMultipleOfFourPatches) {
  const SliceConfig c;
  for (int64_t h : {1, 13, 56, 57, 300, 449, 1000, 4000}) {
    for (int64_t w : {1, 17, 112, 447, 999, 2500}) {
      const SlicePlan p = PlanSlices({h, w}, c);
      for (PixelSize s : {p.thumbnail, p.slice}) {
        if (s.height == 0 && p.rows == 0) continue;
        EXPECT_EQ(s.height % 56, 0) << h << "x" << w;
        EXPECT_EQ(s.width % 56, 0) << h << "x" << w;
        EXPECT_GT(s.height * s.width, 0) << h << "x" << w;
      }
      EXPECT_LE(p.rows * p.cols, c.max_slice_nums);
    }
  }
}

// LargestSlice against PlanSlices over a grid of image sizes within 4:1: no thumbnail or slice
// has more pixels (so patches), and some have as many. At 448, 16:9 and 2:1 images exceed a
// square one's 448×448.
TEST(SlicingTest, LargestSliceBoundsTheSlicesOfUsualImages) {
  SliceConfig released, other;
  other.scale_resolution = 500;
  other.max_slice_nums = 36;
  for (const SliceConfig& c : {released, other}) {
    const PixelSize largest = LargestSlice(c);
    EXPECT_EQ(largest.height % 56, 0);
    EXPECT_EQ(largest.width % 56, 0);
    int64_t most = 0;
    for (int64_t h = 40; h <= 3000; h += 7) {
      for (int64_t w = 40; w <= 3000; w += 11) {
        if (std::max(h, w) > 4 * std::min(h, w)) continue;
        const SlicePlan p = PlanSlices({h, w}, c);
        for (PixelSize s : {p.thumbnail, p.slice}) {
          EXPECT_LE(s.height * s.width, largest.height * largest.width) << h << "x" << w;
          most = std::max(most, s.height * s.width);
        }
      }
    }
    EXPECT_EQ(most, largest.height * largest.width) << c.scale_resolution;
  }
  EXPECT_EQ(LargestSlice(released).height * LargestSlice(released).width, 336 * 672);
  EXPECT_EQ(PlanSlices({1080, 1920}, released).thumbnail, (PixelSize{336, 616}));
}

TEST(SlicingTest, ExtremelyElongatedImagesAreRefused) {
  const SliceConfig c;
  // Ordinary shapes, up to 256:1, pass; the patch limit is 4 × 32² = 4096.
  for (PixelSize ok : {PixelSize{896, 1344}, {3000, 1000}, {100, 100}, {20, 5120}, {7000, 30}}) {
    EXPECT_TRUE(CheckPlan(PlanSlices(ok, c), ok, c).ok()) << ok.height << "x" << ok.width;
  }
  for (PixelSize bad : {PixelSize{1, 100000}, {60000, 20}}) {
    const Status st = CheckPlan(PlanSlices(bad, c), bad, c);
    ASSERT_FALSE(st.ok()) << bad.height << "x" << bad.width;
    EXPECT_NE(st.message().find("too elongated"), std::string::npos) << st.message();
  }
}

// A plan's pixels are bounded whatever the config: slices never hold more than the largest
// image the decoder accepts, and the check runs on the plan, before anything is resized.
TEST(SlicingTest, PlansBeyondTheImagePixelLimitAreRefused) {
  const SliceConfig c;
  // The released config: at most about 3.2 Mpixel (the most elongated images that pass).
  for (PixelSize ok : {PixelSize{896, 1344}, {100, 100}, {8192, 8192}, {50000, 50}, {50, 50000}}) {
    const SlicePlan p = PlanSlices(ok, c);
    EXPECT_TRUE(CheckPlan(p, ok, c).ok()) << ok.height << "x" << ok.width;
    EXPECT_LE(PlanPixels(p), 3'200'000) << ok.height << "x" << ok.width;
  }
  EXPECT_EQ(PlanPixels(PlanSlices({2688, 2688}, c)), 10 * 448 * 448);  // thumbnail + 3×3
  // scale_resolution upscales even a 64×64 image: 8192 is a 8176² thumbnail, just under
  // 2^26 pixels; 8960 is over; 40000 would be 1.6 Gpixel (19 GB of floats).
  const PixelSize tiny{64, 64};
  SliceConfig big = c;
  big.scale_resolution = 8192;
  EXPECT_TRUE(CheckPlan(PlanSlices(tiny, big), tiny, big).ok());
  for (int64_t s : {8960, 40000}) {
    big.scale_resolution = s;
    const Status st = CheckPlan(PlanSlices(tiny, big), tiny, big);
    ASSERT_FALSE(st.ok()) << s;
    EXPECT_NE(st.message().find("image: 64x64 pixels with scale_resolution " + std::to_string(s)), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("more than the limit of 67108864"), std::string::npos) << st.message();
  }
  // max_slice_nums cuts a large image into that many slices of about scale_resolution²: the
  // plan grows with the image, so the decoder's limit on the image bounds it too.
  SliceConfig many = c;
  many.max_slice_nums = 1000;
  const SlicePlan p = PlanSlices({8000, 8000}, many);
  EXPECT_EQ(p.rows * p.cols, 320);
  EXPECT_TRUE(CheckPlan(p, {8000, 8000}, many).ok());
  EXPECT_LE(PlanPixels(p), kMaxPlanPixels);
}

TEST(SlicingTest, SliceModeOffAndFourTimesMode) {
  SliceConfig c;
  c.slice_mode = false;
  const SlicePlan p = PlanSlices({896, 1344}, c);
  EXPECT_EQ(p.rows, 0);
  EXPECT_EQ(p.thumbnail, (PixelSize{392, 560}));  // shrunk, not upscaled: the image is big
  c.patches_per_token = 4;
  EXPECT_EQ(SliceTokens({392, 560}, c), 28 * 40 / 4);
}

TEST(SlicingTest, PlaceholderLayout) {
  SliceConfig c;
  c.scale_resolution = 56;  // small plans: one token per 56×56 slice
  SlicePlan p;
  p.thumbnail = {56, 112};
  p.rows = 2;
  p.cols = 3;
  p.slice = {56, 56};
  const std::string pad = "P";
  EXPECT_EQ(PlaceholderText(p, 4, c, pad),
            "<image_id>4</image_id><image>PP</image>"
            "<slice>P</slice><slice>P</slice><slice>P</slice>\n"
            "<slice>P</slice><slice>P</slice><slice>P</slice>");
  c.use_image_id = false;
  p.rows = p.cols = 0;
  EXPECT_EQ(PlaceholderText(p, 0, c, pad), "<image>PP</image>");
}

TEST(SlicingTest, SlicesAreTheThumbnailThenTheGridRowMajor) {
  SliceConfig c;
  c.scale_resolution = 56;
  c.max_slice_nums = 2;
  RgbImage img;
  img.height = 112;
  img.width = 224;
  img.pixels.resize(112 * 224 * 3);
  for (size_t i = 0; i < img.pixels.size(); ++i) img.pixels[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  const SlicePlan p = PlanSlices({112, 224}, c);
  ASSERT_EQ(p.rows, 1);  // 2 slices side by side: the aspect ratio 2:1 exactly
  ASSERT_EQ(p.cols, 2);
  ASSERT_EQ(p.slice, (PixelSize{56, 56}));
  ASSERT_EQ(p.thumbnail, (PixelSize{56, 56}));
  const std::vector<PixelSlice> s = MakeSlices(img, p, c);
  ASSERT_EQ(s.size(), 3u);
  auto normalized = [](uint8_t u) { return (static_cast<float>(u) / 255.0f - 0.5f) / 0.5f; };
  // The thumbnail is the whole image resized; slice k is the k-th 56×56 column block of the
  // image resized to the grid (56×112).
  const RgbImage thumb = ResizeBicubic(img, 56, 56), refined = ResizeBicubic(img, 112, 56);
  for (size_t i = 0; i < thumb.pixels.size(); ++i) ASSERT_EQ(s[0].pixels[i], normalized(thumb.pixels[i])) << i;
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(s[1 + k].size, (PixelSize{56, 56}));
    for (int y = 0; y < 56; ++y)
      for (int x = 0; x < 56; ++x)
        for (int ch = 0; ch < 3; ++ch)
          ASSERT_EQ(s[1 + k].pixels[(y * 56 + x) * 3 + ch],
                    normalized(refined.pixels[(y * 112 + k * 56 + x) * 3 + ch])) << k << " " << y << " " << x;
  }
  // Normalization: (u8/255 − mean)/std per channel.
  EXPECT_FLOAT_EQ(normalized(255), 1.0f);
  EXPECT_FLOAT_EQ(normalized(0), -1.0f);
}

TEST(SlicingTest, MmProcessorKwargsOverrideTheFile) {
  SliceConfig c;
  ASSERT_TRUE(ApplySliceOverrides(R"({"max_slice_nums": 36, "use_image_id": false})", "--k", &c).ok());
  EXPECT_EQ(c.max_slice_nums, 36);
  EXPECT_FALSE(c.use_image_id);
  EXPECT_EQ(c.scale_resolution, 448);  // untouched
  ASSERT_TRUE(ApplySliceOverrides("", "--k", &c).ok());
  EXPECT_EQ(c.max_slice_nums, 36);
  // Keys the processor does not take are ignored (with a warning), as vLLM drops them.
  SliceConfig other;
  ASSERT_TRUE(ApplySliceOverrides(R"({"max_pixels": 4, "max_slice_num": 4})", "--k", &other).ok());
  EXPECT_EQ(other.max_slice_nums, SliceConfig().max_slice_nums);
  for (const char* bad : {R"({"max_slice_nums": 0})", R"({"scale_resolution": 14})",
                          R"({"slice_mode": "yes"})", "[1]"}) {
    SliceConfig d;
    const Status st = ApplySliceOverrides(bad, "--mm-processor-kwargs", &d);
    ASSERT_FALSE(st.ok()) << bad;
    EXPECT_EQ(st.message().rfind("--mm-processor-kwargs", 0), 0u) << st.message();
  }
}

TEST(SlicingTest, ScaleResolutionOverridesHaveAnUpperBound) {
  SliceConfig c;
  // Without a bound (the server's own --mm-processor-kwargs) any value >= 4 patches is taken.
  ASSERT_TRUE(ApplySliceOverrides(R"({"scale_resolution": 40000})", "--k", &c).ok());
  EXPECT_EQ(c.scale_resolution, 40000);
  // A request's: at most the bound, which is inclusive; refused values leave a clear message.
  SliceConfig d;
  ASSERT_TRUE(ApplySliceOverrides(R"({"scale_resolution": 980, "max_slice_nums": 36})", "mm_processor_kwargs", &d,
                                  980).ok());
  EXPECT_EQ(d.scale_resolution, 980);
  EXPECT_EQ(d.max_slice_nums, 36);
  for (int64_t s : {981, 2240, 40000}) {
    SliceConfig e;
    const Status st = ApplySliceOverrides(R"({"scale_resolution": )" + std::to_string(s) + "}", "mm_processor_kwargs",
                                          &e, 980);
    ASSERT_FALSE(st.ok()) << s;
    EXPECT_EQ(st.message(), "mm_processor_kwargs: scale_resolution must be at most 980, got " + std::to_string(s));
  }
}

TEST(SlicingTest, ParsesThePreprocessorConfig) {
  auto c = ParseSliceConfig(R"({"max_slice_nums": 36, "scale_resolution": 448, "patch_size": 14,
                                "use_image_id": false, "image_mean": [0.1, 0.2, 0.3]})", "p.json");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->max_slice_nums, 36);
  EXPECT_FALSE(c->use_image_id);
  EXPECT_FLOAT_EQ(c->image_mean[2], 0.3f);
  auto bad = ParseSliceConfig(R"({"image_std": [0.5, 0.5]})", "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("p.json: field 'image_std'"), std::string::npos);
  bad = ParseSliceConfig(R"({"downsample_mode": "8x"})", "p.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("downsample_mode"), std::string::npos);
}

}  // namespace
}  // namespace cpm
