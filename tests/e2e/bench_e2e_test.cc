// The two benchmarks as processes: `cpmserve bench serve` against `cpmserve serve` on the tiny
// model over loopback (completions and chat, a concurrency cap, Poisson arrivals, --api-key,
// the result JSON's counts, lengths and metrics; unreachable server and bad flags), and the
// offline `cpmserve bench` on a tiny MiniCPM-V-4.6 checkpoint (the hybrid cost model's figures
// against a hand count from its config.json) and on a tiny MiniCPM4 one (its JSON unchanged).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "e2e/tls_test_util.h"
#include "e2e/tiny_serving_model.h"

namespace cpm {
namespace {

using e2e::Json;
namespace fs = std::filesystem;

struct ProcessRun {
  int rc = -1;
  std::string out, err;
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// Runs cpmserve with `args`, stdout and stderr captured.
ProcessRun Cpmserve(const std::vector<std::string>& args, const std::string& tmp) {
  const std::string out = tmp + "/stdout", err = tmp + "/stderr";
  const pid_t pid = fork();
  if (pid == 0) {
    const int o = open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(o, 1);
    dup2(e, 2);
    std::vector<char*> argv = {const_cast<char*>(CPM_CPMSERVE_BIN)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(CPM_CPMSERVE_BIN, argv.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out), ReadFile(err)};
}

class BenchE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new std::string(
        (fs::temp_directory_path() / ("cpm_bench_e2e_" + std::to_string(getpid()))).string());
    model_ = new std::string(*tmp_ + "/model");
    ASSERT_TRUE(WriteTinyServingModel(*model_).ok());
    server_ = new ServerProcess();
    ASSERT_TRUE(server_->Start(CPM_CPMSERVE_BIN, *model_,
                               {"--host", "127.0.0.1", "--port", "0", "--served-model-name", "tiny",
                                "--kv-cache-memory-bytes", "4M", "--max-num-seqs", "8", "--threads",
                                "2", "--api-key", "sekret"}));
    ASSERT_TRUE(server_->WaitReady()) << server_->Log();
  }
  static void TearDownTestSuite() {
    e2e::StopSuiteServer(server_);
    fs::remove_all(*tmp_);
    delete tmp_;
    delete model_;
  }
  static std::vector<std::string> ServeArgs(std::vector<std::string> extra) {
    std::vector<std::string> a = {"bench",
                                  "serve",
                                  "--port",
                                  std::to_string(server_->port()),
                                  "--api-key",
                                  "sekret",
                                  "--random-input-len",
                                  "12",
                                  "--random-output-len",
                                  "5",
                                  "--seed",
                                  "1"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  static std::string* tmp_;
  static std::string* model_;
  static ServerProcess* server_;
};
std::string* BenchE2E::tmp_ = nullptr;
std::string* BenchE2E::model_ = nullptr;
ServerProcess* BenchE2E::server_ = nullptr;

// Every reported figure finite and non-negative; percentiles ordered; TTFT ≤ E2EL.
void ExpectSaneMetrics(const Json& r, const std::vector<std::string>& metrics) {
  for (const std::string& m : metrics) {
    for (const char* stat : {"mean_", "median_", "std_", "p50_", "p99_"}) {
      const std::string key = std::string(stat) + m + "_ms";
      ASSERT_TRUE(r.contains(key)) << key;
      const double v = r[key].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v >= 0) << key << " = " << v;
    }
    EXPECT_DOUBLE_EQ(r["p50_" + m + "_ms"].get<double>(), r["median_" + m + "_ms"].get<double>());
    EXPECT_LE(r["median_" + m + "_ms"].get<double>(), r["p99_" + m + "_ms"].get<double>() + 1e-9);
  }
  EXPECT_GT(r["mean_ttft_ms"].get<double>(), 0);
  EXPECT_GT(r["mean_tpot_ms"].get<double>(), 0);
  EXPECT_LE(r["mean_ttft_ms"].get<double>(), r["mean_e2el_ms"].get<double>());
  EXPECT_LE(r["p99_ttft_ms"].get<double>(), r["p99_e2el_ms"].get<double>());
  const double dur = r["duration"].get<double>();
  ASSERT_GT(dur, 0);
  EXPECT_NEAR(r["request_throughput"].get<double>(), r["completed"].get<double>() / dur, 1e-9);
  EXPECT_NEAR(r["output_throughput"].get<double>(), r["total_output_tokens"].get<double>() / dur,
              1e-9);
  EXPECT_NEAR(
      r["total_token_throughput"].get<double>(),
      (r["total_input_tokens"].get<double>() + r["total_output_tokens"].get<double>()) / dur, 1e-9);
}

TEST_F(BenchE2E, CompletionsWithConcurrencyCap) {
  const std::string result = *tmp_ + "/completions.json";
  const ProcessRun run =
      // A model name that is no local directory: the vocabulary comes from /detokenize.
      Cpmserve(ServeArgs({"--model", "tiny", "--num-prompts", "6", "--max-concurrency", "3", "--percentile-metrics",
                          "ttft,tpot,itl,e2el", "--metric-percentiles", "50,99", "--goodput",
                          "ttft:600000", "--save-detailed", "--save-result", "--result-filename", result}),
               *tmp_);
  ASSERT_EQ(run.rc, 0) << run.out << run.err << server_->Log();
  for (const char* line :
       {"============ Serving Benchmark Result ============",
        "Successful requests:                     6", "Maximum request concurrency:             3",
        "Benchmark duration (s):", "Total input tokens:                      72",
        "Total generated tokens:                  30",
        "Request throughput (req/s):", "Output token throughput (tok/s):",
        "Total Token throughput (tok/s):", "---------------Time to First Token----------------",
        "Mean TTFT (ms):", "Median TPOT (ms):", "P99 ITL (ms):", "P50 E2EL (ms):",
        "=================================================="}) {
    EXPECT_NE(run.out.find(line), std::string::npos) << line << "\n" << run.out;
  }
  const Json r = Json::parse(ReadFile(result), nullptr, false);
  ASSERT_TRUE(r.is_object()) << ReadFile(result);
  EXPECT_EQ(r["backend"], "openai");
  EXPECT_EQ(r["model_id"], "tiny");  // --model
  EXPECT_EQ(r["tokenizer_id"], "server /detokenize");
  EXPECT_EQ(r["num_prompts"], 6);
  EXPECT_EQ(r["max_concurrency"], 3);
  EXPECT_EQ(r["request_rate"], "inf");
  EXPECT_EQ(r["completed"], 6);
  EXPECT_EQ(r["failed"], 0);
  EXPECT_EQ(r["total_input_tokens"], 6 * 12);
  EXPECT_EQ(r["total_output_tokens"], 6 * 5);  // ignore_eos: exactly the output length
  EXPECT_EQ(r["input_lens"], Json(std::vector<int>(6, 12)));
  EXPECT_EQ(r["output_lens"], Json(std::vector<int>(6, 5)));
  for (const Json& itl : r["itls"]) {
    EXPECT_LE(itl.size(), 5u);  // at most one chunk per token plus the finish chunk
    for (const Json& g : itl) EXPECT_GE(g.get<double>(), 0);
  }
  for (const Json& e : r["errors"]) EXPECT_EQ(e, "");
  EXPECT_NEAR(r["request_goodput"].get<double>(), r["request_throughput"].get<double>(), 1e-9);
  EXPECT_GE(r["max_output_tokens_per_s"].get<double>(), 1);
  EXPECT_GE(r["max_concurrent_requests"].get<int>(), 1);
  ExpectSaneMetrics(r, {"ttft", "tpot", "itl", "e2el"});
  // A server that does not draft gets no speculative-decoding block.
  EXPECT_EQ(run.out.find("Speculative Decoding"), std::string::npos);
  EXPECT_FALSE(r.contains("spec_decode_acceptance_rate"));
}

// Against a server with n-gram speculation, the report adds vLLM's speculative-decoding block
// from the server's counters: a logit bias that makes every output one token repeated makes
// every draft stand.
TEST_F(BenchE2E, SpeculativeDecodingBlockFromTheServersCounters) {
  ServerProcess spec;
  ASSERT_TRUE(spec.Start(CPM_CPMSERVE_BIN, *model_,
                         {"--host", "127.0.0.1", "--port", "0", "--kv-cache-memory-bytes", "4M",
                          "--threads", "2", "--speculative-config",
                          R"({"method":"ngram","num_speculative_tokens":3,"prompt_lookup_min":1})"}));
  ASSERT_TRUE(spec.WaitReady()) << spec.Log();
  const std::string result = *tmp_ + "/spec.json";
  const ProcessRun run = Cpmserve({"bench", "serve", "--port", std::to_string(spec.port()),
                                   "--num-prompts", "2", "--random-input-len", "12",
                                   "--random-output-len", "24", "--extra-body",
                                   R"({"logit_bias": {"5": 100}})", "--save-result", "--result-filename", result},
                                  *tmp_);
  ASSERT_EQ(run.rc, 0) << run.out << run.err << spec.Log();
  for (const char* line : {"---------------Speculative Decoding---------------",
                           "Acceptance rate (%):                     100.00",
                           "Acceptance length:", "Drafts:", "Draft tokens:", "Accepted tokens:",
                           "Per-position acceptance (%):",
                           "  Position 0:                            100.00"}) {
    EXPECT_NE(run.out.find(line), std::string::npos) << line << "\n" << run.out;
  }
  const Json r = Json::parse(ReadFile(result), nullptr, false);
  ASSERT_TRUE(r.is_object());
  EXPECT_GT(r["spec_decode_num_drafts"].get<int>(), 0);
  EXPECT_EQ(r["spec_decode_accepted_tokens"], r["spec_decode_draft_tokens"]);
  EXPECT_GT(r["spec_decode_acceptance_length"].get<double>(), 2.0);
  // Every draft stood, but not every draft is 3 tokens long (the first after the prompt may
  // be shorter): position 0 accepted in every draft, the later ones in at most as many.
  const Json& per_pos = r["spec_decode_per_position_acceptance_rates"];
  ASSERT_EQ(per_pos.size(), 3u);
  EXPECT_DOUBLE_EQ(per_pos[0].get<double>(), 1.0);  // fractions in the file, as vLLM's
  EXPECT_LE(per_pos[2].get<double>(), per_pos[1].get<double>());
  EXPECT_EQ(spec.Stop(SIGTERM), 0);
}

// vLLM's sampling flags reach every request, and --extra-body's keys win over them: the
// server's request log (vLLM's SamplingParams form) shows what it received.
TEST_F(BenchE2E, SamplingFlagsReachTheServer) {
  ServerProcess logged;
  ASSERT_TRUE(logged.Start(CPM_CPMSERVE_BIN, *model_,
                           {"--host", "127.0.0.1", "--port", "0", "--kv-cache-memory-bytes", "4M",
                            "--threads", "2", "--enable-log-requests"}));
  ASSERT_TRUE(logged.WaitReady()) << logged.Log();
  const ProcessRun run = Cpmserve(
      {"bench", "serve", "--port", std::to_string(logged.port()), "--num-prompts", "2",
       "--random-input-len", "8", "--random-output-len", "3", "--temperature", "0.9", "--top-p",
       "0.5", "--top-k", "7", "--min-p", "0.25", "--frequency-penalty", "0.5",
       "--presence-penalty", "0.75", "--repetition-penalty", "1.5", "--extra-body",
       R"({"top_k": 3})"},
      *tmp_);
  ASSERT_EQ(run.rc, 0) << run.out << run.err << logged.Log();
  const std::string log = logged.Log();
  size_t requests = 0;
  for (size_t at = log.find("SamplingParams("); at != std::string::npos;
       at = log.find("SamplingParams(", at + 1)) {
    ++requests;
    const std::string line = log.substr(at, log.find('\n', at) - at);
    for (const char* field : {"presence_penalty=0.75", "frequency_penalty=0.5",
                              "repetition_penalty=1.5", "temperature=0.9", "top_p=0.5",
                              "top_k=3", "min_p=0.25"}) {
      EXPECT_NE(line.find(field), std::string::npos) << field << " in " << line;
    }
  }
  EXPECT_EQ(requests, 3u) << log;  // the initial test request (as vLLM's) and the two prompts
  EXPECT_EQ(logged.Stop(SIGTERM), 0);
}

TEST_F(BenchE2E, ChatWithPoissonArrivalsAndTheServersModelRoot) {
  const std::string result = *tmp_ + "/chat.json";
  const ProcessRun run = Cpmserve(
      ServeArgs({"--backend", "openai-chat", "--num-prompts", "4", "--request-rate", "20",
                 "--percentile-metrics", "ttft,tpot,itl,e2el",
                 "--metric-percentiles", "50,99", "--save-detailed", "--save-result", "--result-filename", result}),
      *tmp_);
  ASSERT_EQ(run.rc, 0) << run.out << run.err << server_->Log();
  EXPECT_NE(run.out.find("Request rate configured (RPS):           20.00"), std::string::npos)
      << run.out;
  const Json r = Json::parse(ReadFile(result), nullptr, false);
  ASSERT_TRUE(r.is_object());
  EXPECT_EQ(r["backend"], "openai-chat");  // --backend chose the chat endpoint
  // No --model: the server's first model, named by its id, known by its root (its directory,
  // where the tokenizer is), as vLLM's get_first_model_from_server.
  EXPECT_EQ(r["model_id"], *model_);
  EXPECT_EQ(r["tokenizer_id"], *model_);
  EXPECT_EQ(r["request_rate"], 20.0);
  EXPECT_EQ(r["completed"], 4);
  // The server's count from usage (the chat template's tokens too), as vLLM's client reads it.
  EXPECT_GT(r["total_input_tokens"].get<int>(), 4 * 12);
  EXPECT_EQ(r["total_output_tokens"], 4 * 5);
  ExpectSaneMetrics(r, {"ttft", "tpot", "itl", "e2el"});
}

// vLLM's other everyday flags: a shared random prefix, --input-len/--output-len, metadata in the
// result, warmups, headers, request ids, and the display-only flags accepted.
TEST_F(BenchE2E, VllmsOtherFlags) {
  const std::string result = *tmp_ + "/flags.json";
  const ProcessRun run = Cpmserve(
      {"bench", "serve", "--port", std::to_string(server_->port()), "--api-key", "sekret",
       "--backend", "vllm", "--dataset-name", "random", "--num-prompts", "3", "--random-prefix-len",
       "4", "--input-len", "8", "--output-len", "3", "--metadata", "run=nightly", "--num-warmups",
       "1", "--request-id-prefix", "bench-", "--header", "X-Extra=1", "--disable-tqdm",
       "--trust-remote-code", "--tokenizer-mode", "auto", "--save-result", "--result-filename",
       result},
      *tmp_);
  ASSERT_EQ(run.rc, 0) << run.out << run.err << server_->Log();
  const Json r = Json::parse(ReadFile(result), nullptr, false);
  ASSERT_TRUE(r.is_object()) << ReadFile(result);
  EXPECT_EQ(r["backend"], "vllm");
  EXPECT_EQ(r["total_input_tokens"], 3 * (4 + 8));
  EXPECT_EQ(r["total_output_tokens"], 3 * 3);
  EXPECT_EQ(r["run"], "nightly");
  EXPECT_NE(run.out.find("Warming up with 1 requests..."), std::string::npos) << run.out;
}

// An HTTPS server (`serve --ssl-certfile`): its self-signed certificate is refused unless
// --insecure, as vLLM's bench client refuses it.
TEST_F(BenchE2E, HttpsServerWithInsecure) {
  const e2e::CertFiles cert = e2e::WriteSelfSignedCert(*tmp_, "https", "bench-test");
  ASSERT_FALSE(cert.cert.empty());
  ServerProcess https;
  ASSERT_TRUE(https.Start(CPM_CPMSERVE_BIN, *model_,
                          {"--host", "127.0.0.1", "--port", "0", "--served-model-name", "tiny",
                           "--kv-cache-memory-bytes", "4M", "--threads", "2", "--ssl-certfile",
                           cert.cert, "--ssl-keyfile", cert.key}));
  ASSERT_TRUE(https.WaitReady()) << https.Log();
  const std::vector<std::string> args = {
      "bench", "serve", "--base-url", "https://127.0.0.1:" + std::to_string(https.port()),
      "--random-input-len", "8", "--random-output-len", "3", "--num-prompts", "2"};
  std::vector<std::string> insecure = args;
  insecure.push_back("--insecure");
  const ProcessRun run = Cpmserve(insecure, *tmp_);
  EXPECT_EQ(run.rc, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("Successful requests:"), std::string::npos) << run.out;
  const ProcessRun checked = Cpmserve(args, *tmp_);
  EXPECT_NE(checked.rc, 0) << checked.out;
  EXPECT_NE(checked.err.find("its certificate is not trusted; --insecure skips the check"),
            std::string::npos)
      << checked.err;
  EXPECT_EQ(https.Stop(SIGTERM), 0) << https.Log();
}

// Warmups send the first prompt, as vLLM's (its test request's): the timed prompts stay out of
// the prefix cache. 3 prompts of 40 tokens (2 full blocks each): the test request computes
// prompt 0, the 2 warmups and prompt 0's timed run hit its 32 tokens, prompts 1 and 2 hit
// nothing (warming with every prompt made all timed requests hits). --append-result alone
// writes the file, as vLLM's.
TEST_F(BenchE2E, WarmupsLeaveTheTimedPromptsUncached) {
  const double hits0 = e2e::Metric(e2e::Get(server_->port(), "/metrics").body, "vllm:prefix_cache_hits_total");
  const std::string result = *tmp_ + "/appended.json";
  const ProcessRun run = Cpmserve(
      {"bench", "serve", "--port", std::to_string(server_->port()), "--api-key", "sekret",
       "--num-prompts", "3", "--random-input-len", "40", "--random-output-len", "2",
       "--num-warmups", "2", "--append-result", "--result-filename", result},
      *tmp_);
  ASSERT_EQ(run.rc, 0) << run.out << run.err << server_->Log();
  const double hits = e2e::Metric(e2e::Get(server_->port(), "/metrics").body, "vllm:prefix_cache_hits_total");
  EXPECT_EQ(hits - hits0, 3 * 32) << run.out;
  EXPECT_TRUE(Json::parse(ReadFile(result), nullptr, false).is_object()) << ReadFile(result);
}

TEST_F(BenchE2E, ErrorsAreOneLineAndNonZero) {
  // Nothing listens on port 1.
  const ProcessRun down = Cpmserve({"bench", "serve", "--port", "1", "--num-prompts", "1"}, *tmp_);
  EXPECT_EQ(down.rc, 1);
  EXPECT_NE(down.err.find("bench serve: cannot reach the server at http://127.0.0.1:1"),
            std::string::npos)
      << down.err;
  EXPECT_EQ(std::count(down.err.begin(), down.err.end(), '\n'), 1) << down.err;

  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--random-range-ratio", "1.5"},
        std::vector<std::string>{"--percentile-metrics", "ttft,nope"},
        std::vector<std::string>{"--endpoint", "/v1/embeddings"},
        std::vector<std::string>{"--goodput", "ttft=5"},
        std::vector<std::string>{"--dataset-name", "sharegpt"},
        std::vector<std::string>{"--backend", "openai-chat", "--endpoint", "/v1/completions"},
        std::vector<std::string>{"--metadata", "novalue"}}) {
    const ProcessRun r = Cpmserve(ServeArgs(bad), *tmp_);
    EXPECT_EQ(r.rc, 2) << bad[0] << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const ProcessRun wrong_key =
      Cpmserve({"bench", "serve", "--port", std::to_string(server_->port()), "--api-key", "wrong",
                "--num-prompts", "1"},
               *tmp_);
  EXPECT_EQ(wrong_key.rc, 1);
  EXPECT_NE(wrong_key.err.find("HTTP 401"), std::string::npos) << wrong_key.err;
}

// Offline bench runs on tiny checkpoints in a temporary directory of their own.
class OfflineBenchE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp = (fs::temp_directory_path() /
           (std::string("cpm_bench_") +
            ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
            std::to_string(getpid())))
              .string();
    fs::create_directories(tmp);
  }
  void TearDown() override { fs::remove_all(tmp); }

  // A tiny checkpoint of `arch` at tmp/<name>; its directory.
  std::string Tiny(const std::string& arch, const std::string& name = "m") {
    const std::string dir = tmp + "/" + name;
    EXPECT_EQ(Cpmserve({"make-tiny", "--arch", arch, dir}, tmp).rc, 0) << arch;
    return dir;
  }
  ProcessRun Bench(std::vector<std::string> args) {
    args.insert(args.begin(), "bench");
    return Cpmserve(args, tmp);
  }

  std::string tmp;
};

// Offline bench on a tiny MiniCPM-V-4.6 checkpoint: figures present, finite, and the hybrid
// cost model equal to a hand count from config.json's text_config.
TEST_F(OfflineBenchE2E, TinyMiniCpmV46HybridCostModel) {
  const ProcessRun run = Bench({"--model", Tiny("minicpmv4_6"), "--pp", "8,70", "--tg", "4",
                                "--batch", "1,3", "--repeats", "1", "--image-side", "112",
                                "--json", tmp + "/b.json"});
  ASSERT_EQ(run.rc, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("Qwen3.5 hybrid"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("| tg4      |     3 |"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("| image112 |     1 |"), std::string::npos) << run.out;

  const Json cfg = Json::parse(ReadFile(tmp + "/m/config.json"))["text_config"];
  const int64_t D = cfg["hidden_size"], F = cfg["intermediate_size"],
                H = cfg["num_attention_heads"], hd = cfg["head_dim"],
                KV = cfg["num_key_value_heads"], Hk = cfg["linear_num_key_heads"],
                Hv = cfg["linear_num_value_heads"], dk = cfg["linear_key_head_dim"],
                dv = cfg["linear_value_head_dim"], K = cfg["linear_conv_kernel_dim"],
                V = cfg["vocab_size"];
  int64_t full = 0, linear = 0;
  for (const Json& t : cfg["layer_types"]) (t == "full_attention" ? full : linear) += 1;
  ASSERT_GT(full, 0);
  ASSERT_GT(linear, 0);
  const int64_t conv_dim = 2 * Hk * dk + Hv * dv;
  const int64_t attn_layer = 2 * H * hd * D + 2 * KV * hd * D + D * H * hd + 3 * D * F;
  const int64_t gdn_layer = conv_dim * D + Hv * dv * D + 2 * Hv * D + D * Hv * dv + 3 * D * F;
  const int64_t weight_bytes = 2 * (full * attn_layer + linear * gdn_layer + V * D);
  const int64_t state_bytes = 4 * linear * ((K - 1) * conv_dim + Hv * dk * dv);
  const int64_t state_flops = linear * (7 * Hv * dk * dv + 2 * conv_dim * K);

  const Json b = Json::parse(ReadFile(tmp + "/b.json"), nullptr, false);
  ASSERT_TRUE(b.is_object());
  const Json& m = b["model"];
  EXPECT_EQ(m["architecture"], "MiniCPMV4_6ForConditionalGeneration");
  EXPECT_EQ(m["full_attention_layers"], full);
  EXPECT_EQ(m["linear_attention_layers"], linear);
  EXPECT_EQ(m["weight_bytes_per_decode_step"], weight_bytes);
  EXPECT_EQ(m["state_bytes_per_sequence"], state_bytes);
  EXPECT_EQ(m["state_flops_per_token"], state_flops);
  EXPECT_EQ(m["attn_flops_per_pair"], 4 * H * hd * full);
  EXPECT_GT(b["machine"]["read_gb_per_s"].get<double>(), 0);
  EXPECT_GT(b["machine"]["f32_fma_gflop_per_s"].get<double>(), 0);
  // The share of the probes' and each test's CPU time a hypervisor took (0 on bare metal).
  const double probe_steal = b["machine"]["probe_steal_fraction"].get<double>();
  EXPECT_TRUE(probe_steal >= 0 && probe_steal <= 1) << probe_steal;
  // The matmul kernel's own in-L1 speed beside the peak (SIMD builds; AVX-512 is opt-in).
  if (b["machine"]["isa"] != "scalar") {
    EXPECT_GT(b["machine"]["matmul_l1_gflop_per_s"].get<double>(), 0);
  }
  // The peak is the one the matmul uses: AMX's tile products where it runs them (Intel),
  // vdpbf16ps's where it runs (AVX-512 BF16), else FMA's.
  const std::string peak_name = b["machine"]["prefill_peak"];
  ASSERT_TRUE(peak_name == "f32_fma" || peak_name == "bf16_dot" || peak_name == "amx_bf16")
      << peak_name;
  if (b["machine"]["isa"] != "avx512") {
    EXPECT_EQ(peak_name, "f32_fma");
  }
  if (peak_name == "amx_bf16") {
    EXPECT_GT(b["machine"]["amx_bf16_gflop_per_s"].get<double>(), 0);
  }

  // One 112×112 slice through the vision tower (8×8 patches, 4×4 after the ViT merger, 2×2
  // embeddings): 2 × params touched per token plus attention, stage by stage.
  const Json vc = Json::parse(ReadFile(tmp + "/m/config.json"))["vision_config"];
  const double VD = vc["hidden_size"], VI = vc["intermediate_size"], P = vc["patch_size"];
  const int64_t vlayers = vc["num_hidden_layers"];
  const int64_t before = Json::parse(ReadFile(tmp + "/m/config.json"))["insert_layer_id"].get<int64_t>() + 1;
  const double n = (112 / P) * (112 / P), n2 = n / 4, layer = 4 * VD * VD + 2 * VD * VI;
  const double image_flops = 2 * n * 3 * P * P * VD + before * (2 * n * layer + 4 * n * n * VD) +
                             2 * n * 4 * VD * VD + 16 * n * VD + 2 * n2 * (16 + 4) * VD * VI +
                             (vlayers - before) * (2 * n2 * layer + 4 * n2 * n2 * VD) +
                             2 * (n2 / 4) * (16 * VD * VD + 4 * VD * D);

  ASSERT_EQ(b["results"].size(), 5u);
  for (const Json& r : b["results"]) {
    const std::string name = r["test"];
    for (const char* key :
         {"tokens_per_s", "gflop_per_s", "bound_tokens_per_s", "fraction_of_bound"}) {
      const double v = r[key].get<double>();
      EXPECT_TRUE(std::isfinite(v) && v > 0) << name << " " << key << " = " << v;
    }
    EXPECT_TRUE(r["bound"] == "bandwidth" || r["bound"] == "compute") << r.dump();
    const double steal = r["steal_fraction"].get<double>();
    EXPECT_TRUE(steal >= 0 && steal <= 1) << name << " steal " << steal;
    EXPECT_NEAR(r["tokens_per_s"].get<double>(),
                r["tokens"].get<double>() / r["seconds"].get<double>(), 1e-6);
    // The bound is the slower of bytes ÷ bandwidth and FLOPs ÷ peak.
    const double bw = b["machine"]["read_gb_per_s"].get<double>() * 1e9;
    const double peak = b["machine"][peak_name + "_gflop_per_s"].get<double>() * 1e9;
    const double bound_s = std::max(r["bytes"].get<double>() / bw, r["flops"].get<double>() / peak);
    EXPECT_NEAR(r["fraction_of_bound"].get<double>(), bound_s / r["seconds"].get<double>(),
                1e-9 * (1 + bound_s / r["seconds"].get<double>()));
    const int64_t batch = r["batch"];
    if (name.rfind("tg", 0) == 0) {
      const int64_t steps = 4;
      // Each step also reads the K and V (bf16) of every cached token of the full-attention
      // layers, the new one included: 1 + 2 + 3 + 4 per sequence.
      const double kv_bytes = 2.0 * KV * hd * full * 2 * batch * steps * (steps + 1) / 2;
      EXPECT_DOUBLE_EQ(r["bytes"].get<double>(),
                       double(weight_bytes) * steps + 2.0 * state_bytes * batch * steps + kv_bytes);
      EXPECT_GT(r["state_gb_per_s"].get<double>(), 0);
      const double flops = 2.0 * (weight_bytes / 2) * batch * steps +
                           4.0 * H * hd * full * batch * steps * (steps + 1) / 2 +
                           double(state_flops) * batch * steps;
      EXPECT_DOUBLE_EQ(r["flops"].get<double>(), flops);
    } else {
      EXPECT_EQ(r["bytes"].get<double>(), 0.0);
      EXPECT_EQ(r["bound"], "compute");
    }
    if (name == "image112") {
      EXPECT_EQ(r["tokens"], 4);
      EXPECT_DOUBLE_EQ(r["flops"].get<double>(), image_flops);
    }
  }
}

// The MiniCPM4 path keeps its figures and JSON shape.
TEST_F(OfflineBenchE2E, TinyMiniCpm4Unchanged) {
  const ProcessRun run = Bench({"--model", Tiny("minicpm4"), "--pp", "8", "--tg", "3", "--batch",
                                "2", "--repeats", "1", "--skip-limits", "--json", tmp + "/b.json"});
  ASSERT_EQ(run.rc, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("M params/layer ×"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("hybrid"), std::string::npos) << run.out;
  const Json b = Json::parse(ReadFile(tmp + "/b.json"), nullptr, false);
  ASSERT_TRUE(b.is_object());
  std::vector<std::string> keys;
  for (auto it = b["model"].begin(); it != b["model"].end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"body_params", "dir", "head_params",
                                            "weight_bytes_per_decode_step"}));
  ASSERT_EQ(b["results"].size(), 2u);
  EXPECT_FALSE(b["results"][1].contains("state_gb_per_s"));
  // --skip-limits: no bound to name or compare with, in the table or the JSON.
  for (const Json& r : b["results"]) {
    EXPECT_TRUE(r["bound"].is_null() && r["fraction_of_bound"].is_null() &&
                r["bound_tokens_per_s"].is_null())
        << r.dump();
  }
  EXPECT_NE(run.out.find("| -         |        - |"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("bandwidth |"), std::string::npos) << run.out;
}

// --ubatch: a prompt longer than it prefills in several steps (the KV cache, and the hybrid's
// recurrent state, carried between them), and the JSON says the step size; 0 is refused.
TEST_F(OfflineBenchE2E, UbatchSplitsLongPrompts) {
  for (const char* arch : {"minicpm4", "minicpmv4_6"}) {
    const ProcessRun run =
        Bench({"--model", Tiny(arch, arch), "--pp", "40", "--ubatch", "16", "--tg", "2",
               "--batch", "1", "--repeats", "1", "--skip-limits", "--json", tmp + "/b.json"});
    ASSERT_EQ(run.rc, 0) << arch << run.out << run.err;
    EXPECT_NE(run.out.find("in steps of ≤ 16 prompt tokens"), std::string::npos) << run.out;
    const Json b = Json::parse(ReadFile(tmp + "/b.json"), nullptr, false);
    ASSERT_TRUE(b.is_object());
    EXPECT_EQ(b["ubatch"], 16);
    EXPECT_EQ(b["results"][0]["test"], "pp40");
  }
  const ProcessRun zero =
      Bench({"--model", tmp + "/minicpm4", "--ubatch", "0", "--skip-limits", "--tg", "2"});
  EXPECT_NE(zero.rc, 0);
  EXPECT_NE(zero.err.find("--ubatch"), std::string::npos) << zero.err;
}

// --pp 0 and --tg 0 leave out the prefill or the decode tests, as llama-bench's -p 0 and -n 0;
// negative lengths, batch 0 and 0 repeats are refused with the option's name.
TEST_F(OfflineBenchE2E, ZeroLengthsSkipTheirTests) {
  const std::string model = Tiny("minicpm4");
  const auto tests = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--model", model, "--repeats", "1", "--skip-limits", "--json",
                             tmp + "/b.json"});
    const ProcessRun run = Bench(args);
    EXPECT_EQ(run.rc, 0) << run.out << run.err;
    std::vector<std::string> names;
    const Json b = Json::parse(ReadFile(tmp + "/b.json"), nullptr, false);
    if (b.is_object()) {
      for (const Json& r : b["results"]) names.push_back(r["test"].get<std::string>() + "/" +
                                                         std::to_string(r["batch"].get<int>()));
    }
    return names;
  };
  EXPECT_EQ(tests({"--pp", "0", "--tg", "3", "--batch", "1,2"}),
            (std::vector<std::string>{"tg3/1", "tg3/2"}));
  EXPECT_EQ(tests({"--pp", "8,0", "--tg", "0", "--batch", "1"}),
            (std::vector<std::string>{"pp8/1"}));
  for (const auto& bad : std::vector<std::vector<std::string>>{
           {"--pp", "-1"}, {"--tg", "-2"}, {"--batch", "0"}, {"--repeats", "0"}}) {
    std::vector<std::string> args = bad;
    args.insert(args.end(), {"--model", model, "--skip-limits"});
    const ProcessRun run = Bench(args);
    EXPECT_NE(run.rc, 0) << bad[0];
    EXPECT_NE((run.out + run.err).find(bad[0]), std::string::npos) << run.out << run.err;
  }
}

// --depth: tests start with that many tokens in every sequence's KV cache (llama-bench's -d);
// decode counts reading every cached K and V, prefill and decode count attention over them.
TEST_F(OfflineBenchE2E, DepthCountsTheCachedKeys) {
  const ProcessRun run =
      Bench({"--model", Tiny("minicpm4"), "--depth", "20", "--pp", "8", "--tg", "3", "--batch",
             "2", "--repeats", "1", "--skip-limits", "--json", tmp + "/b.json"});
  ASSERT_EQ(run.rc, 0) << run.out << run.err;
  EXPECT_NE(run.out.find("| pp8@d20 "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("| tg3@d20 "), std::string::npos) << run.out;
  const Json b = Json::parse(ReadFile(tmp + "/b.json"), nullptr, false);
  ASSERT_TRUE(b.is_object());
  EXPECT_EQ(b["depth"], 20);
  // The tiny config: 2 layers, 2 KV heads × 16 dims, bf16 cache: K and V 256 B per token.
  // Decode, 2 sequences × 3 steps at positions 20, 21, 22: 2 × (21 + 22 + 23) cached tokens read.
  const Json& tg = b["results"][1];
  const double kv_bytes = tg["kv_gb_per_s"].get<double>() * tg["seconds"].get<double>() * 1e9;
  EXPECT_NEAR(kv_bytes, 256.0 * 2 * (21 + 22 + 23), 1.0);
  // Attention: 4 · heads · head_dim · layers FLOPs per (q, k) pair, 8 prompt rows over 20 + i keys.
  const Json& pp = b["results"][0];
  const double pp_flops = pp["gflop_per_s"].get<double>() * pp["seconds"].get<double>() * 1e9;
  const int64_t body = b["model"]["body_params"], head = b["model"]["head_params"];
  const double pairs = 8 * 20 + 8 * 9 / 2;
  EXPECT_NEAR(pp_flops, 2.0 * (body * 8 + head) + 4.0 * 4 * 16 * 2 * pairs, 1.0);
}

// --quantization q8_0: every linear weight and the tied head packed as Q8_0 (the load log says
// so) and the decode bytes are those blocks: 32 int8 + an fp16 scale per 32 inputs, rows
// padded to 16. An unknown scheme is refused before anything loads.
TEST_F(OfflineBenchE2E, Q8CountsTheBytesItStreams) {
  const ProcessRun run =
      Bench({"--model", Tiny("minicpm4"), "--pp", "8", "--tg", "3", "--batch", "1", "--repeats",
             "1", "--skip-limits", "-q", "q8_0", "--json", tmp + "/b.json"});
  ASSERT_EQ(run.rc, 0) << run.out << run.err;
  EXPECT_NE(run.err.find("15 of 15 linear weights as Q8_0"), std::string::npos) << run.err;
  EXPECT_NE(run.out.find("of Q8_0 weights"), std::string::npos) << run.out;
  const Json b = Json::parse(ReadFile(tmp + "/b.json"), nullptr, false);
  ASSERT_TRUE(b.is_object());
  EXPECT_EQ(b["model"]["quantization"], "q8_0");
  // The tiny config: hidden 64 (two blocks of 32), FFN 128, 2 layers, vocab 855 (54 panels).
  const int64_t body = b["model"]["body_params"];
  EXPECT_EQ(b["model"]["head_params"].get<int64_t>(), 855 * 64);
  EXPECT_EQ(b["model"]["weight_bytes_per_decode_step"].get<int64_t>(),
            body / 32 * 34 + 54 * 16 * 2 * 34);

  const ProcessRun hybrid = Bench({"--model", Tiny("minicpmv4_6", "v"), "-q", "q8_0", "--pp",
                                   "8", "--tg", "2", "--batch", "1", "--repeats", "1",
                                   "--image-side", "0", "--skip-limits"});
  ASSERT_EQ(hybrid.rc, 0) << hybrid.out << hybrid.err;
  EXPECT_NE(hybrid.out.find("of Q8_0 weights (Gated DeltaNet's a/b gates bf16)"),
            std::string::npos)
      << hybrid.out;

  const ProcessRun bad = Bench({"--model", Tiny("minicpm4", "b"), "-q", "int4"});
  EXPECT_EQ(bad.rc, 2);
  EXPECT_NE(bad.err.find("--quantization 'int4' is not supported"), std::string::npos) << bad.err;
}

// --ternary: BitCPM4-style dummy layers, packed as 2-bit codes (the load log says so), and the
// decode bytes are the codes, each output row's scale (2 bytes in the AVX2 layout, one mask per
// pair lane, 4, in the AVX-512 one) and the bf16 head, up to the codes' row limit (AVX2 6,
// AVX-512 32), and the bf16 panels above it. With the 2-bit kernels forced (CPM_TERNARY=1) the
// bench counts the codes' bytes, with them off (=0) the bf16 panels'.
TEST_F(OfflineBenchE2E, TernaryCountsTheBytesItStreams) {
  for (const char* forced : {"1", "0"}) {
    setenv("CPM_TERNARY", forced, 1);
    const ProcessRun run =
        Bench({"--model", Tiny("minicpm4"), "--pp", "8", "--tg", "3", "--batch", "1", "40",
               "--repeats", "1", "--skip-limits", "--ternary", "--json", tmp + "/b.json"});
    unsetenv("CPM_TERNARY");
    ASSERT_EQ(run.rc, 0) << run.out << run.err;
    const bool codes = std::string(forced) == "1";
    // The tiny config: hidden 64, 4 heads × 16, 2 KV heads, FFN 128, 2 layers.
    EXPECT_EQ(run.err.find("14 of 15 linear weights ternary (per-row scales: 14)") !=
                  std::string::npos,
              codes)
        << run.err;
    const Json b = Json::parse(ReadFile(tmp + "/b.json"), nullptr, false);
    ASSERT_TRUE(b.is_object());
    const int64_t body = b["model"]["body_params"], head = b["model"]["head_params"];
    const int64_t rows_per_layer = 64 + 2 * 32 + 64 + 2 * 128 + 64;  // q, k, v, o, gate, up, down
    EXPECT_EQ(body, 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128));
    EXPECT_EQ(b["model"]["ternary"], true);
    EXPECT_EQ(b["model"]["ternary_codes"], codes);
    const int64_t bf16_bytes = body * 2 + head * 2;
    if (!codes) {
      EXPECT_EQ(b["model"]["weight_bytes_per_decode_step"].get<int64_t>(), bf16_bytes);
      continue;
    }
    const int64_t max_rows = b["model"]["ternary_codes_max_rows"];
    ASSERT_TRUE(max_rows == 6 || max_rows == 32) << max_rows;
    const int64_t scale_bytes = max_rows == 32 ? 4 : 2;
    const int64_t codes_bytes = body / 4 + 2 * rows_per_layer * scale_bytes + head * 2;
    EXPECT_EQ(b["model"]["weight_bytes_per_decode_step"].get<int64_t>(), codes_bytes);
    EXPECT_EQ(b["model"]["weight_bytes_per_decode_step_above_max_rows"].get<int64_t>(),
              bf16_bytes);
    // Each decode test's weight bytes: 3 steps of its batch's (40 rows: above either limit).
    int decode_tests = 0;
    for (const Json& r : b["results"]) {
      if (r["test"] != "tg3") continue;
      ++decode_tests;
      const double weights = 3.0 * (r["batch"] == 1 ? codes_bytes : bf16_bytes);
      const double counted = r["weight_gb_per_s"].get<double>() * r["seconds"].get<double>() * 1e9;
      EXPECT_NEAR(counted, weights, weights * 1e-9) << r.dump();
    }
    EXPECT_EQ(decode_tests, 2);
  }
  // The hybrid model has no ternary release.
  const ProcessRun hybrid =
      Bench({"--model", Tiny("minicpmv4_6", "v"), "--ternary", "--skip-limits", "--tg", "2"});
  EXPECT_NE(hybrid.rc, 0);
  EXPECT_NE(hybrid.err.find("only MiniCPM4"), std::string::npos) << hybrid.err;
  // A vision slice must be a whole number of 4-patch units; refused before anything runs.
  const ProcessRun side = Bench({"--model", Tiny("minicpmv4_6", "v"), "--image-side", "100"});
  EXPECT_EQ(side.rc, 2);
  EXPECT_NE(side.err.find("--image-side 100 is not a multiple of 56"), std::string::npos) << side.err;
}

// --profile: each test's best run by forward section. The sections are disjoint parts of the
// run, so their times add up to at most the run's; each runs as often as the config says (the
// first layer's norm, then two residual adds a layer, each with the norm after it but the last;
// the hybrid's layers attention or Gated DeltaNet); and the
// matmul sections' FLOPs add up to the step's and their weight bytes to at least its weights
// (every linear weight once, as packed: MiniCPM4's only padding is its head's last panel).
TEST_F(OfflineBenchE2E, ProfileSectionsAddUpToTheStep) {
  for (const char* arch : {"minicpm4", "minicpmv4_6"}) {
    const std::string dir = Tiny(arch, arch);
    const Json config = Json::parse(ReadFile(dir + "/config.json"), nullptr, false);
    const bool hybrid = std::string(arch) == "minicpmv4_6";
    const double layers = (hybrid ? config["text_config"] : config)["num_hidden_layers"];
    const ProcessRun run =
        Bench({"--model", dir, "--pp", "8", "--tg", "3", "--batch", "2",
               "--repeats", "2", "--skip-limits", "--image-side", "0", "--profile", "--json",
               tmp + "/b.json"});
    ASSERT_EQ(run.rc, 0) << arch << run.out << run.err;
    EXPECT_NE(run.out.find("profile: tg3 at batch 2, best run"), std::string::npos) << run.out;
    const Json b = Json::parse(ReadFile(tmp + "/b.json"), nullptr, false);
    ASSERT_TRUE(b.is_object());
    for (const Json& r : b["results"]) {
      const double steps = r["test"] == "tg3" ? 3 : 1;
      const double step_ms = 1e3 * r["seconds"].get<double>() / steps;
      double sum_ms = 0, weight_bytes = 0, flops = 0;
      std::map<std::string, double> calls;
      for (const Json& s : r["profile"]) {
        sum_ms += s["ms_per_step"].get<double>();
        calls[s["section"]] = s["calls_per_step"].get<double>();
        if (!s["weight_gb_per_s"].is_null()) {
          weight_bytes += s["weight_gb_per_s"].get<double>() * s["ms_per_step"].get<double>() * 1e6;
          flops += s["gflop_per_s"].get<double>() * s["ms_per_step"].get<double>() * 1e6;
        }
      }
      EXPECT_LE(sum_ms, step_ms * (1 + 1e-9)) << arch << r.dump();
      EXPECT_EQ(calls["embedding, positions"], 1) << arch;
      EXPECT_EQ(calls["head (norm, lm_head)"], 1) << arch;
      EXPECT_EQ(calls["norms"], 1) << arch;
      EXPECT_EQ(calls["residual adds, norms"], 2 * layers) << arch;
      EXPECT_EQ(calls["MLP (gate/up, SiLU, down)"], layers) << arch;
      if (hybrid) {
        EXPECT_GT(calls["GDN in proj"], 0);
        EXPECT_GT(calls["attn q/k/v proj"], 0);
        EXPECT_EQ(calls["GDN in proj"] + calls["attn q/k/v proj"], layers);
        for (const char* name : {"GDN conv, gates, q/k l2norm", "GDN delta rule, gated norm",
                                 "GDN out proj"}) {
          EXPECT_EQ(calls[name], calls["GDN in proj"]) << name;
        }
        for (const char* name : {"attn q/k norms, RoPE, KV write", "attention", "attn o proj"}) {
          EXPECT_EQ(calls[name], calls["attn q/k/v proj"]) << name;
        }
      } else {
        for (const char* name : {"q/k/v proj", "RoPE, KV write", "attention", "o proj"}) {
          EXPECT_EQ(calls[name], layers) << name;
        }
      }
      // 2 FLOPs per weight and row: every row through the layers, the logit rows through the
      // head (a prompt's last).
      const double body = b["model"]["body_params"], head = b["model"]["head_params"];
      const double rows = r["test"] == "tg3" ? 2 : 8, logit_rows = r["test"] == "tg3" ? 2 : 1;
      EXPECT_NEAR(flops, 2 * (rows * body + logit_rows * head), 1e-9 * flops) << arch << r.dump();
      const double model_bytes = b["model"]["weight_bytes_per_decode_step"].get<double>();
      if (r["test"] == "tg3") {
        EXPECT_GE(weight_bytes, model_bytes * (1 - 1e-9)) << arch;
        // Packing pads MiniCPM4's head to whole panels (855 -> 864 rows at most).
        if (!hybrid) {
          EXPECT_LE(weight_bytes, model_bytes * 1.02) << arch;
        }
      }
    }
  }
}

}  // namespace
}  // namespace cpm
