#include "multimodal/image.h"

#include "multimodal/video.h"

#include <string>

#include "multimodal/image_codecs.h"

namespace cpm {
namespace image_internal {

Status CheckImageSize(int64_t width, int64_t height, std::string_view format) {
  const std::string what = "image: " + std::string(format) + " of " + std::to_string(width) + "x" +
                           std::to_string(height) + " pixels";
  if (width <= 0 || height <= 0) return InvalidArgument(what + " is empty");
  // Each factor is below 2^32 for every format, so the product cannot overflow int64.
  if (width * height > kMaxImagePixels) {
    return InvalidArgument(what + " exceeds the limit of " + std::to_string(kMaxImagePixels) +
                           " pixels (possible decompression bomb)");
  }
  return OkStatus();
}

// vLLM: Image.new("RGB", size, white).paste(rgba, mask=alpha). Pillow's paste with an "L" mask
// (Paste.c, BLEND) computes each channel as DIV255(bg * (255 - a) + fg * a) with
// DIV255(x) = (((x + 128) >> 8) + x + 128) >> 8, i.e. x / 255 rounded half up, in integers; the
// same integer steps here keep the bytes equal, which a float lerp would not guarantee.
void CompositeOverWhite(const uint8_t* rgba, RgbImage* image) {
  const size_t n = image->pixels.size() / 3;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t a = rgba[4 * i + 3];
    for (size_t c = 0; c < 3; ++c) {
      const uint32_t t = 255 * (255 - a) + rgba[4 * i + c] * a + 128;
      image->pixels[3 * i + c] = static_cast<uint8_t>(((t >> 8) + t) >> 8);
    }
  }
}

}  // namespace image_internal

RgbImage BlankRgbImage(int width, int height) {
  RgbImage image;
  image.width = width;
  image.height = height;
  image.pixels.resize(static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  return image;
}

namespace {

bool StartsWith(std::string_view bytes, std::string_view magic) {
  return bytes.substr(0, magic.size()) == magic;
}

}  // namespace

// A GIF (the fourth image format OpenAI's API takes): its first frame, as Pillow opens an
// animated one, decoded by libavcodec through the video reader's GIF demuxer.
StatusOr<RgbImage> DecodeGif(std::string_view bytes) {
  // The canvas (its logical screen), which the first frame is drawn on, checked from the header
  // before anything is decoded, as Pillow does: libavcodec allocates it first (35 bytes can
  // declare 65535 × 65535).
  if (bytes.size() < 10) return InvalidArgument("image: GIF truncated before its screen size");
  const auto u16 = [&](size_t i) {  // little-endian
    return int64_t{static_cast<uint8_t>(bytes[i])} |
           int64_t{static_cast<uint8_t>(bytes[i + 1])} << 8;
  };
  CPM_RETURN_IF_ERROR(image_internal::CheckImageSize(u16(6), u16(8), "GIF"));
  RgbImage first;
  StatusOr<int64_t> frames = DecodeVideo(bytes, 1, [&](const RgbImage& frame) {
    first = frame;
    return OkStatus();
  });
  if (!frames.ok()) return frames.status().WithPrefix("image: GIF");
  if (*frames == 0) return InvalidArgument("image: GIF without a frame");
  return first;
}

StatusOr<RgbImage> DecodeImage(std::string_view bytes, AlphaPolicy policy) {
  using namespace image_internal;
  // The same signatures Pillow's plugins accept.
  if (StartsWith(bytes, "\x89PNG\r\n\x1a\n")) return DecodePng(bytes, policy);
  if (StartsWith(bytes, "\xFF\xD8\xFF")) return DecodeJpeg(bytes);
  if (StartsWith(bytes, "RIFF") && bytes.size() >= 12 && bytes.substr(8, 4) == "WEBP") {
    return DecodeWebp(bytes, policy);
  }
  if (StartsWith(bytes, "GIF87a") || StartsWith(bytes, "GIF89a")) return DecodeGif(bytes);
  if (bytes.empty()) return InvalidArgument("image: empty data");
  return InvalidArgument("image: unrecognised format (expected PNG, JPEG, WebP or GIF)");
}

}  // namespace cpm
