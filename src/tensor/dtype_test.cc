#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace cpm {
namespace {

TEST(DTypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(F32ToBf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(F32ToBf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(F32ToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(RoundBf16(0.2857738137f), Bf16ToF32(F32ToBf16(0.2857738137f)));
  EXPECT_TRUE(std::isnan(Bf16ToF32(F32ToBf16(NAN))));
}

TEST(DTypeTest, F16RoundTripsEveryFiniteValue) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint16_t v = static_cast<uint16_t>(h);
    if (((v >> 10) & 0x1f) == 0x1f) continue;  // inf/nan
    EXPECT_EQ(F32ToF16(F16ToF32(v)), v) << std::hex << h;
  }
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(1e6f), 0x7c00);
}

TEST(DTypeTest, ParsesSafetensorsNames) {
  DType t;
  ASSERT_TRUE(ParseSafetensorsDType("BF16", &t));
  EXPECT_EQ(t, DType::kBF16);
  EXPECT_FALSE(ParseSafetensorsDType("I8", &t));
}

}  // namespace
}  // namespace cpm
