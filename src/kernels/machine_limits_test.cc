// The limits' measuring loops: the streaming read reads exactly the words it claims at every
// software-prefetch distance (so a faster distance is no shortcut), and the limits are sane.
#include "kernels/machine_limits.h"

#include <gtest/gtest.h>

#include <string>

#include <random>

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
  // One flipped bit in each 64-bit lane of a 32-byte load changes the result.
  for (int lane = 0; lane < 4; ++lane) {
    words[1000 + lane] ^= 1;
    EXPECT_NE(StreamReadAvx2(buf.data(), bytes, 0), want) << "lane " << lane;
    words[1000 + lane] ^= 1;
  }
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
