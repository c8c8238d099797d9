// Element types of weights, activations and caches, and exact conversions between them.
// bf16 rounding is round-to-nearest-even, as PyTorch's `.to(torch.bfloat16)`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace cpm {

enum class DType : uint8_t { kF32, kBF16, kF16, kCount };

const char* ToString(DType t);  // "float32", "bfloat16", "float16"
size_t DTypeSize(DType t);
// Parses a safetensors dtype string ("F32", "BF16", "F16"); false if unsupported.
bool ParseSafetensorsDType(std::string_view s, DType* out);
const char* ToSafetensorsString(DType t);  // "F32", "BF16", "F16"

inline float Bf16ToF32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Rounds an f32 to the nearest bf16 value, kept in f32 (the `bf(x)` of the model specs).
inline float RoundBf16(float f) { return Bf16ToF32(F32ToBf16(f)); }

// Two bf16-valued floats as the bf16 pair a dot-product kernel reads (vdpbf16ps): lo's top half
// in the low 16 bits, hi's in the high 16 (exact only for bf16 values: the low halves are
// dropped).
inline uint32_t Bf16PairOf(float lo, float hi) {
  uint32_t l, h;
  std::memcpy(&l, &lo, 4);
  std::memcpy(&h, &hi, 4);
  return (l >> 16) | (h & 0xffff0000u);
}

float F16ToF32(uint16_t h);
uint16_t F32ToF16(float f);

// Converts n elements of `src` (of type `t`) to f32.
void ConvertToF32(DType t, const void* src, float* dst, size_t n);

}  // namespace cpm
