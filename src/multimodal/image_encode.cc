#include "multimodal/image_encode.h"

#include <cstdio>  // jpeglib.h needs FILE first
#include <cstdlib>
#include <vector>

#include <jpeglib.h>

namespace cpm {

std::string EncodeJpeg(const RgbImage& image, int quality, bool gray) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);  // valid pixels: libjpeg's error exit is never reached
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = image.width;
  cinfo.image_height = image.height;
  cinfo.input_components = gray ? 1 : 3;
  cinfo.in_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(static_cast<size_t>(image.width) * 3);
  while (cinfo.next_scanline < cinfo.image_height) {
    const uint8_t* src = &image.pixels[static_cast<size_t>(cinfo.next_scanline) * image.width * 3];
    for (int x = 0; x < image.width; ++x) {
      if (gray) row[x] = src[3 * x];
      else for (int c = 0; c < 3; ++c) row[3 * x + c] = src[3 * x + c];
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&cinfo, &r, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  free(buffer);
  return out;
}

}  // namespace cpm
