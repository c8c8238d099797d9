// The limits' measuring loops: the streaming read reads exactly the words it claims at every
// software-prefetch distance and run length (so a faster one is no shortcut), and the limits are
// sane.
#include "kernels/machine_limits.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/cpu_features.h"

namespace cpm::kernels {
namespace {

TEST(MachineLimitsTest, StreamReadXorsEveryWordAtEveryPrefetchDistance) {
  if (BestIsa() == Isa::kScalar) GTEST_SKIP() << "needs AVX2";
  // Not a multiple of 512: the read covers bytes / 512 · 512 (four streams of 128 B steps).
  const int64_t bytes = (int64_t{3} << 20) + 200;
  AlignedBuffer buf(static_cast<size_t>(bytes));
  std::mt19937_64 rng(7);
  uint64_t* words = buf.as<uint64_t>();
  for (int64_t i = 0; i < bytes / 8; ++i) words[i] = rng();
  uint64_t want = 0;
  for (int64_t i = 0; i < bytes / 512 * 512 / 8; ++i) want ^= words[i];
  for (const int64_t distance : kReadPrefetchDistances) {
    EXPECT_EQ(StreamReadAvx2(buf.data(), bytes, distance), want) << "prefetch " << distance;
  }
  // In groups of four runs (a decode tile's panels): the whole groups' words, every one once.
  for (const int64_t run : {int64_t{65536}, int64_t{1152}}) {
    uint64_t runs_want = 0;
    for (int64_t i = 0; i < bytes / (4 * run) * 4 * run / 8; ++i) runs_want ^= words[i];
    EXPECT_EQ(StreamReadAvx2(buf.data(), bytes, 1024, run), runs_want) << "runs of " << run;
  }
  // One flipped bit in each 64-bit lane of a 32-byte load changes the result.
  for (int lane = 0; lane < 4; ++lane) {
    words[1000 + lane] ^= 1;
    EXPECT_NE(StreamReadAvx2(buf.data(), bytes, 0), want) << "lane " << lane;
    words[1000 + lane] ^= 1;
  }
}

TEST(MachineLimitsTest, PeakOperandsAreVariedFiniteBf16InTheirOctaves) {
  std::vector<uint16_t> v(2048);
  PeakOperandsBf16(v.data(), static_cast<int64_t>(v.size()), -5, 3);
  std::set<int> exponents, mantissas;
  int negative = 0;
  for (const uint16_t b : v) {
    const int exponent = (b >> 7 & 0xff) - 127;
    ASSERT_GE(exponent, -8) << std::hex << b;  // not zero (nor a subnormal)
    ASSERT_LE(exponent, -5) << std::hex << b;  // nor inf or NaN
    exponents.insert(exponent);
    mantissas.insert(b & 0x7f);
    negative += b >> 15;
  }
  EXPECT_EQ(exponents.size(), 4u);
  EXPECT_GT(mantissas.size(), 100u);
  EXPECT_GT(negative, 800);
  EXPECT_LT(negative, 1248);
  // Seeds give different operands; a seed the same ones.
  std::vector<uint16_t> again(v.size()), other(v.size());
  PeakOperandsBf16(again.data(), static_cast<int64_t>(again.size()), -5, 3);
  PeakOperandsBf16(other.data(), static_cast<int64_t>(other.size()), -5, 4);
  EXPECT_EQ(again, v);
  EXPECT_NE(other, v);
}

TEST(MachineLimitsTest, ReportsPositiveLimitsAndAMeasuredPrefetchDistance) {
  ThreadPool pool(2);
  const MachineLimits l = MeasureMachineLimits(pool, int64_t{64} << 20, 1);
  EXPECT_GT(l.read_gbps, 0);
  EXPECT_GT(l.read_gbps_1t, 0);
  EXPECT_GT(l.f32_fma_gflops, 0);
  if (ActiveIsa() != Isa::kScalar) {  // the Q8_0 kernels' int8 dot products
    EXPECT_GT(l.int8_dot_gops, 0);
    EXPECT_NE(std::string(l.int8_isa), "");
  }
  bool listed = false;
  for (const int64_t d : kReadPrefetchDistances) listed = listed || d == l.read_prefetch_bytes;
  EXPECT_TRUE(listed) << l.read_prefetch_bytes;
}

}  // namespace
}  // namespace cpm::kernels
