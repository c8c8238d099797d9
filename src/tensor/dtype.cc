#include "tensor/dtype.h"

#include <cmath>

namespace cpm {

const char* ToString(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kCount: break;
  }
  return "unknown";
}

size_t DTypeSize(DType t) { return t == DType::kF32 ? 4 : 2; }

bool ParseSafetensorsDType(std::string_view s, DType* out) {
  if (s == "F32") *out = DType::kF32;
  else if (s == "BF16") *out = DType::kBF16;
  else if (s == "F16") *out = DType::kF16;
  else return false;
  return true;
}

const char* ToSafetensorsString(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kF16: return "F16";
    case DType::kCount: break;
  }
  return "?";
}

float F16ToF32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) v = std::ldexp(static_cast<float>(mant), -24);            // zero / subnormal
  else if (exp == 31) v = mant ? NAN : INFINITY;                          // inf / nan
  else v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

uint16_t F32ToF16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7fffffff;
  if (ax > 0x7f800000) return static_cast<uint16_t>(sign | 0x7e00);  // NaN
  if (ax >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow -> inf
  if (ax < 0x38800000) {                                                // subnormal or zero
    float a;
    std::memcpy(&a, &ax, 4);
    // Scale to units of 2^-24 and round half to even.
    float scaled = a * 16777216.0f;
    uint32_t m = static_cast<uint32_t>(std::nearbyint(scaled));
    return static_cast<uint16_t>(sign | m);
  }
  uint32_t e = ((ax >> 23) - 127 + 15);
  uint32_t m = ax & 0x7fffff;
  uint32_t h = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // may carry into the exponent: correct
  return static_cast<uint16_t>(sign | h);
}

void ConvertToF32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = Bf16ToF32(s[i]);
      return;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (size_t i = 0; i < n; ++i) dst[i] = F16ToF32(s[i]);
      return;
    }
    case DType::kCount: break;
  }
}

}  // namespace cpm
