// `cpmserve validate` end to end on tiny checkpoints: real `serve` children on loopback ports.
// A healthy checkpoint passes every gate; one whose weights file is cut short passes the dummy
// gate but fails the real-weight gate, and the command exits non-zero.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "eval/run_command.h"
#include "eval/tiny_model_fixture.h"
#include "multimodal/test_images.h"

namespace cpm {
namespace {

using testing::Cpmserve;
using testing::RunCommand;

class ValidateE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::TempPath(std::string("validate_e2e_") +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    ASSERT_TRUE(testing::MakeTinyModel(dir_ + "/model").ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Validate(const std::string& flags) {
    return Cpmserve() + " validate " + dir_ + "/model --threads 2 --ready-timeout 120 --work-dir " + dir_ +
           "/logs --max-num-seqs 4 --kv-cache-memory-bytes 16M " + flags + " 2>/dev/null";
  }
  std::string dir_;
};

TEST_F(ValidateE2e, HealthyCheckpointPassesEveryGate) {
  std::ofstream(dir_ + "/prompts.txt") << "hello world\n你好\n";
  const auto d = RunCommand(Cpmserve() + " eval dump --model " + dir_ + "/model --threads 2 --greedy-tokens 8 --prompts " +
                            dir_ + "/prompts.txt --out " + dir_ + "/ref.jsonl 2>&1");
  ASSERT_EQ(d.exit_code, 0) << d.out;
  const auto r = RunCommand(Validate("--reference " + dir_ + "/ref.jsonl --min-top1 1 --max-rel-err 1e-4 --min-exact 1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"Stage A — Dummy Fast Gate — ✅ pass", "Stage B — Real-Weight Mandatory Gate — ✅ pass",
                        "Smoke 验证 — ✅ pass", "精度评测 Accuracy — ✅ pass", "| GET /v1/models | 200 |",
                        "| POST /v1/chat/completions | 200 |", "Available KV cache memory", "KV cache size",
                        "--load-format dummy", "--max-num-seqs 4", "Top-1 token 一致性", "精确匹配率",
                        "✅ All gates passed."}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("not in the log"), std::string::npos) << r.out;
  // Without bounds the tables are reported, not gated: never a "✅ pass" they did not earn.
  const auto u = RunCommand(Validate("--skip-dummy --reference " + dir_ + "/ref.jsonl"));
  EXPECT_EQ(u.exit_code, 0) << u.out;
  EXPECT_NE(u.out.find("精度评测 Accuracy — ℹ️ reported, not gated"), std::string::npos) << u.out;
  EXPECT_EQ(u.out.find("精度评测 Accuracy — ✅ pass"), std::string::npos) << u.out;
  // A reference that cannot be read is unusable input, found before any server starts.
  const auto m = RunCommand(Validate("--reference " + dir_ + "/missing.jsonl"));
  EXPECT_EQ(m.exit_code, 2) << m.out;
  EXPECT_EQ(m.out.find("Stage A"), std::string::npos) << m.out;
  // So is one that reads but does not fit the model (a top-1 list where the tables need 20),
  // as `eval logits` finds it: exit 2 before the gates' servers run, not after them.
  {
    std::ifstream in(dir_ + "/ref.jsonl");
    std::ofstream out(dir_ + "/short.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line);
      j["top_logprobs"] = nlohmann::json::array({j["top_logprobs"][0]});
      out << j.dump() << "\n";
    }
  }
  const auto s = RunCommand(Cpmserve() + " validate " + dir_ + "/model --reference " + dir_ +
                            "/short.jsonl --work-dir " + dir_ + "/logs 2>&1");
  EXPECT_EQ(s.exit_code, 2) << s.out;
  EXPECT_NE(s.out.find("top_logprobs: holds 1 entries"), std::string::npos) << s.out;
  EXPECT_EQ(s.out.find("Stage A"), std::string::npos) << s.out;
}

TEST_F(ValidateE2e, SeedServeFlagsAndApiKeyAreHandled) {
  // The seed command lines carry `--host 0.0.0.0 --port 8000`: validate keeps its own loopback
  // port (a second --port made serve exit 114) and says so; with --api-key the probes
  // authenticate (they got 401 before).
  // The dummy gate's --load-format forwarded would have put the real-weight gate on dummy
  // weights: dropped too.
  const auto r = RunCommand(Validate("--host 0.0.0.0 --port 8000 --load-format dummy --api-key sk1"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"Stage A — Dummy Fast Gate — ✅ pass", "Stage B — Real-Weight Mandatory Gate — ✅ pass",
                        "Smoke 验证 — ✅ pass", "| POST /v1/chat/completions | 200 |",
                        "not forwarded to serve: `--host 0.0.0.0`, `--port 8000`, `--load-format dummy`",
                        "--api-key sk1",
                        "'Authorization: Bearer sk1'"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  EXPECT_EQ(r.out.find("--port 8000 "), std::string::npos) << r.out;  // not on any serve line
  // serve also takes its key from $VLLM_API_KEY; the `--port=N` form is dropped as well.
  const auto e = RunCommand("VLLM_API_KEY=sk2 " + Validate("--skip-dummy --port=8000"));
  EXPECT_EQ(e.exit_code, 0) << e.out;
  for (const char* s : {"Smoke 验证 — ✅ pass", "not forwarded to serve: `--port=8000`",
                        "\"Authorization: Bearer $VLLM_API_KEY\""}) {
    EXPECT_NE(e.out.find(s), std::string::npos) << s << "\n" << e.out;
  }
}

// --dummy-only: the seed's Stage A alone, for a directory with the config and tokenizer and no
// weights yet.
TEST_F(ValidateE2e, DummyOnlyNeedsNoWeights) {
  for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/model")) {
    if (entry.path().extension() == ".safetensors") std::filesystem::remove(entry.path());
  }
  const auto full = RunCommand(Validate(""));
  EXPECT_EQ(full.exit_code, 1) << full.out;
  const auto r = RunCommand(Validate("--dummy-only"));
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("Stage A — Dummy Fast Gate — ✅ pass"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Stage B"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("✅ All gates passed."), std::string::npos) << r.out;
}

TEST_F(ValidateE2e, TruncatedWeightsFailTheRealWeightGate) {
  ASSERT_TRUE(testing::TruncateWeights(dir_ + "/model").ok());
  const auto r = RunCommand(Validate(""));
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_NE(r.out.find("Stage A — Dummy Fast Gate — ✅ pass"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Stage B — Real-Weight Mandatory Gate — ❌ fail"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("before it was ready"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("❌ At least one gate failed."), std::string::npos) << r.out;
}

TEST_F(ValidateE2e, ImageSmokeRequestOnMiniCpmV) {
  // The seed's second smoke request (an image and a question) against MiniCPM-V-4.6; a text-only
  // model answers it with a 400, which fails the smoke gate.
  const std::string v46 = dir_ + "/v46";
  const auto mk = RunCommand(Cpmserve() + " make-tiny --arch minicpmv4_6 " + v46 + " 2>&1");
  ASSERT_EQ(mk.exit_code, 0) << mk.out;
  std::ofstream(dir_ + "/photo.jpg", std::ios::binary)
      << test_images::EncodeJpeg(test_images::NoiseImage(640, 480, 3), 85);
  const std::string flags = " --threads 2 --ready-timeout 120 --max-num-seqs 4 --kv-cache-memory-bytes 16M "
                            "--skip-dummy --smoke-image " + dir_ + "/photo.jpg 2>/dev/null";
  const auto r = RunCommand(Cpmserve() + " validate " + v46 + " --max-model-len 2048 --work-dir " + dir_ +
                            "/logs_v" + flags);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  for (const char* s : {"Smoke 验证 — ✅ pass", "| POST /v1/chat/completions | 200 |",
                        "| POST /v1/chat/completions (image) | 200 |", "Reply (image)", "data:image/*;base64,"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  }
  // Thinking on (and 32 tokens of a random model rarely close it): a reply with reasoning only,
  // content null, is still a reply. Without --smoke-image a MiniCPM-V gets the built-in image.
  const auto k = RunCommand(Cpmserve() + " validate " + v46 + " --max-model-len 2048 --work-dir " + dir_ +
                            "/logs_k --default-chat-template-kwargs '{\"enable_thinking\": true}'"
                            " --threads 2 --ready-timeout 120 --max-num-seqs 4 --kv-cache-memory-bytes 16M"
                            " --skip-dummy 2>/dev/null");
  EXPECT_EQ(k.exit_code, 0) << k.out;
  for (const char* s : {"Smoke 验证 — ✅ pass", "| Reply | (empty) |", "| Reasoning |",
                        "| POST /v1/chat/completions (image) | 200 |"}) {
    EXPECT_NE(k.out.find(s), std::string::npos) << s << "\n" << k.out;
  }
  const auto t = RunCommand(Cpmserve() + " validate " + dir_ + "/model --work-dir " + dir_ + "/logs_t" + flags);
  EXPECT_EQ(t.exit_code, 1) << t.out;
  EXPECT_NE(t.out.find("| POST /v1/chat/completions (image) | 400 |"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("Smoke 验证 — ❌ fail"), std::string::npos) << t.out;
}

}  // namespace
}  // namespace cpm
