// PNG through libpng, configured so the pixels equal Pillow's decode + convert("RGB"): palette
// and low-bit gray expand, alpha (and tRNS) is dropped, 16-bit samples keep their high byte,
// except 16-bit grayscale, which Pillow opens as mode "I" and clips to 255 when converting.
// Under AlphaPolicy::kVllmWhiteBackground the files Pillow opens as "RGBA" keep their alpha
// and are composited over white instead.
#include <png.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "multimodal/image_codecs.h"

namespace cpm::image_internal {
namespace {

// libpng reports errors by longjmp-ing back to the last setjmp. The setjmp lives in the small
// Read* helpers below, whose frames (like these callbacks) hold only trivially destructible
// data, so the jump never skips a C++ destructor. Everything that owns memory lives in the
// caller, which the jump does not cross.
struct PngInput {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char error[256];
};

void OnPngError(png_structp png, png_const_charp message) {
  auto* input = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(input->error, sizeof(input->error), "%s", message);
  png_longjmp(png, 1);
}

// Warnings are for damage libpng can work around (bad ancillary chunks); Pillow ignores those.
void OnPngWarning(png_structp, png_const_charp) {}

void ReadFromMemory(png_structp png, png_bytep out, size_t n) {
  auto* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (n > input->size - input->pos) png_error(png, "truncated data");
  std::memcpy(out, input->data + input->pos, n);
  input->pos += n;
}

struct PngLayout {
  uint32_t width;
  uint32_t height;
  size_t row_bytes;
  bool gray16;  // one 16-bit big-endian gray sample per pixel, clipped afterwards
  bool rgba;    // RGBA8 rows, composited over white afterwards
};

// Reads the header and sets libpng's transforms so rows come out as RGB8 (or gray16).
bool ReadHeader(png_structp png, png_infop info, AlphaPolicy policy, PngLayout* layout) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  layout->gray16 = color_type == PNG_COLOR_TYPE_GRAY && bit_depth == 16;
  // Pillow's mode "RGBA": colour type 6, and 16-bit gray+alpha, which its PNG plugin widens to
  // RGBA (8-bit gray+alpha stays "LA", which vLLM only converts).
  layout->rgba = policy == AlphaPolicy::kVllmWhiteBackground &&
                 (color_type == PNG_COLOR_TYPE_RGB_ALPHA ||
                  (color_type == PNG_COLOR_TYPE_GRAY_ALPHA && bit_depth == 16));
  // No png_set_tRNS_to_alpha and no gamma: Pillow applies neither before dropping alpha.
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16 && !layout->gray16) png_set_strip_16(png);  // high byte, as Pillow
  if (!layout->gray16) {
    if (!layout->rgba) png_set_strip_alpha(png);
    png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  layout->width = png_get_image_width(png, info);
  layout->height = png_get_image_height(png, info);
  layout->row_bytes = png_get_rowbytes(png, info);
  return true;
}

bool ReadRows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

// Owns libpng's read and info structs.
struct PngDecoder {
  png_structp png = nullptr;
  png_infop info = nullptr;
  explicit PngDecoder(PngInput* input) {
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, input, OnPngError, OnPngWarning);
    if (png == nullptr) return;
    info = png_create_info_struct(png);
    png_set_read_fn(png, input, ReadFromMemory);
  }
  ~PngDecoder() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;
};

Status Corrupt(const PngInput& input) {
  return InvalidArgument(std::string("image: corrupt PNG data: ") + input.error);
}

// Pillow's "I" -> "RGB" conversion saturates instead of scaling: 0..255 stay, the rest is 255.
void ClipGray16(const std::vector<uint8_t>& samples, RgbImage* image) {
  const size_t n = samples.size() / 2;
  for (size_t i = 0; i < n; ++i) {
    const int value = (samples[2 * i] << 8) | samples[2 * i + 1];
    const uint8_t v = static_cast<uint8_t>(std::min(value, 255));
    std::memset(&image->pixels[3 * i], v, 3);
  }
}

}  // namespace

StatusOr<RgbImage> DecodePng(std::string_view bytes, AlphaPolicy policy) {
  PngInput input{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0, ""};
  PngDecoder decoder(&input);
  if (decoder.png == nullptr || decoder.info == nullptr) {
    return Internal("image: cannot initialise libpng");
  }
  PngLayout layout{};
  if (!ReadHeader(decoder.png, decoder.info, policy, &layout)) return Corrupt(input);
  CPM_RETURN_IF_ERROR(CheckImageSize(layout.width, layout.height, "PNG"));
  RgbImage image = BlankRgbImage(static_cast<int>(layout.width), static_cast<int>(layout.height));
  // Gray16 and RGBA rows are read into `staging` and turned into RGB afterwards.
  const size_t pixel_bytes = layout.gray16 ? 2 : layout.rgba ? 4 : 3;
  std::vector<uint8_t> staging;
  uint8_t* base = image.pixels.data();
  if (pixel_bytes != 3) {
    staging.resize(image.pixels.size() / 3 * pixel_bytes);
    base = staging.data();
  }
  const size_t stride = static_cast<size_t>(layout.width) * pixel_bytes;
  if (layout.row_bytes != stride) return Internal("image: unexpected libpng row layout");
  std::vector<png_bytep> rows(layout.height);
  for (uint32_t y = 0; y < layout.height; ++y) rows[y] = base + y * stride;
  if (!ReadRows(decoder.png, rows.data())) return Corrupt(input);
  if (layout.gray16) ClipGray16(staging, &image);
  if (layout.rgba) CompositeOverWhite(staging.data(), &image);
  return image;
}

}  // namespace cpm::image_internal
