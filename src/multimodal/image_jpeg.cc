// JPEG through libjpeg-turbo with the settings Pillow decodes with (libjpeg's defaults: ISLOW
// integer DCT, fancy upsampling), so both produce the same pixels from the same library.
// Four-component (CMYK/YCCK) files follow Pillow too: samples read as Adobe-inverted CMYK, then
// Pillow's CMYK -> RGB formula.
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <csetjmp>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>  // JWRN_JPEG_EOF

#include "multimodal/image_codecs.h"

namespace cpm::image_internal {
namespace {

// libjpeg's error_exit must not return. It longjmp-s back to the setjmp in the Read* helper that
// called into libjpeg; those helpers and these callbacks hold only trivially destructible data,
// so the jump skips no C++ destructor. Owning objects live in DecodeJpeg, above the jump.
struct JpegErrors {
  jpeg_error_mgr mgr;  // first member: libjpeg passes &mgr back to the callbacks
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void OnJpegError(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings and traces. Data that ends early is only a warning to libjpeg (it pads the image with
// gray), but Pillow refuses such a file ("image file is truncated"), so that one is fatal here;
// the other warnings (e.g. stray bytes before a marker) Pillow ignores, and so does this.
void OnJpegMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) OnJpegError(cinfo);
}

// Owns the decompressor; plain C data, so the helpers may longjmp while it is in use.
struct JpegDecoder {
  jpeg_decompress_struct cinfo{};  // zeroed: destroying it before creation is a no-op
  JpegErrors errors;
  JpegDecoder() {
    cinfo.err = jpeg_std_error(&errors.mgr);
    errors.mgr.error_exit = OnJpegError;
    errors.mgr.emit_message = OnJpegMessage;
    errors.message[0] = '\0';
  }
  ~JpegDecoder() { jpeg_destroy_decompress(&cinfo); }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;
};

// Reads the header and picks the output colour space: RGB for gray, YCbCr and RGB sources
// (libjpeg-turbo expands gray itself), CMYK for four-component sources. Returns false on error.
bool ReadHeader(JpegDecoder* d, const uint8_t* data, size_t size) {
  if (setjmp(d->errors.jump)) return false;
  jpeg_create_decompress(&d->cinfo);  // can fail (out of memory), so inside the setjmp
  jpeg_mem_src(&d->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d->cinfo, TRUE);
  const J_COLOR_SPACE in = d->cinfo.jpeg_color_space;
  d->cinfo.out_color_space = (in == JCS_CMYK || in == JCS_YCCK) ? JCS_CMYK : JCS_RGB;
  d->cinfo.dct_method = JDCT_ISLOW;
  d->cinfo.do_fancy_upsampling = TRUE;
  jpeg_calc_output_dimensions(&d->cinfo);
  return true;
}

bool ReadPixels(JpegDecoder* d, uint8_t* out, size_t stride) {
  if (setjmp(d->errors.jump)) return false;
  jpeg_start_decompress(&d->cinfo);
  while (d->cinfo.output_scanline < d->cinfo.output_height) {
    JSAMPROW row = out + d->cinfo.output_scanline * stride;
    jpeg_read_scanlines(&d->cinfo, &row, 1);
  }
  return true;
}

Status Corrupt(const JpegDecoder& d) {
  return InvalidArgument(std::string("image: corrupt JPEG data: ") + d.errors.message);
}

// Pillow reads every 4-component JPEG as inverted ("Adobe") CMYK, then converts with
// R = (255 - k) - (c * (255 - k)) / 255, the division rounded as its MULDIV255 macro does.
void CmykToRgb(const std::vector<uint8_t>& cmyk, RgbImage* image) {
  const size_t n = cmyk.size() / 4;
  for (size_t i = 0; i < n; ++i) {
    const int nk = cmyk[4 * i + 3];  // 255 - (255 - K): inversion and "255 - k" cancel
    for (int c = 0; c < 3; ++c) {
      const int ink = 255 - cmyk[4 * i + c];
      const int t = ink * nk + 128;
      image->pixels[3 * i + c] = static_cast<uint8_t>(nk - (((t >> 8) + t) >> 8));
    }
  }
}

}  // namespace

StatusOr<RgbImage> DecodeJpeg(std::string_view bytes) {
  JpegDecoder d;
  if (!ReadHeader(&d, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())) {
    return Corrupt(d);
  }
  const int components = d.cinfo.out_color_components;
  if (components != 3 && components != 4) {
    return InvalidArgument("image: unsupported JPEG colour space");
  }
  CPM_RETURN_IF_ERROR(CheckImageSize(d.cinfo.output_width, d.cinfo.output_height, "JPEG"));
  RgbImage image = BlankRgbImage(static_cast<int>(d.cinfo.output_width),
                               static_cast<int>(d.cinfo.output_height));
  const size_t stride = static_cast<size_t>(image.width) * components;
  if (components == 3) {
    if (!ReadPixels(&d, image.pixels.data(), stride)) return Corrupt(d);
    return image;
  }
  std::vector<uint8_t> cmyk(stride * image.height);
  if (!ReadPixels(&d, cmyk.data(), stride)) return Corrupt(d);
  CmykToRgb(cmyk, &image);
  return image;
}

}  // namespace cpm::image_internal
