// EngineConfig::warm_up: before Create returns, the encoder hook on the engine thread, then a
// prompt of a full step's tokens and one decode step; nothing of them shows afterwards (stats,
// blocks, prefix cache, a hybrid model's state slot, the outputs of later requests).
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "model/registry.h"
#include "model/tiny_checkpoint.h"
#include "model/tiny_minicpmv46.h"

namespace cpm {
namespace {

class EngineWarmUpTest : public ::testing::TestWithParam<int64_t /*state_slot_bytes*/> {};

TEST_P(EngineWarmUpTest, RunsTheHookThenAFullStepPromptAndADecodeStepBeforeServing) {
  EngineConfig c = SmallConfig();  // 64-token steps
  c.warm_up = true;
  FakeModel* fake = nullptr;
  int hook_calls = 0;
  size_t steps_before_hook = 99;
  std::thread::id hook_thread;
  c.warm_up_encoder = [&](ThreadPool&) {
    ++hook_calls;
    steps_before_hook = fake->Steps().size();
    hook_thread = std::this_thread::get_id();
    return OkStatus();
  };
  FakeModelOptions o;
  o.state_slot_bytes = GetParam();
  auto engine = MakeFakeEngine(c, o, &fake);
  // Done when Create returns: the hook first, on the engine thread (not this one).
  EXPECT_EQ(hook_calls, 1);
  EXPECT_EQ(steps_before_hook, 0u);
  EXPECT_NE(hook_thread, std::this_thread::get_id());
  std::vector<FakeStep> steps = fake->Steps();
  ASSERT_EQ(steps.size(), 2u);
  ASSERT_EQ(steps[0].seqs.size(), 1u);
  EXPECT_EQ(steps[0].seqs[0].num_computed, 0);
  EXPECT_EQ(steps[0].num_tokens, 64);
  EXPECT_EQ(steps[0].num_logit_rows, 1);
  ASSERT_EQ(steps[1].seqs.size(), 1u);
  EXPECT_EQ(steps[1].seqs[0].num_computed, 64);
  EXPECT_EQ(steps[1].num_tokens, 1);
  EXPECT_EQ(steps[1].num_logit_rows, 1);
  // None of it is counted, every block is back, nothing was cached.
  EngineStats s = engine->Stats();
  EXPECT_EQ(s.num_steps, 0);
  EXPECT_EQ(s.prompt_tokens_total, 0);
  EXPECT_EQ(s.generation_tokens_total, 0);
  EXPECT_EQ(s.num_requests_finished, 0);
  EXPECT_EQ(s.iteration_tokens.sum, 0);
  EXPECT_EQ(s.num_free_blocks, s.num_total_blocks);
  EXPECT_EQ(s.num_cached_free_blocks, 0);
  // Its prompt's first block is not a prefix hit for a request that starts the same way, and
  // the request's tokens are the oracle's (the fake reads every token back from the cache).
  const std::vector<int32_t> prompt = Range(0, 12);
  Result r = Collect(engine->Submit(Req("a", prompt, 5)));
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.tokens, OracleGreedy(prompt, 5, 97));
  EXPECT_EQ(r.last.num_cached_tokens, 0);
  EXPECT_EQ(engine->Stats().num_steps, 1 + 4);
}

INSTANTIATE_TEST_SUITE_P(AttentionAndHybrid, EngineWarmUpTest, ::testing::Values(0, 64));

// A step's tokens, within max_model_len and the cache, and no more than 512.
TEST(EngineWarmUpLimitsTest, PromptFitsMaxModelLenAndTheCache) {
  for (auto [budget, max_model_len, num_blocks, want] :
       {std::tuple{64, 1024, 256, 64}, {64, 40, 256, 39}, {64, 1024, 10, 39},
        {4096, 4096, 2048, 512}}) {
    EngineConfig c = SmallConfig();  // 4-token blocks
    c.max_num_batched_tokens = budget;
    c.max_model_len = max_model_len;
    c.num_kv_blocks = num_blocks;
    c.warm_up = true;
    FakeModel* fake = nullptr;
    auto engine = MakeFakeEngine(c, {}, &fake);
    std::vector<FakeStep> steps = fake->Steps();
    ASSERT_EQ(steps.size(), 2u);
    EXPECT_EQ(steps[0].num_tokens, want) << max_model_len << " " << num_blocks;
    EXPECT_EQ(steps[1].seqs[0].num_computed, want);
  }
}

TEST(EngineWarmUpLimitsTest, AFailureFailsCreateWithItsReason) {
  EngineConfig c = SmallConfig();
  c.warm_up = true;
  FakeModelOptions o;
  o.fail_token = 3;  // among the warm-up prompt's tokens
  auto engine = Engine::Create(std::make_unique<FakeModel>(o), c, nullptr);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("warm-up"), std::string::npos)
      << engine.status().ToString();

  c.warm_up_encoder = [](ThreadPool&) { return InvalidArgument("encoder says no"); };
  engine = Engine::Create(std::make_unique<FakeModel>(), c, nullptr);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("warm-up: encoder says no"), std::string::npos)
      << engine.status().ToString();
}

// On real tiny checkpoints, a warmed-up engine gives the same tokens and log-probs bit for bit
// as a cold one: the warm-up's K/V blocks and (hybrid) state slot are handed out again as it
// left them, and must not leak into a request.
void ExpectWarmUpKeepsOutputs(const std::string& dir) {
  ThreadPool pool(2);
  auto run = [&](bool warm_up) {
    LoadOptions lo;
    lo.model_dir = dir;
    lo.max_model_len = 128;
    auto model = LoadModel(lo, pool);
    EXPECT_TRUE(model.ok()) << model.status().ToString();
    EngineConfig c;
    c.block_size = 16;
    c.num_kv_blocks = 6;  // 5 of them the warm-up's: each request gets some of those
    c.max_num_seqs = 2;
    c.max_num_batched_tokens = 64;
    c.max_model_len = 96;
    c.warm_up = warm_up;
    auto engine = Engine::Create(std::move(model).value(), c, &pool);
    EXPECT_TRUE(engine.ok()) << engine.status().ToString();
    std::vector<Result> out;
    for (int i = 0; i < 2; ++i) {
      EngineRequest r = Req("r" + std::to_string(i), Range(5 + i, 40 + 7 * i), 12);
      r.logprobs = 0;
      out.push_back(Collect((*engine)->Submit(std::move(r))));
    }
    return out;
  };
  const std::vector<Result> cold = run(false), warm = run(true);
  for (size_t i = 0; i < cold.size(); ++i) {
    ASSERT_TRUE(warm[i].error.ok()) << warm[i].error.ToString();
    EXPECT_EQ(warm[i].tokens, cold[i].tokens) << "request " << i;
    ASSERT_EQ(warm[i].logprobs.size(), cold[i].logprobs.size());
    for (size_t t = 0; t < cold[i].logprobs.size(); ++t) {
      EXPECT_EQ(warm[i].logprobs[t].logprob, cold[i].logprobs[t].logprob) << i << " " << t;
    }
  }
}

std::string TempDir(const std::string& name) {
  return (std::filesystem::temp_directory_path() / (name + std::to_string(getpid()))).string();
}

TEST(EngineWarmUpTinyModelTest, MiniCpmOutputsUnchanged) {
  TinyCheckpointOptions o;
  o.out_dir = TempDir("cpm_warm_up_minicpm_");
  o.seed = 11;
  o.vocab_size = 256;
  ASSERT_TRUE(WriteTinyMiniCpm(o).ok());
  ExpectWarmUpKeepsOutputs(o.out_dir);
  std::filesystem::remove_all(o.out_dir);
}

TEST(EngineWarmUpTinyModelTest, HybridOutputsUnchanged) {
  TinyCheckpointOptions o;
  o.out_dir = TempDir("cpm_warm_up_hybrid_");
  o.seed = 12;
  o.vocab_size = 256;
  TinyQwen35Dims dims;
  dims.minicpmv = false;
  ASSERT_TRUE(WriteTinyQwen35(o, dims).ok());
  ExpectWarmUpKeepsOutputs(o.out_dir);
  std::filesystem::remove_all(o.out_dir);
}

}  // namespace
}  // namespace cpm
