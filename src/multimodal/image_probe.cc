// image_probe [--vllm-alpha] IN OUT [WIDTH HEIGHT]: decodes IN with DecodeImage (AlphaPolicy
// kDrop, or kVllmWhiteBackground with --vllm-alpha), resizes with ResizeBicubic when a size is
// given, writes the pixels to OUT as raw RGB and prints "WIDTHxHEIGHT". Errors go to stderr with
// exit status 1. Used by tests/conformance/pil_resize_check.py.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "multimodal/image.h"
#include "multimodal/resize.h"

int main(int argc, char** argv) {
  cpm::AlphaPolicy policy = cpm::AlphaPolicy::kDrop;
  if (argc > 1 && std::string_view(argv[1]) == "--vllm-alpha") {
    policy = cpm::AlphaPolicy::kVllmWhiteBackground;
    --argc;
    ++argv;
  }
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: image_probe [--vllm-alpha] IN OUT.rgb [WIDTH HEIGHT]\n");
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  cpm::StatusOr<cpm::RgbImage> image = cpm::DecodeImage(bytes, policy);
  if (!image.ok()) {
    std::fprintf(stderr, "%s\n", image.status().ToString().c_str());
    return 1;
  }
  cpm::RgbImage out = std::move(*image);
  if (argc == 5) out = cpm::ResizeBicubic(out, std::atoi(argv[3]), std::atoi(argv[4]));
  std::ofstream file(argv[2], std::ios::binary);
  file.write(reinterpret_cast<const char*>(out.pixels.data()),
             static_cast<std::streamsize>(out.pixels.size()));
  if (!file) {
    std::fprintf(stderr, "cannot write %s\n", argv[2]);
    return 1;
  }
  std::printf("%dx%d\n", out.width, out.height);
  return 0;
}
