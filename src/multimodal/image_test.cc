// DecodeImage on PNG, JPEG and WebP files encoded in-test: every PNG colour type and bit depth
// converts as Pillow's convert("RGB") does, lossy formats stay close, and damaged, truncated,
// oversized or unknown data is refused with a clear message. AlphaPolicy::kVllmWhiteBackground
// composites exactly the files Pillow opens as "RGBA" over white, with Pillow's paste rounding.
#include "multimodal/image.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "multimodal/test_images.h"

namespace cpm {
namespace {

using test_images::EncodePng;
using test_images::PngSpec;

RgbImage MustDecode(const std::string& bytes, AlphaPolicy policy = AlphaPolicy::kDrop) {
  StatusOr<RgbImage> image = DecodeImage(bytes, policy);
  EXPECT_TRUE(image.ok()) << image.status().ToString();
  return image.ok() ? std::move(*image) : RgbImage{};
}

// Expects the error to be InvalidArgument containing `needle`.
void ExpectError(const std::string& bytes, const std::string& needle) {
  StatusOr<RgbImage> image = DecodeImage(bytes);
  ASSERT_FALSE(image.ok()) << "decoded although " << needle << " was expected";
  EXPECT_EQ(image.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(image.status().message().find(needle), std::string::npos) << image.status().message();
}

std::vector<uint8_t> Pixel(const RgbImage& image, int x, int y) {
  const uint8_t* p = &image.pixels[(static_cast<size_t>(y) * image.width + x) * 3];
  return {p[0], p[1], p[2]};
}

int MaxAbsDiff(const RgbImage& a, const RgbImage& b) {
  int worst = 0;
  for (size_t i = 0; i < a.pixels.size(); ++i) worst = std::max(worst, std::abs(a.pixels[i] - b.pixels[i]));
  return worst;
}

PngSpec Spec(int w, int h, int color_type, int bit_depth, std::vector<uint16_t> samples) {
  PngSpec s;
  s.width = w;
  s.height = h;
  s.color_type = color_type;
  s.bit_depth = bit_depth;
  s.samples = std::move(samples);
  return s;
}

PngSpec RgbSpec(const RgbImage& image) {
  return Spec(image.width, image.height, 2, 8, {image.pixels.begin(), image.pixels.end()});
}

TEST(DecodePng, Rgb8IsExact) {
  const RgbImage in = test_images::NoiseImage(7, 5, 1);
  const RgbImage out = MustDecode(EncodePng(RgbSpec(in)));
  EXPECT_EQ(out.width, 7);
  EXPECT_EQ(out.height, 5);
  EXPECT_EQ(out.pixels, in.pixels);
}

TEST(DecodePng, RgbaDropsAlphaWithoutCompositing) {
  const RgbImage out = MustDecode(EncodePng(Spec(2, 1, 6, 8, {10, 20, 30, 0, 200, 100, 50, 128})));
  EXPECT_EQ(out.pixels, (std::vector<uint8_t>{10, 20, 30, 200, 100, 50}));
}

TEST(DecodePng, GrayAndGrayAlphaReplicate) {
  EXPECT_EQ(MustDecode(EncodePng(Spec(2, 1, 0, 8, {0, 77}))).pixels,
            (std::vector<uint8_t>{0, 0, 0, 77, 77, 77}));
  EXPECT_EQ(MustDecode(EncodePng(Spec(2, 1, 4, 8, {9, 0, 200, 255}))).pixels,
            (std::vector<uint8_t>{9, 9, 9, 200, 200, 200}));
}

TEST(DecodePng, LowBitGrayScalesToFullRange) {
  EXPECT_EQ(MustDecode(EncodePng(Spec(3, 1, 0, 1, {0, 1, 1}))).pixels,
            (std::vector<uint8_t>{0, 0, 0, 255, 255, 255, 255, 255, 255}));
  EXPECT_EQ(MustDecode(EncodePng(Spec(4, 1, 0, 2, {0, 1, 2, 3}))).pixels,
            (std::vector<uint8_t>{0, 0, 0, 85, 85, 85, 170, 170, 170, 255, 255, 255}));
  EXPECT_EQ(MustDecode(EncodePng(Spec(2, 1, 0, 4, {5, 15}))).pixels,
            (std::vector<uint8_t>{85, 85, 85, 255, 255, 255}));
}

TEST(DecodePng, SixteenBitKeepsHighByte) {
  EXPECT_EQ(MustDecode(EncodePng(Spec(1, 1, 2, 16, {0x1234, 0xFF80, 0x0080}))).pixels,
            (std::vector<uint8_t>{0x12, 0xFF, 0x00}));
  EXPECT_EQ(MustDecode(EncodePng(Spec(1, 1, 6, 16, {0xABCD, 0x0001, 0x7FFF, 0}))).pixels,
            (std::vector<uint8_t>{0xAB, 0x00, 0x7F}));
  EXPECT_EQ(MustDecode(EncodePng(Spec(1, 1, 4, 16, {0x4321, 0xFFFF}))).pixels,
            (std::vector<uint8_t>{0x43, 0x43, 0x43}));
}

// Pillow opens 16-bit gray as mode "I"; its I -> RGB conversion saturates at 255.
TEST(DecodePng, SixteenBitGrayClipsAsPillow) {
  EXPECT_EQ(MustDecode(EncodePng(Spec(5, 1, 0, 16, {0, 200, 255, 256, 65535}))).pixels,
            (std::vector<uint8_t>{0, 0, 0, 200, 200, 200, 255, 255, 255, 255, 255, 255, 255, 255, 255}));
}

TEST(DecodePng, PaletteWithTransparencyGivesPaletteColours) {
  for (int depth : {1, 2, 4, 8}) {
    PngSpec s = Spec(2, 1, 3, depth, {1, 0});
    s.palette = {10, 20, 30, 40, 50, 60};
    s.trns = {255, 0};  // entry 0 fully transparent: its colour must survive
    EXPECT_EQ(MustDecode(EncodePng(s)).pixels, (std::vector<uint8_t>{40, 50, 60, 10, 20, 30}))
        << "bit depth " << depth;
  }
}

TEST(DecodePng, ColourKeyTransparencyIsIgnored) {
  PngSpec rgb = Spec(1, 1, 2, 8, {1, 2, 3});
  rgb.trns = {0, 1, 0, 2, 0, 3};
  EXPECT_EQ(MustDecode(EncodePng(rgb)).pixels, (std::vector<uint8_t>{1, 2, 3}));
  PngSpec gray16 = Spec(1, 1, 0, 16, {7});
  gray16.trns = {0, 7};
  EXPECT_EQ(MustDecode(EncodePng(gray16)).pixels, (std::vector<uint8_t>{7, 7, 7}));
}

TEST(DecodePng, InterlacedEqualsProgressiveRows) {
  const RgbImage in = test_images::NoiseImage(13, 11, 2);
  PngSpec s = RgbSpec(in);
  s.interlace = true;
  EXPECT_EQ(MustDecode(EncodePng(s)).pixels, in.pixels);
  PngSpec gray = Spec(9, 3, 0, 2, std::vector<uint16_t>(27));
  for (size_t i = 0; i < gray.samples.size(); ++i) gray.samples[i] = i % 4;
  const RgbImage plain = MustDecode(EncodePng(gray));
  gray.interlace = true;
  EXPECT_EQ(MustDecode(EncodePng(gray)).pixels, plain.pixels);
}

TEST(DecodePng, TruncatedDataIsRefused) {
  const std::string png = EncodePng(RgbSpec(test_images::NoiseImage(16, 16, 3)));
  for (size_t cut : {size_t{8}, size_t{20}, size_t{40}, png.size() / 2, png.size() - 20}) {
    ExpectError(png.substr(0, cut), "image: corrupt PNG data");
  }
}

TEST(DecodePng, CorruptDataIsRefused) {
  std::string png = EncodePng(RgbSpec(test_images::NoiseImage(16, 16, 4)));
  png[png.size() / 2] ^= 0x55;  // inside IDAT: its CRC no longer matches
  ExpectError(png, "image: corrupt PNG data: IDAT");
  ExpectError(EncodePng(Spec(0, 1, 2, 8, {})), "image: corrupt PNG data");
}

TEST(DecodePng, DecompressionBombIsRefusedBeforeDecoding) {
  // The header promises 20000 x 10000 pixels; the data holds almost nothing.
  ExpectError(EncodePng(Spec(20000, 10000, 0, 1, {})), "exceeds the limit of 178956970 pixels");
}

TEST(DecodeJpeg, ColourAndGrayAreClose) {
  const RgbImage in = test_images::GradientImage(37, 23);
  const RgbImage colour = MustDecode(test_images::EncodeJpeg(in, 95));
  EXPECT_EQ(colour.width, 37);
  EXPECT_EQ(colour.height, 23);
  EXPECT_LE(MaxAbsDiff(colour, in), 12);
  const RgbImage gray = MustDecode(test_images::EncodeJpeg(in, 95, /*gray=*/true));
  for (int x = 0; x < 37; x += 6) {
    const std::vector<uint8_t> p = Pixel(gray, x, 5);
    EXPECT_EQ(p[0], p[1]);
    EXPECT_EQ(p[1], p[2]);
    EXPECT_NEAR(p[0], Pixel(in, x, 5)[0], 4);
  }
}

TEST(DecodeJpeg, TruncatedAndCorruptDataAreRefused) {
  const std::string jpeg = test_images::EncodeJpeg(test_images::NoiseImage(32, 32, 5), 90);
  ExpectError(jpeg.substr(0, jpeg.size() / 2), "Premature end of JPEG file");
  ExpectError(jpeg.substr(0, 50), "image: corrupt JPEG data");
  ExpectError("\xFF\xD8\xFF" + std::string(64, '\x42'), "image: corrupt JPEG data");
}

TEST(DecodeJpeg, DecompressionBombIsRefusedBeforeDecoding) {
  std::string jpeg = test_images::EncodeJpeg(test_images::NoiseImage(8, 8, 6), 90);
  const size_t sof = jpeg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  // SOF0: length(2) precision(1) height(2) width(2).
  jpeg[sof + 5] = jpeg[sof + 6] = jpeg[sof + 7] = jpeg[sof + 8] = '\x7F';
  ExpectError(jpeg, "exceeds the limit");
}

TEST(DecodeWebp, LosslessIsExactAndDropsAlpha) {
  const RgbImage in = test_images::NoiseImage(9, 6, 7);
  std::vector<uint8_t> rgba;
  for (size_t i = 0; i < in.pixels.size(); i += 3) {
    rgba.insert(rgba.end(), {in.pixels[i], in.pixels[i + 1], in.pixels[i + 2],
                             static_cast<uint8_t>(i % 2 ? 0 : 255)});
  }
  EXPECT_EQ(MustDecode(test_images::EncodeWebpLossless(9, 6, rgba)).pixels, in.pixels);
}

TEST(DecodeWebp, LossyIsClose) {
  const RgbImage in = test_images::GradientImage(40, 30);
  const RgbImage out = MustDecode(test_images::EncodeWebpLossy(in, 95));
  EXPECT_EQ(out.width, 40);
  EXPECT_LE(MaxAbsDiff(out, in), 16);
}

TEST(DecodeWebp, TruncatedAndBombAreRefused) {
  std::vector<uint8_t> rgba(4 * 4 * 4, 200);
  const std::string webp = test_images::EncodeWebpLossless(4, 4, rgba);
  ExpectError(webp.substr(0, webp.size() - 4), "image: corrupt or truncated WebP data");
  ExpectError(webp.substr(0, 14), "image: corrupt WebP data");
  // VP8L header: signature 0x2f at offset 20, then 14-bit width-1 and height-1 (LSB first).
  std::string bomb = webp;
  ASSERT_EQ(bomb[20], '\x2f');
  bomb[21] = bomb[22] = bomb[23] = '\xFF';
  bomb[24] = static_cast<char>(bomb[24] | 0x0F);
  ExpectError(bomb, "exceeds the limit");
}

// Expected values by hand from Pillow's paste: (255 * (255 - a) + fg * a) / 255, rounded half up.
constexpr AlphaPolicy kVllm = AlphaPolicy::kVllmWhiteBackground;

TEST(AlphaPolicyVllm, RgbaPngIsPastedOverWhite) {
  // a=128: fg 0 -> 255*127/255 = 127, fg 100 -> 45185/255 = 177.2 -> 177, fg 255 -> 255.
  // a=0 -> white; a=1 -> 254; a=255 -> fg.
  // a=200: fg 100 -> 34025/255 = 133.43 -> 133, fg 200 -> 54025/255 = 211.86 -> 212, fg 0 -> 55.
  const std::string png = EncodePng(Spec(5, 1, 6, 8, {0, 255, 100, 128,  0, 0, 0, 0,  0, 0, 0, 1,
                                                      10, 20, 30, 255,  100, 200, 0, 200}));
  EXPECT_EQ(MustDecode(png, kVllm).pixels,
            (std::vector<uint8_t>{127, 255, 177, 255, 255, 255, 254, 254, 254, 10, 20, 30,
                                  133, 212, 55}));
  // The default policy still drops alpha.
  EXPECT_EQ(MustDecode(png).pixels,
            (std::vector<uint8_t>{0, 255, 100, 0, 0, 0, 0, 0, 0, 10, 20, 30, 100, 200, 0}));
}

TEST(AlphaPolicyVllm, SixteenBitRgbaAndGrayAlphaUseHighBytes) {
  // Low bytes are ignored: fg (0, 255, 100), a = 0x80 = 128 -> (127, 255, 177).
  const PngSpec rgba16 = Spec(1, 1, 6, 16, {0x00FF, 0xFFFF, 0x64AA, 0x80FF});
  EXPECT_EQ(MustDecode(EncodePng(rgba16), kVllm).pixels, (std::vector<uint8_t>{127, 255, 177}));
  // Pillow opens 16-bit gray+alpha as "RGBA", so vLLM composites it: gray 0 at a=128 -> 127.
  EXPECT_EQ(MustDecode(EncodePng(Spec(1, 1, 4, 16, {0x0012, 0x8034})), kVllm).pixels,
            (std::vector<uint8_t>{127, 127, 127}));
}

TEST(AlphaPolicyVllm, NonRgbaModesOnlyDropAlpha) {
  // 8-bit gray+alpha is Pillow's "LA": converted, not composited.
  EXPECT_EQ(MustDecode(EncodePng(Spec(2, 1, 4, 8, {9, 0, 200, 128})), kVllm).pixels,
            (std::vector<uint8_t>{9, 9, 9, 200, 200, 200}));
  PngSpec palette = Spec(2, 1, 3, 8, {1, 0});  // "P" with tRNS
  palette.palette = {10, 20, 30, 40, 50, 60};
  palette.trns = {128, 0};
  EXPECT_EQ(MustDecode(EncodePng(palette), kVllm).pixels,
            (std::vector<uint8_t>{40, 50, 60, 10, 20, 30}));
  PngSpec key = Spec(1, 1, 2, 8, {1, 2, 3});  // "RGB" with a colour key
  key.trns = {0, 1, 0, 2, 0, 3};
  EXPECT_EQ(MustDecode(EncodePng(key), kVllm).pixels, (std::vector<uint8_t>{1, 2, 3}));
  const RgbImage in = test_images::GradientImage(16, 8);
  const std::string jpeg = test_images::EncodeJpeg(in, 90);
  EXPECT_EQ(MustDecode(jpeg, kVllm).pixels, MustDecode(jpeg).pixels);
}

TEST(AlphaPolicyVllm, WebpWithAlphaIsPastedOverWhite) {
  std::vector<uint8_t> rgba = {0, 255, 100, 128,  0, 0, 0, 0,  10, 20, 30, 255,  200, 100, 0, 200};
  const std::string webp = test_images::EncodeWebpLossless(2, 2, rgba);
  EXPECT_EQ(MustDecode(webp, kVllm).pixels,
            (std::vector<uint8_t>{127, 255, 177, 255, 255, 255, 10, 20, 30, 212, 133, 55}));
  EXPECT_EQ(MustDecode(webp).pixels,
            (std::vector<uint8_t>{0, 255, 100, 0, 0, 0, 10, 20, 30, 200, 100, 0}));
  // Fully opaque: libwebp stores no alpha, Pillow reports "RGB", both policies agree.
  for (size_t i = 3; i < rgba.size(); i += 4) rgba[i] = 255;
  const std::string opaque = test_images::EncodeWebpLossless(2, 2, rgba);
  EXPECT_EQ(MustDecode(opaque, kVllm).pixels, MustDecode(opaque).pixels);
}

TEST(DecodeImage, UnknownAndEmptyDataAreRefused) {
  ExpectError("BM\x01\x00\x01\x00", "unrecognised format (expected PNG, JPEG, WebP or GIF)");
  ExpectError("GIF89a\x01\x00\x01\x00", "image: GIF");  // a GIF header and nothing after it
  ExpectError("", "image: empty data");
  ExpectError("RIFF\x04\x00\x00\x00WAVE", "unrecognised format");
}

// A GIF's canvas is checked from its header, before libavcodec allocates it (36 bytes declaring
// 20000 × 20000 pixels, 1.6 GB of canvas, with one 1 × 1 frame).
TEST(DecodeImage, GifCanvasIsCheckedBeforeDecoding) {
  const std::string gif("GIF89a\x20\x4e\x20\x4e\x00\x00\x00"  // 20000 × 20000, no colour table
                        "\x2c\x00\x00\x00\x00\x01\x00\x01\x00\x80"  // a 1 × 1 frame
                        "\x00\x00\x00\xff\xff\xff"                    // its two colours
                        "\x02\x02\x44\x01\x00\x3b",                   // its LZW data; the end
                        36);
  ExpectError(gif, "image: GIF of 20000x20000 pixels exceeds the limit");
}

}  // namespace
}  // namespace cpm
