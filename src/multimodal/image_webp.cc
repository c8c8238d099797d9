// WebP through libwebp's animation decoder, the path Pillow 9.4 takes for every WebP file (with
// libwebpdemux present): non-premultiplied RGBA canvas, first frame, alpha dropped. Using the
// same decoder keeps lossy and lossless pixels equal to Pillow's, stills and animations alike.
// Pillow calls the image "RGBA" exactly when WebPGetFeatures reports alpha (otherwise "RGB", read
// as RGBX), so only then does AlphaPolicy::kVllmWhiteBackground composite the canvas over white.
#include <cstring>
#include <memory>

#include <webp/decode.h>
#include <webp/demux.h>

#include "multimodal/image_codecs.h"

namespace cpm::image_internal {
namespace {

struct AnimDecoderDeleter {
  void operator()(WebPAnimDecoder* d) const { WebPAnimDecoderDelete(d); }
};
using AnimDecoderPtr = std::unique_ptr<WebPAnimDecoder, AnimDecoderDeleter>;

void DropAlpha(const uint8_t* rgba, RgbImage* image) {
  const size_t n = image->pixels.size() / 3;
  for (size_t i = 0; i < n; ++i) std::memcpy(&image->pixels[3 * i], rgba + 4 * i, 3);
}

}  // namespace

StatusOr<RgbImage> DecodeWebp(std::string_view bytes, AlphaPolicy policy) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  // The header alone gives the canvas size: check it before the decoder allocates the canvas.
  WebPBitstreamFeatures features;
  if (WebPGetFeatures(data, bytes.size(), &features) != VP8_STATUS_OK) {
    return InvalidArgument("image: corrupt WebP data: unreadable header");
  }
  CPM_RETURN_IF_ERROR(CheckImageSize(features.width, features.height, "WebP"));

  WebPAnimDecoderOptions options;
  if (!WebPAnimDecoderOptionsInit(&options)) return Internal("image: libwebp version mismatch");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const WebPData webp{data, bytes.size()};
  AnimDecoderPtr decoder(WebPAnimDecoderNew(&webp, &options));
  if (decoder == nullptr) return InvalidArgument("image: corrupt or truncated WebP data");
  WebPAnimInfo info;
  if (!WebPAnimDecoderGetInfo(decoder.get(), &info)) {
    return InvalidArgument("image: corrupt WebP data: no canvas");
  }
  CPM_RETURN_IF_ERROR(CheckImageSize(info.canvas_width, info.canvas_height, "WebP"));
  uint8_t* canvas = nullptr;  // owned by the decoder, canvas_width * canvas_height * 4 bytes
  int timestamp_ms = 0;
  if (!WebPAnimDecoderGetNext(decoder.get(), &canvas, &timestamp_ms)) {
    return InvalidArgument("image: corrupt WebP data: the first frame does not decode");
  }
  RgbImage image = BlankRgbImage(static_cast<int>(info.canvas_width),
                               static_cast<int>(info.canvas_height));
  if (policy == AlphaPolicy::kVllmWhiteBackground && features.has_alpha) {
    CompositeOverWhite(canvas, &image);
  } else {
    DropAlpha(canvas, &image);
  }
  return image;
}

}  // namespace cpm::image_internal
