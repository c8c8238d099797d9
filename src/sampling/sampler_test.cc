#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace cpm {
namespace {

TEST(SamplerTest, LogSoftmaxNormalises) {
  const float logits[] = {1.0f, 2.0f, 3.0f};
  float out[3];
  LogSoftmax(logits, 3, out);
  double s = 0;
  for (float v : out) s += std::exp(v);
  EXPECT_NEAR(s, 1.0, 1e-6);
  EXPECT_NEAR(out[2] - out[1], 1.0f, 1e-6);
}

TEST(SamplerTest, GreedyPicksArgmaxLowestOnTies) {
  const float logits[] = {0.5f, 2.0f, 2.0f, -1.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  Rng rng(1);
  EXPECT_EQ(SampleToken(logits, 4, p, rng), 1);
}

TEST(SamplerTest, TopKOneIsGreedyAndTopPRestricts) {
  const float logits[] = {0.0f, 3.0f, 2.9f, -5.0f};
  SamplingParams p;
  p.top_k = 1;
  Rng rng(7);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleToken(logits, 4, p, rng), 1);
  p.top_k = 0;
  p.top_p = 0.4f;  // token 1 alone has ~0.5 of the mass
  for (int i = 0; i < 50; ++i) EXPECT_EQ(SampleToken(logits, 4, p, rng), 1);
}

TEST(SamplerTest, SeededDrawsRepeatAndFollowTheDistribution) {
  const float logits[] = {0.0f, std::log(3.0f)};  // p = 0.25, 0.75
  SamplingParams p;
  Rng a(42), b(42);
  std::map<int, int> counts;
  for (int i = 0; i < 4000; ++i) {
    int x = SampleToken(logits, 2, p, a);
    EXPECT_EQ(x, SampleToken(logits, 2, p, b));
    counts[x]++;
  }
  EXPECT_NEAR(counts[1] / 4000.0, 0.75, 0.03);
}

TEST(SamplerTest, PenaltiesFollowVllm) {
  float logits[] = {2.0f, -2.0f, 1.0f};
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  const int32_t prompt[] = {1};
  const int32_t output[] = {0, 0};
  ApplyPenalties(logits, 3, p, prompt, output);
  EXPECT_FLOAT_EQ(logits[0], 2.0f / 2.0f - 2 * 0.5f - 0.25f);
  EXPECT_FLOAT_EQ(logits[1], -4.0f);
  EXPECT_FLOAT_EQ(logits[2], 1.0f);
}

}  // namespace
}  // namespace cpm
