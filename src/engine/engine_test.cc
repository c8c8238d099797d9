// Engine tests over FakeModel: outputs are checked against an oracle computed independently
// from FakeModel::Logits, so a wrong block table, a bad prefix hit or a lost token shows up.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "engine/fake_model.h"
#include "engine/engine_test_util.h"

namespace cpm {
namespace {

TEST(EngineTest, SingleGreedyRequestMatchesOracle) {
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine({}, {}, &fake);
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9};
  Result r = Collect(engine->Submit(Req("a", prompt, 12)));
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.tokens, OracleGreedy(prompt, 12, 97));
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.num_events, 12);
  EXPECT_EQ(r.last.num_prompt_tokens, 5);
  const RequestTimes& t = r.last.times;
  EXPECT_LE(t.arrival, t.first_scheduled);
  EXPECT_LE(t.first_scheduled, t.first_token);
  EXPECT_LE(t.first_token, t.token_time);
  EXPECT_LE(t.token_time, t.finished);
  EngineStats s = engine->Stats();
  EXPECT_EQ(s.num_free_blocks, s.num_total_blocks);
  EXPECT_EQ(s.generation_tokens_total, 12);
  EXPECT_EQ(s.prompt_tokens_total, 5);
  EXPECT_EQ(s.num_requests_finished, 1);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
}

TEST(EngineTest, ChunkedPrefillUnderTokenBudget) {
  EngineConfig c = SmallConfig();
  c.max_num_batched_tokens = 8;
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, {}, &fake);
  const std::vector<int32_t> prompt = Range(1, 31);  // 30 tokens
  Result r = Collect(engine->Submit(Req("a", prompt, 3)));
  ASSERT_TRUE(r.error.ok());
  EXPECT_EQ(r.tokens, OracleGreedy(prompt, 3, 97));
  std::vector<int64_t> chunk_sizes, starts;
  for (const FakeStep& s : fake->Steps()) {
    ASSERT_EQ(s.seqs.size(), 1u);
    chunk_sizes.push_back(s.seqs[0].num_tokens);
    starts.push_back(s.seqs[0].num_computed);
  }
  EXPECT_EQ(chunk_sizes, (std::vector<int64_t>{8, 8, 8, 6, 1, 1}));
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 8, 16, 24, 30, 31}));
}

}  // namespace
}  // namespace cpm
