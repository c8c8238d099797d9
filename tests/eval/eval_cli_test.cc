// `cpmserve eval dump|logits|greedy` as a user runs them: exit codes (0 pass, 1 bound failed,
// 2 unusable input), the three output formats, and one configuration as another's reference.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "eval/run_command.h"
#include "eval/tiny_model_fixture.h"

namespace cpm {
namespace {

using testing::Cpmserve;
using testing::RunCommand;

class EvalCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::TempPath("eval_cli"));
    ASSERT_TRUE(testing::MakeTinyModel(*dir_ + "/healthy").ok());
    ASSERT_TRUE(testing::CopyModel(*dir_ + "/healthy", *dir_ + "/damaged").ok());
    ASSERT_TRUE(testing::DamageTensor(*dir_ + "/damaged", "model.layers.0.self_attn.o_proj.weight", 0.5).ok());
    std::ofstream(*dir_ + "/prompts.txt") << "hello world\n你好\n{\"id\": \"ids\", \"prompt_ids\": [1, 40, 41, 42]}\n";
    const auto r = RunCommand(Cpmserve() + " eval dump --model " + *dir_ + "/healthy --prompts " + *dir_ +
                              "/prompts.txt --dtype float32 --threads 2 --greedy-tokens 8 --out " + *dir_ +
                              "/ref_f32.jsonl 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }
  static std::string Eval(const std::string& sub, const std::string& model, const std::string& flags) {
    return Cpmserve() + " eval " + sub + " --model " + *dir_ + "/" + model + " --reference " + *dir_ +
           "/ref_f32.jsonl --threads 2 " + flags + " 2>/dev/null";
  }
  static std::string* dir_;
};
std::string* EvalCli::dir_ = nullptr;

TEST_F(EvalCli, SameConfigurationPassesStrictBounds) {
  const auto r = RunCommand(Eval("logits", "healthy", "--dtype float32 --format markdown --min-top1 1 --max-rel-err 1e-5 --max-kl 1e-9 --max-logit-diff 1e-4"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("| Top-1 token 一致性 (agreement) | 100.00% (3/3) |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("PASS"), std::string::npos);
  const auto g = RunCommand(Eval("greedy", "healthy", "--dtype float32 --min-exact 1"));
  EXPECT_EQ(g.exit_code, 0) << g.out;
  EXPECT_NE(g.out.find("exact match 100.0% (3 / 3)"), std::string::npos) << g.out;
}

TEST_F(EvalCli, Bfloat16AgainstFloat32ReferenceIsCloseButNotExact) {
  const auto r = RunCommand(Eval("logits", "healthy", "--dtype bfloat16 --format json"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out);
  const auto& s = j["summary"];
  std::printf("bf16 vs f32: top1 %.3f top5 %.3f top20 %.3f max_rel %.5f mean_rel %.5f kl_mean %.3g kl_max %.3g\n",
              s["top1"].get<double>(), s["top5_overlap"].get<double>(), s["top20_overlap"].get<double>(),
              s["max_rel_err"].get<double>(), s["mean_rel_err"].get<double>(), s["kl_mean"].get<double>(),
              s["kl_max"].get<double>());
  EXPECT_GT(s["max_rel_err"].get<double>(), 0.0);
  EXPECT_LT(s["max_rel_err"].get<double>(), 0.25);
  // The dump carries each row's logsumexp, so the raw-logit figures are there, bf16-sized.
  std::printf("bf16 vs f32 logits: max %.3g mean %.3g rel %.3g\n", s["max_abs_logit_diff"].get<double>(),
              s["mean_abs_logit_diff"].get<double>(), s["logit_rel_err"].get<double>());
  EXPECT_GT(s["max_abs_logit_diff"].get<double>(), 1e-4);
  EXPECT_LT(s["max_abs_logit_diff"].get<double>(), 1.0);
  EXPECT_LE(s["mean_abs_logit_diff"].get<double>(), s["max_abs_logit_diff"].get<double>());
  EXPECT_GT(s["logit_rel_err"].get<double>(), 0.0);
  EXPECT_EQ(j["kind"], "logits");
  EXPECT_EQ(j["prompts"].size(), 3u);
}

TEST_F(EvalCli, DamagedCheckpointFailsTheBounds) {
  const auto r = RunCommand(Eval("logits", "damaged", "--dtype float32 --max-rel-err 0.01 --max-kl 1e-4"));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("FAIL max relative error"), std::string::npos) << r.out;
  const auto logit = RunCommand(Eval("logits", "damaged", "--dtype float32 --max-logit-diff 1e-3"));
  EXPECT_EQ(logit.exit_code, 1) << logit.out;
  EXPECT_NE(logit.out.find("FAIL max logit diff"), std::string::npos) << logit.out;
  // Without bounds the same comparison only reports.
  EXPECT_EQ(RunCommand(Eval("logits", "damaged", "--dtype float32")).exit_code, 0);
}

TEST_F(EvalCli, UnusableInputExitsTwo) {
  EXPECT_EQ(RunCommand(Cpmserve() + " eval logits --model " + *dir_ + "/healthy --reference " + *dir_ +
                       "/missing.jsonl 2>/dev/null").exit_code, 2);
  EXPECT_EQ(RunCommand(Eval("logits", "healthy", "--format yaml")).exit_code, 2);
  EXPECT_EQ(RunCommand(Cpmserve() + " eval logits --model " + *dir_ + "/nowhere --reference " + *dir_ +
                       "/ref_f32.jsonl 2>/dev/null").exit_code, 2);
  // A negative count is refused by the parser, not read as "the reference's length".
  const auto negative = RunCommand(Cpmserve() + " eval greedy --model " + *dir_ + "/healthy --reference " +
                                   *dir_ + "/ref_f32.jsonl --tokens -3 2>&1");
  EXPECT_NE(negative.exit_code, 0);
  EXPECT_NE(negative.out.find("--tokens: must be at least 0, got -3"), std::string::npos) << negative.out;
}

TEST_F(EvalCli, ShortTopKReferenceExitsTwo) {
  // A reference with one log-prob per prompt cannot give a top-20 overlap: exit 2 naming the
  // file, the record and the field, not "100.00% (20/20) PASS".
  const std::string path = *dir_ + "/k1.jsonl";
  {
    std::ifstream in(*dir_ + "/ref_f32.jsonl");
    std::ofstream out(path);
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      j["top_logprobs"] = nlohmann::json::array({j["top_logprobs"][0]});
      out << j.dump() << "\n";
    }
  }
  const auto r = RunCommand(Cpmserve() + " eval logits --model " + *dir_ + "/healthy --threads 2 --reference " +
                            path + " --min-top20-overlap 0.9 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find(path + ":1: record 'p0': top_logprobs: holds 1 entries"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("PASS"), std::string::npos) << r.out;
}

TEST_F(EvalCli, DumpIsAPromptsFile) {
  // Re-dumping from a dump keeps the ids (and so the distributions) identical.
  const std::string out = *dir_ + "/again.jsonl";
  const auto r = RunCommand(Cpmserve() + " eval dump --model " + *dir_ + "/healthy --dtype float32 --threads 2 --prompts " +
                            *dir_ + "/ref_f32.jsonl --out " + out + " 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::ifstream a(*dir_ + "/ref_f32.jsonl"), b(out);
  std::string la, lb;
  while (std::getline(a, la) && std::getline(b, lb)) {
    const auto ja = nlohmann::json::parse(la), jb = nlohmann::json::parse(lb);
    EXPECT_EQ(ja["prompt_ids"], jb["prompt_ids"]);
    EXPECT_EQ(ja["top_logprobs"], jb["top_logprobs"]);
  }
}

}  // namespace
}  // namespace cpm
