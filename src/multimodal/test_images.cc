#include "multimodal/test_images.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <stdexcept>

#include <webp/encode.h>
#include <zlib.h>

namespace cpm::test_images {
namespace {

int Channels(int color_type) {
  switch (color_type) {
    case 0: case 3: return 1;
    case 4: return 2;
    case 2: return 3;
    case 6: return 4;
  }
  throw std::invalid_argument("bad PNG colour type");
}

void PutU32(std::string* out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out->push_back(static_cast<char>(v >> shift));
}

void PutChunk(std::string* out, const char* type, const std::string& body) {
  PutU32(out, static_cast<uint32_t>(body.size()));
  const std::string typed = std::string(type, 4) + body;
  out->append(typed);
  PutU32(out, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(typed.data()), typed.size())));
}

// One filtered scanline (filter type 0) of the given pixels, packed MSB first.
void PutRow(std::string* raw, const std::vector<uint16_t>& samples, int bit_depth) {
  raw->push_back('\0');
  if (bit_depth >= 8) {
    for (uint16_t s : samples) {
      if (bit_depth == 16) raw->push_back(static_cast<char>(s >> 8));
      raw->push_back(static_cast<char>(s & 0xFF));
    }
    return;
  }
  int acc = 0, used = 0;
  for (uint16_t s : samples) {
    acc = (acc << bit_depth) | s;
    used += bit_depth;
    if (used == 8) raw->push_back(static_cast<char>(acc)), acc = 0, used = 0;
  }
  if (used > 0) raw->push_back(static_cast<char>(acc << (8 - used)));
}

// Scanlines of the sub-image x0 + k*dx, y0 + k*dy (the whole image for 0, 0, 1, 1).
void PutPass(std::string* raw, const PngSpec& s, int x0, int y0, int dx, int dy) {
  const int c = Channels(s.color_type);
  for (int y = y0; y < s.height; y += dy) {
    std::vector<uint16_t> row;
    for (int x = x0; x < s.width; x += dx) {
      for (int k = 0; k < c; ++k) row.push_back(s.samples[(static_cast<size_t>(y) * s.width + x) * c + k]);
    }
    if (!row.empty()) PutRow(raw, row, s.bit_depth);
  }
}

}  // namespace

std::string EncodePng(const PngSpec& s) {
  std::string raw;  // stays empty without samples: a header-only file for the size checks
  if (s.samples.empty()) {
  } else if (!s.interlace) {
    PutPass(&raw, s, 0, 0, 1, 1);
  } else {
    static const int kAdam7[7][4] = {{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4},
                                     {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}};
    for (const auto& p : kAdam7) PutPass(&raw, s, p[0], p[1], p[2], p[3]);
  }
  uLongf size = compressBound(raw.size());
  std::string idat(size, '\0');
  compress(reinterpret_cast<Bytef*>(idat.data()), &size, reinterpret_cast<const Bytef*>(raw.data()),
           raw.size());
  idat.resize(size);

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  PutU32(&ihdr, s.width);
  PutU32(&ihdr, s.height);
  ihdr += {static_cast<char>(s.bit_depth), static_cast<char>(s.color_type), 0, 0,
           static_cast<char>(s.interlace ? 1 : 0)};
  PutChunk(&png, "IHDR", ihdr);
  if (!s.palette.empty()) PutChunk(&png, "PLTE", std::string(s.palette.begin(), s.palette.end()));
  if (!s.trns.empty()) PutChunk(&png, "tRNS", std::string(s.trns.begin(), s.trns.end()));
  PutChunk(&png, "IDAT", idat);
  PutChunk(&png, "IEND", "");
  return png;
}

std::string EncodeWebpLossless(int width, int height, const std::vector<uint8_t>& rgba) {
  WebPConfig config;
  WebPConfigInit(&config);
  config.lossless = 1;
  config.exact = 1;  // keep the colour of transparent pixels (the simple API drops it)
  WebPPicture picture;
  WebPPictureInit(&picture);
  picture.use_argb = 1;
  picture.width = width;
  picture.height = height;
  WebPPictureImportRGBA(&picture, rgba.data(), width * 4);
  WebPMemoryWriter writer;
  WebPMemoryWriterInit(&writer);
  picture.writer = WebPMemoryWrite;
  picture.custom_ptr = &writer;
  WebPEncode(&config, &picture);
  std::string bytes(reinterpret_cast<char*>(writer.mem), writer.size);
  WebPMemoryWriterClear(&writer);
  WebPPictureFree(&picture);
  return bytes;
}

std::string EncodeWebpLossy(const RgbImage& image, int quality) {
  uint8_t* out = nullptr;
  const size_t size =
      WebPEncodeRGB(image.pixels.data(), image.width, image.height, image.width * 3, quality, &out);
  std::string bytes(reinterpret_cast<char*>(out), size);
  WebPFree(out);
  return bytes;
}

RgbImage NoiseImage(int width, int height, uint32_t seed) {
  std::mt19937 rng(seed);
  RgbImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (auto& p : image.pixels) p = static_cast<uint8_t>(rng() & 0xFF);
  return image;
}

RgbImage GradientImage(int width, int height) {
  RgbImage image{width, height, std::vector<uint8_t>(static_cast<size_t>(width) * height * 3)};
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = &image.pixels[(static_cast<size_t>(y) * width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / std::max(width - 1, 1));
      p[1] = static_cast<uint8_t>(y * 255 / std::max(height - 1, 1));
      p[2] = static_cast<uint8_t>((x + y) * 127 / std::max(width + height - 2, 1));
    }
  }
  return image;
}

}  // namespace cpm::test_images
