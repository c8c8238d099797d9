// eval on tiny checkpoints, in-process: a model compared with its own dump must agree exactly,
// a copy with one layer's weights perturbed must be flagged, and float32 vs bfloat16 compute of
// the same weights must differ a little but not much.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>

#include "base/log.h"
#include "eval/dump_producer.h"
#include "eval/eval_report.h"
#include "eval/eval_runner.h"
#include "eval/eval_target.h"
#include "eval/prompt_set.h"
#include "eval/reference_dump.h"
#include "eval/tiny_model_fixture.h"

namespace cpm {
namespace {

constexpr int64_t kGreedy = 12;

std::vector<PromptSpec> Prompts() {
  std::vector<PromptSpec> p;
  for (const char* text : {"hello world", "你好", "the quick brown fox jumps over", "1+1="}) {
    PromptSpec s;
    s.id = "p" + std::to_string(p.size());
    s.text = text;
    p.push_back(s);
  }
  PromptSpec chat;
  chat.id = "chat";
  chat.text = "北京是中国的首都";
  chat.chat = true;
  p.push_back(chat);
  return p;
}

EvalTarget Load(const std::string& dir, const std::string& dtype) {
  EvalModelOptions o;
  o.model_dir = dir;
  o.dtype = dtype;
  o.threads = 2;
  o.require_tokenizer = true;
  auto t = LoadEvalTarget(o, "test");
  EXPECT_TRUE(t.ok()) << t.status().message();
  return std::move(*t);
}

std::vector<ReferenceRecord> Dump(EvalTarget& t, int32_t top_k = 20) {
  auto prompts = PreparePrompts(Prompts(), t.tokenizer.get(), false);
  EXPECT_TRUE(prompts.ok()) << prompts.status().message();
  DumpOptions o;
  o.top_k = top_k;
  o.greedy_tokens = kGreedy;
  o.stop_ids = t.stop_ids;
  o.meta = {{"producer", "test"}};
  auto recs = ProduceDump(*t.model, *t.pool, t.tokenizer.get(), *prompts, o);
  EXPECT_TRUE(recs.ok()) << recs.status().message();
  return *recs;
}

class EvalTinyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    SetLogLevel("warning");
    dir_ = new std::string(testing::TempPath("eval_tiny_model"));
    ASSERT_TRUE(testing::MakeTinyModel(*dir_ + "/healthy").ok());
    ASSERT_TRUE(testing::CopyModel(*dir_ + "/healthy", *dir_ + "/damaged").ok());
    ASSERT_TRUE(testing::DamageTensor(*dir_ + "/damaged", "model.layers.1.mlp.down_proj.weight", 0.5).ok());
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string* dir_;
};
std::string* EvalTinyModel::dir_ = nullptr;

TEST_F(EvalTinyModel, DumpRecordsAreWellFormed) {
  EvalTarget t = Load(*dir_ + "/healthy", "auto");
  const auto recs = Dump(t);
  ASSERT_EQ(recs.size(), 5u);
  for (const ReferenceRecord& r : recs) {
    EXPECT_EQ(r.top_logprobs.size(), 20u);
    ASSERT_TRUE(r.logsumexp.has_value());
    ASSERT_TRUE(r.greedy_ids.has_value());
    EXPECT_FALSE(r.greedy_ids->empty());
    EXPECT_LE(static_cast<int64_t>(r.greedy_ids->size()), kGreedy);
    // Text prompts get BOS (tokenizer(text)); chat prompts carry what the template renders,
    // and MiniCPM4's template has no BOS (apply_chat_template encodes without special tokens).
    EXPECT_EQ(r.prompt_ids.front() == 1, !r.chat) << r.id;
  }
  EXPECT_TRUE(recs.back().chat);
  // logprob + logsumexp is the raw logit: the last-position logits give it back.
  auto logits = LastPositionLogits(*t.model, *t.pool, {recs[0].prompt_ids}, 16);
  ASSERT_TRUE(logits.ok());
  const auto [id, lp] = recs[0].top_logprobs[0];
  EXPECT_NEAR(lp + *recs[0].logsumexp, (*logits)[0][id], 1e-4);
  // Through the file and back, the records are unchanged.
  const std::string path = *dir_ + "/ref.jsonl";
  ASSERT_TRUE(WriteReferenceDump(path, recs).ok());
  auto back = ReadReferenceDump(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ((*back)[2].top_logprobs, recs[2].top_logprobs);
  EXPECT_EQ(*(*back)[2].greedy_ids, *recs[2].greedy_ids);
}

TEST_F(EvalTinyModel, IdenticalCheckpointPasses) {
  EvalTarget ref = Load(*dir_ + "/healthy", "auto");
  const auto recs = Dump(ref);
  EvalTarget t = Load(*dir_ + "/healthy", "auto");
  EvalRunOptions ro{16, t.stop_ids};
  auto logits = RunLogitsEval(*t.model, *t.pool, recs, t.tokenizer.get(), ro);
  ASSERT_TRUE(logits.ok()) << logits.status().message();
  const LogitsSummary& s = logits->summary;
  EXPECT_EQ(s.rows, 5);
  EXPECT_EQ(s.top1, 1.0);
  EXPECT_EQ(s.top5_overlap, 1.0);
  EXPECT_EQ(s.top20_overlap, 1.0);
  EXPECT_LT(s.max_rel_err, 1e-6);
  EXPECT_LT(s.kl_max, 1e-9);
  LogitsBounds strict;
  strict.min_top1 = 1.0, strict.max_rel_err = 1e-4, strict.max_kl = 1e-8;
  EXPECT_TRUE(CheckLogitsBounds(s, strict).empty());

  auto greedy = RunGreedyEval(*t.model, *t.pool, recs, t.tokenizer.get(), 0, ro);
  ASSERT_TRUE(greedy.ok()) << greedy.status().message();
  EXPECT_EQ(greedy->tokens, kGreedy);
  EXPECT_EQ(greedy->summary.exact, 5);
  EXPECT_EQ(greedy->summary.mean_token_accuracy, 1.0);
  for (const GreedyPromptResult& p : greedy->prompts) EXPECT_EQ(p.ref_text, p.eng_text);
  // More tokens than the reference holds (not cut by an EOS): refused, not scored as divergences.
  auto longer = RunGreedyEval(*t.model, *t.pool, recs, t.tokenizer.get(), kGreedy + 8, ro);
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(longer.status().message().find("fewer than the " + std::to_string(kGreedy + 8)),
            std::string::npos)
      << longer.status().message();
  // One record cut short (no EOS) while N comes from the reference: that record is compared over
  // its own length, the others over N; with --tokens N it is refused.
  std::vector<ReferenceRecord> cut = recs;
  auto full = std::find_if(cut.begin(), cut.end(), [](const ReferenceRecord& r) {
    return static_cast<int64_t>(r.greedy_ids->size()) == kGreedy;
  });
  ASSERT_NE(full, cut.end());
  full->greedy_ids->resize(kGreedy / 2);
  auto own = RunGreedyEval(*t.model, *t.pool, cut, t.tokenizer.get(), 0, ro);
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ(own->summary.exact, 5);
  EXPECT_FALSE(RunGreedyEval(*t.model, *t.pool, cut, t.tokenizer.get(), kGreedy, ro).ok());
}

TEST_F(EvalTinyModel, DamagedCheckpointIsFlagged) {
  EvalTarget ref = Load(*dir_ + "/healthy", "auto");
  const auto recs = Dump(ref);
  EvalTarget t = Load(*dir_ + "/damaged", "auto");
  EvalRunOptions ro{16, t.stop_ids};
  auto logits = RunLogitsEval(*t.model, *t.pool, recs, t.tokenizer.get(), ro);
  ASSERT_TRUE(logits.ok());
  const LogitsSummary& s = logits->summary;
  std::printf("damaged: top1 %.3f top20 %.3f max_rel %.4f mean_rel %.4f kl_max %.3g\n", s.top1,
              s.top20_overlap, s.max_rel_err, s.mean_rel_err, s.kl_max);
  EXPECT_GT(s.max_rel_err, 0.05);
  EXPECT_GT(s.kl_max, 1e-3);
  LogitsBounds seed;  // the seed's acceptance: max relative error under 1%
  seed.max_rel_err = 0.01;
  seed.max_kl = 1e-4;
  EXPECT_EQ(CheckLogitsBounds(s, seed).size(), 2u);
  auto greedy = RunGreedyEval(*t.model, *t.pool, recs, t.tokenizer.get(), 0, ro);
  ASSERT_TRUE(greedy.ok());
  EXPECT_LT(greedy->summary.mean_token_accuracy, 1.0);
}

TEST_F(EvalTinyModel, Float32VersusBfloat16DiffersSlightly) {
  EvalTarget f32 = Load(*dir_ + "/healthy", "float32");
  const auto recs = Dump(f32);
  EvalTarget bf16 = Load(*dir_ + "/healthy", "bfloat16");
  EvalRunOptions ro{16, bf16.stop_ids};
  auto logits = RunLogitsEval(*bf16.model, *bf16.pool, recs, bf16.tokenizer.get(), ro);
  ASSERT_TRUE(logits.ok());
  const LogitsSummary& s = logits->summary;
  ReportContext ctx{"f32", "cpmserve float32", bf16.description, {}, false};
  std::printf("%s", RenderLogits(*logits, ctx, ReportFormat::kText).c_str());
  EXPECT_GT(s.max_rel_err, 1e-6);  // bf16 activations do change something
  EXPECT_GT(s.kl_max, 0.0);
  EXPECT_LT(s.max_rel_err, 0.25);  // ... but far less than a damaged layer
  EXPECT_LT(s.kl_max, 1e-2);
  EXPECT_GE(s.top20_overlap, 0.8);
}

TEST_F(EvalTinyModel, ForeignIdsAreRejected) {
  EvalTarget t = Load(*dir_ + "/healthy", "auto");
  ReferenceRecord r;
  r.id = "far";
  r.prompt_ids = {1, 1000000};
  r.top_logprobs = {{0, -0.1}};
  EvalRunOptions ro{16, t.stop_ids};
  auto logits = RunLogitsEval(*t.model, *t.pool, {r}, nullptr, ro);
  ASSERT_FALSE(logits.ok());
  EXPECT_NE(logits.status().message().find("outside the model's vocabulary"), std::string::npos);
  auto greedy = RunGreedyEval(*t.model, *t.pool, {r}, nullptr, 4, ro);
  EXPECT_FALSE(greedy.ok());  // no greedy_ids
}

TEST_F(EvalTinyModel, ReferencesThatCannotBeScoredAreRejected) {
  // A K = 1 dump used to read as "top-20 overlap 100% (20/20)", and ids from another tokenizer
  // in top_logprobs / greedy_ids as KL inf and empty text in a normal-looking table.
  EvalTarget t = Load(*dir_ + "/healthy", "auto");
  const std::vector<ReferenceRecord> recs = Dump(t);
  const std::string path = *dir_ + "/short.jsonl";
  ASSERT_TRUE(WriteReferenceDump(path, recs).ok());
  auto read = ReadReferenceDump(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EvalRunOptions ro{16, t.stop_ids};
  auto expect_refused = [&](std::vector<ReferenceRecord> refs, bool greedy, const std::string& want) {
    auto s = greedy ? RunGreedyEval(*t.model, *t.pool, refs, nullptr, 0, ro).status()
                    : RunLogitsEval(*t.model, *t.pool, refs, nullptr, ro).status();
    ASSERT_FALSE(s.ok()) << want;
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(want), std::string::npos) << s.message();
  };
  std::vector<ReferenceRecord> k1 = *read;
  k1[1].top_logprobs.resize(1);
  expect_refused(k1, false, path + ":2: record 'p1': top_logprobs: holds 1 entries, the metrics need at least 20");
  std::vector<ReferenceRecord> foreign_top = *read;
  foreign_top[2].top_logprobs[3].first = 1000000;
  expect_refused(foreign_top, false, path + ":3: record 'p2': top_logprobs: token id 1000000 is outside the model's vocabulary");
  std::vector<ReferenceRecord> foreign_greedy = *read;
  (*foreign_greedy[0].greedy_ids)[0] = 1000000;
  expect_refused(foreign_greedy, true, path + ":1: record 'p0': greedy_ids: token id 1000000 is outside the model's vocabulary");
  // ... and `eval dump` will not write such a reference.
  auto prompts = PreparePrompts(Prompts(), t.tokenizer.get(), false);
  ASSERT_TRUE(prompts.ok());
  DumpOptions o;
  o.top_k = 5;
  EXPECT_FALSE(ProduceDump(*t.model, *t.pool, t.tokenizer.get(), *prompts, o).ok());
}

// MiniCPM-V-4.6's hybrid LM keeps a recurrent state per sequence beside its KV blocks: the dump's
// batched last-position forward must give each prompt one, and agree with `eval logits` and
// `eval greedy` run on the same model bit for bit.
TEST(EvalTinyHybrid, DumpAndEvalAgreeOnTheSameModel) {
  SetLogLevel("warning");
  const std::string dir = testing::TempPath("eval_tiny_hybrid");
  ASSERT_TRUE(testing::MakeTinyHybridModel(dir).ok());
  {
    EvalTarget t = Load(dir, "float32");
    const auto recs = Dump(t);
    ASSERT_EQ(recs.size(), 5u);
    for (const ReferenceRecord& r : recs) {
      EXPECT_EQ(r.top_logprobs.size(), 20u);
      ASSERT_TRUE(r.greedy_ids.has_value());
    }
    EvalRunOptions ro{16, t.stop_ids};
    auto logits = RunLogitsEval(*t.model, *t.pool, recs, t.tokenizer.get(), ro);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    EXPECT_EQ(logits->summary.top1, 1.0);
    EXPECT_EQ(logits->summary.top20_overlap, 1.0);
    EXPECT_LT(logits->summary.max_rel_err, 1e-6);
    auto greedy = RunGreedyEval(*t.model, *t.pool, recs, t.tokenizer.get(), 0, ro);
    ASSERT_TRUE(greedy.ok()) << greedy.status().message();
    EXPECT_EQ(greedy->summary.exact, 5);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpm
