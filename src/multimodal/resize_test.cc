// ResizeBicubic: sizes and pass structure, invariants (constants stay constant, the two passes
// compose), and golden bytes from Pillow 9.4 so bit-exactness is pinned even without Python
// (the full Pillow comparison is tests/conformance/pil_resize_check.py).
#include "multimodal/resize.h"

#include <gtest/gtest.h>

#include "multimodal/test_images.h"

namespace cpm {
namespace {

// 5 x 3, pixel (x, y) channel c = (37x + 91y + 53c) mod 256: the input of the golden cases.
RgbImage Golden5x3() {
  RgbImage image{5, 3, {}};
  for (int y = 0; y < 3; ++y)
    for (int x = 0; x < 5; ++x)
      for (int c = 0; c < 3; ++c) image.pixels.push_back(static_cast<uint8_t>((x * 37 + y * 91 + c * 53) % 256));
  return image;
}

// Expected bytes printed by Pillow 9.4: Image.frombytes("RGB", (5, 3), ...).resize(size, BICUBIC).
TEST(ResizeBicubic, MatchesPillowGoldenBytes) {
  const RgbImage in = Golden5x3();
  EXPECT_EQ(ResizeBicubic(in, 3, 2).pixels,
            (std::vector<uint8_t>{41, 98, 161, 110, 170, 140, 174, 168, 176, 172, 151, 110, 96, 112,
                                  89, 117, 117, 125}));
  EXPECT_EQ(ResizeBicubic(in, 1, 1).pixels, (std::vector<uint8_t>{117, 136, 131}));
  EXPECT_EQ(ResizeBicubic(in, 2, 3).pixels,
            (std::vector<uint8_t>{32, 85, 138, 116, 169, 222, 123, 184, 168, 207, 171, 57, 153, 100,
                                  64, 42, 87, 148}));
  const std::vector<uint8_t> up = ResizeBicubic(in, 8, 5).pixels;
  ASSERT_EQ(up.size(), 8u * 5 * 3);
  const std::vector<uint8_t> first_row = {0, 43, 96, 6, 59, 111, 32, 85, 139, 55, 108, 175,
                                          79, 132, 206, 102, 155, 228, 128, 193, 253, 144, 218, 255};
  EXPECT_EQ(std::vector<uint8_t>(up.begin(), up.begin() + 24), first_row);
  const std::vector<uint8_t> last_row = {146, 32, 218, 0, 59, 51, 20, 96, 0, 52, 126, 21,
                                         75, 148, 49, 113, 174, 65, 138, 190};
  EXPECT_EQ(std::vector<uint8_t>(up.end() - 20, up.end()), last_row);
  // Vertical only (width unchanged).
  const std::vector<uint8_t> tall = ResizeBicubic(in, 5, 7).pixels;
  EXPECT_EQ(std::vector<uint8_t>(tall.begin(), tall.begin() + 15),
            (std::vector<uint8_t>{0, 44, 97, 28, 81, 134, 65, 118, 196, 102, 155, 233, 139, 217, 255}));
}

TEST(ResizeBicubic, OutputHasRequestedSize) {
  const RgbImage in = test_images::NoiseImage(97, 61, 1);
  for (auto [w, h] : {std::pair{1, 1}, {97, 1}, {1, 61}, {200, 61}, {97, 130}, {13, 7}, {500, 400}}) {
    const RgbImage out = ResizeBicubic(in, w, h);
    EXPECT_EQ(out.width, w);
    EXPECT_EQ(out.height, h);
    EXPECT_EQ(out.pixels.size(), static_cast<size_t>(w) * h * 3);
  }
}

TEST(ResizeBicubic, SameSizeIsACopy) {
  const RgbImage in = test_images::NoiseImage(31, 17, 2);
  EXPECT_EQ(ResizeBicubic(in, 31, 17).pixels, in.pixels);
}

TEST(ResizeBicubic, ConstantImageStaysConstant) {
  RgbImage in{23, 11, std::vector<uint8_t>(23 * 11 * 3)};
  for (size_t i = 0; i < in.pixels.size(); ++i) in.pixels[i] = static_cast<uint8_t>(i % 3 == 0 ? 0 : i % 3 == 1 ? 137 : 255);
  for (auto [w, h] : {std::pair{1, 1}, {5, 3}, {23, 40}, {100, 11}, {1000, 56}}) {
    const RgbImage out = ResizeBicubic(in, w, h);
    for (size_t i = 0; i < out.pixels.size(); ++i) {
      ASSERT_EQ(out.pixels[i], in.pixels[i % 3]) << w << "x" << h << " at " << i;
    }
  }
}

// Pillow's two passes clip to 8 bits in between, so resizing x then y separately is exact.
TEST(ResizeBicubic, PassesCompose) {
  const RgbImage in = test_images::NoiseImage(64, 48, 3);
  for (auto [w, h] : {std::pair{17, 100}, {150, 9}, {33, 21}}) {
    const RgbImage once = ResizeBicubic(in, w, h);
    const RgbImage twice = ResizeBicubic(ResizeBicubic(in, w, in.height), w, h);
    EXPECT_EQ(once.pixels, twice.pixels) << w << "x" << h;
  }
}

// Each output row depends only on the same input row when only the width changes.
TEST(ResizeBicubic, HorizontalOnlyKeepsRowsIndependent) {
  const RgbImage in = test_images::NoiseImage(40, 6, 4);
  const RgbImage out = ResizeBicubic(in, 13, 6);
  for (int y = 0; y < 6; ++y) {
    RgbImage row{40, 1, std::vector<uint8_t>(in.pixels.begin() + y * 120, in.pixels.begin() + (y + 1) * 120)};
    const RgbImage one = ResizeBicubic(row, 13, 1);  // 40x1 -> 13x1: horizontal only as well
    EXPECT_EQ(one.pixels, std::vector<uint8_t>(out.pixels.begin() + y * 39, out.pixels.begin() + (y + 1) * 39));
  }
}

}  // namespace
}  // namespace cpm
