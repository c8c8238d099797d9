// `cpmserve serve` as a process: start-up errors (port in use, bad model dir or config, bad
// flags), --api-key, generation-config defaults, preemption under a tiny KV budget, HTTPS, and
// the shutdown (SIGTERM with requests in flight, --shutdown-timeout, idle and stalled clients,
// a signal while loading).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <latch>
#include <mutex>
#include <regex>
#include <thread>

#include "e2e/e2e_util.h"
#include "e2e/server_process.h"
#include "e2e/tls_test_util.h"
#include "e2e/tiny_serving_model.h"
#include "tokenizer/tiny_tokenizer.h"

namespace cpm {
namespace {

using e2e::Json;

// A TCP connection to 127.0.0.1:`port` (-1 on failure), its receive buffer `rcvbuf` bytes if
// given (set before connecting, so that the window it advertises stays small).
int ConnectLoopback(int port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class ServerLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (std::filesystem::temp_directory_path() /
            ("cpm_e2e_life_" + std::to_string(getpid()))).string();
    ASSERT_TRUE(WriteTinyServingModel(dir_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // The tiny checkpoint's context (256) widened to 8192, for requests longer than a shutdown
  // takes to reach them (serve them with --max-model-len 8192).
  void WidenContext() {
    const std::string config_path = dir_ + "/config.json";
    Json config = Json::parse(std::ifstream(config_path));
    config["max_position_embeddings"] = 8192;
    std::ofstream(config_path) << config.dump(2);
  }
  std::vector<std::string> Args(std::vector<std::string> extra) {
    std::vector<std::string> a = {"--host", "127.0.0.1", "--port", "0", "--threads", "2",
                                  "--kv-cache-memory-bytes", "4M"};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  }
  std::string dir_;
};

TEST_F(ServerLifecycle, StartupErrorsExitNonZeroWithOneLine) {
  ServerProcess first;
  ASSERT_TRUE(first.Start(CPM_CPMSERVE_BIN, dir_, Args({})));
  ASSERT_TRUE(first.WaitReady()) << first.Log();
  {
    ServerProcess second;
    ASSERT_TRUE(second.Start(CPM_CPMSERVE_BIN, dir_,
                             {"--host", "127.0.0.1", "--port", std::to_string(first.port())}));
    EXPECT_EQ(second.Wait(30), 1);
    EXPECT_NE(second.Log().find("address already in use"), std::string::npos) << second.Log();
  }
  {
    // A host name that does not resolve is named as such (getaddrinfo's words), not "bind
    // failed".
    ServerProcess unresolved;
    ASSERT_TRUE(unresolved.Start(CPM_CPMSERVE_BIN, dir_,
                                 {"--host", "no-such-host.invalid", "--port", "0"}));
    EXPECT_EQ(unresolved.Wait(30), 1);
    EXPECT_NE(unresolved.Log().find("cannot listen on no-such-host.invalid:0: "), std::string::npos)
        << unresolved.Log();
    EXPECT_EQ(unresolved.Log().find("bind failed"), std::string::npos) << unresolved.Log();
  }
  {
    // A broken config.json is refused before the port opens, as vLLM reads the config first.
    const std::string broken = dir_ + "/broken";
    std::filesystem::create_directories(broken);
    for (const auto& f : std::filesystem::directory_iterator(dir_)) {
      if (f.is_regular_file()) std::filesystem::copy_file(f.path(), broken / f.path().filename());
    }
    Json config = Json::parse(std::ifstream(broken + "/config.json"));
    config["num_hidden_layers"] = "many";
    std::ofstream(broken + "/config.json") << config.dump(2);
    ServerProcess p;
    ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, broken, Args({})));
    EXPECT_EQ(p.Wait(30), 1);
    EXPECT_NE(p.Log().find("config.json: field 'num_hidden_layers'"), std::string::npos) << p.Log();
    EXPECT_EQ(p.Log().find("listening on"), std::string::npos) << p.Log();
  }
  {
    ServerProcess bad_dir;
    ASSERT_TRUE(bad_dir.Start(CPM_CPMSERVE_BIN, dir_ + "/missing", Args({})));
    EXPECT_NE(bad_dir.Wait(30), 0);
    EXPECT_NE(bad_dir.Log().find(dir_ + "/missing"), std::string::npos) << bad_dir.Log();
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--max-model-len", "abc"}, "--max-model-len"},
      {{"--tensor-parallel-size", "2"}, "--tensor-parallel-size"},
      {{"--gpu-memory-utilization", "2"}, "--gpu-memory-utilization"},
      {{"--port", "notaport"}, "--port"},
      {{"--max-model-len", "100000"}, "User-specified max_model_len (100000)"},
      {{"--max-model-len", "100000"},
       "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with "
       "extreme caution."},
      {{"--speculative-config", R"({"method":"eagle","num_speculative_tokens":2})"},
       "--speculative-config: method 'eagle' is not supported"},
      {{"--kv-cache-dtype", "fp8"}, "--kv-cache-dtype: 'fp8' is not supported"},
      // argparse's choices, as vLLM's Literal flags (exit 2).
      {{"--scheduling-policy", "lifo"},
       "argument --scheduling-policy: invalid choice: 'lifo' (choose from 'fcfs', 'priority')"},
      {{"--dtype", "int8"}, "argument --dtype: invalid choice: 'int8' (choose from 'auto'"},
      {{"--kv-cache-dtype", "int4"}, "argument --kv-cache-dtype: invalid choice: 'int4'"},
      {{"--mm-processor-cache-type", "disk"},
       "argument --mm-processor-cache-type: invalid choice: 'disk' (choose from 'lru', 'shm')"},
      {{"--mm-processor-cache-gb", "-1"}, "--mm-processor-cache-gb must be at least 0"},
      {{"--override-generation-config", R"({"top_k": 0.5})"},
       "--override-generation-config: 'top_k' is not an integer"},
      {{"--max-logprobs", "-2"}, "--max-logprobs"},
      {{"--no-enable-chunked-prefill", "--max-num-batched-tokens", "64", "--max-model-len", "128"},
       "max_num_batched_tokens (64) is smaller than max_model_len (128)"},
      // A malformed whole value beside dotted keys is reported, not dropped.
      {{"--limit-mm-per-prompt", "{bad", "--limit-mm-per-prompt.image", "2"},
       "--limit-mm-per-prompt: not a JSON object: {bad"},
      {{"--max-num-batched-tokens", "64", "--max-num-seqs", "65"},
       "max_num_batched_tokens (64) must be greater than or equal to max_num_seqs (65)."}};
  for (const auto& [bad, needle] : cases) {
    ServerProcess p;
    ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args(bad)));
    EXPECT_NE(p.Wait(30), 0) << needle;
    EXPECT_NE(p.Log().find(needle), std::string::npos) << p.Log();
  }
  // The model's load choices are refused before the port opens, as vLLM's argument parser does.
  const std::vector<std::pair<std::vector<std::string>, std::string>> load_choices = {
      {{"--load-format", "gguf"}, "--load-format: 'gguf' is not supported"},
      {{"--dtype", "float8"}, "argument --dtype: invalid choice: 'float8'"},
      {{"--quantization", "int4"}, "--quantization: 'int4' is not supported (none, q8_0)"}};
  for (const auto& [bad, needle] : load_choices) {
    ServerProcess p;
    ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args(bad)));
    EXPECT_NE(p.Wait(30), 0) << needle;
    EXPECT_NE(p.Log().find(needle), std::string::npos) << p.Log();
    EXPECT_EQ(p.Log().find("listening on"), std::string::npos) << p.Log();
  }
  EXPECT_EQ(first.Stop(SIGINT), 0) << first.Log();
}

// vLLM's flags that cpmserve cannot honour: refused before the port opens, each with a line that
// says why (exit 2, as vLLM's argparse; --tensor-parallel-size keeps its start-up error's 1),
// never a bare parser message.
TEST_F(ServerLifecycle, UnsupportedVllmFlagsSayWhy) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"-tp", "2"}, "--tensor-parallel-size: 2 is not supported: cpmserve runs one CPU process"},
      {{"-tp=2"}, "--tensor-parallel-size: 2 is not supported"},
      {{"-pp", "2"}, "--pipeline-parallel-size: 2 is not supported: cpmserve runs one CPU process"},
      {{"--pipeline-parallel-size=3"}, "--pipeline-parallel-size: 3 is not supported"},
      {{"--tokenizer-mode", "mistral"}, "--tokenizer-mode: 'mistral' is not supported"},
      {{"--tokenizer-mode", "fast"}, "--tokenizer-mode: 'fast' is not a tokenizer mode"},
      {{"--chat-template-content-format", "json"},
       "argument --chat-template-content-format: invalid choice: 'json'"},
      {{"--num-gpu-blocks-override", "64"},
       "--num-gpu-blocks-override is not supported: size the KV cache with --kv-cache-memory-bytes"},
      {{"--uds", "/tmp/cpm.sock"},
       "--uds: Unix domain sockets are not supported; use --host/--port"},
      {{"--model", "/elsewhere"}, "the model is given twice"},
      {{"-dp", "2"}, "--data-parallel-size: 2 is not supported: cpmserve runs one engine"},
      {{"--uvicorn-log-level", "loud"},
       "argument --uvicorn-log-level: invalid choice: 'loud' (choose from 'critical',"},
      // A value of the wrong type: argparse's status, the flag named.
      {{"--swap-space", "abc"},
       "cpmserve serve: error: argument --swap-space: invalid float value: 'abc'"},
      {{"--max-num-seqs", "1.5"},
       "cpmserve serve: error: argument --max-num-seqs: invalid int value: '1.5'"},
      {{"--long-prefill-token-threshold", "x"},
       "argument --long-prefill-token-threshold: invalid int value: 'x'"},
      {{"--max-num-seqs="}, "cpmserve serve: error: argument --max-num-seqs: expected one argument"},
      // argparse's message and status for a flag nobody defines.
      {{"--no-such-flag", "1"}, "cpmserve serve: error: unrecognized arguments: --no-such-flag 1"},
      {{"-xy"}, "unrecognized arguments: -xy"},
      // What would change what a request gets: refused, saying why.
      {{"--runner", "pooling"}, "--runner: 'pooling' is not supported: cpmserve serves generative"},
      {{"--runner", "x"}, "argument --runner: invalid choice: 'x'"},
      {{"--task", "embed"}, "--task: 'embed' is not supported"},
      {{"--task", "x"}, "argument --task: invalid choice: 'x' (choose from 'auto', 'generate',"},
      {{"--enable-mm-embeds"}, "--enable-mm-embeds is not supported"},
      {{"--enable-prompt-embeds"}, "--enable-prompt-embeds is not supported"},
      {{"--reasoning-config", R"({"reasoning_end":"x"})"},
       "--reasoning-config: unknown field 'reasoning_end'"},
      {{"--reasoning-config", R"({"reasoning_parser":"nope"})"},
       "--reasoning-config: invalid reasoning parser: nope"}};
  for (const auto& [bad, needle] : cases) {
    ServerProcess p;
    ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args(bad)));
    const int code = p.Wait(30);
    EXPECT_NE(code, 0) << needle;
    // The parallel sizes and the config JSON share ValidateServeConfig's start-up error
    // (status 1).
    if (needle.find("--tensor-parallel-size") == std::string::npos &&
        needle.find("--reasoning-config") == std::string::npos) {
      EXPECT_EQ(code, 2) << needle << "\n" << p.Log();
    }
    EXPECT_NE(p.Log().find(needle), std::string::npos) << p.Log();
    EXPECT_EQ(p.Log().find("listening on"), std::string::npos) << p.Log();
    EXPECT_EQ(p.Log().find("were not expected"), std::string::npos) << p.Log();
  }
}

// A Hugging Face repository id, as `vllm serve org/name` takes it: found in the hub cache
// (HF_HUB_OFFLINE here: no network in tests; hub_test covers the download), served under the
// id as given, and a revision the cache does not hold refused with where it looked.
TEST_F(ServerLifecycle, AHubRepositoryIdServesFromTheHubCache) {
  namespace fs = std::filesystem;
  const fs::path cache = dir_ + "_hub";
  const std::string commit = "89abcdef0123456789abcdef0123456789abcdef";
  const fs::path repo = cache / "models--org--tiny-model";
  fs::create_directories(repo / "refs");
  fs::create_directories(repo / "snapshots");
  fs::copy(dir_, repo / "snapshots" / commit, fs::copy_options::recursive);
  std::ofstream(repo / "refs" / "main") << commit;
  // VLLM_USE_MODELSCOPE=1 is off in vLLM (only "true" turns it on): no ModelScope warning.
  const std::vector<std::string> env = {"HF_HUB_CACHE=" + cache.string(), "HF_HUB_OFFLINE=1",
                                        "VLLM_USE_MODELSCOPE=1"};
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, "org/tiny-model", Args({}), env));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  const Json models = e2e::Get(p.port(), "/v1/models").json();
  ASSERT_EQ(models["data"].size(), 1u) << models.dump();
  EXPECT_EQ(models["data"][0]["id"], "org/tiny-model");
  EXPECT_EQ(models["data"][0]["root"], "org/tiny-model");
  EXPECT_NE(p.Log().find((repo / "snapshots" / commit).string()), std::string::npos) << p.Log();
  EXPECT_EQ(p.Log().find("VLLM_USE_MODELSCOPE"), std::string::npos) << p.Log();
  EXPECT_EQ(p.Stop(SIGTERM), 0);

  // A missing folder fails before the port opens (no "listening on" line).
  ServerProcess missing;
  ASSERT_TRUE(missing.Start(CPM_CPMSERVE_BIN, dir_ + "/nope", Args({})));
  EXPECT_EQ(missing.Wait(30), 1);
  EXPECT_EQ(missing.Log().find("listening on"), std::string::npos) << missing.Log();

  // SIGTERM while the hub is slow to answer (a download in progress) ends the process at once.
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  httplib::Server slow_hub;
  slow_hub.Get(R"(/api/.*)", [&](const httplib::Request&, httplib::Response& res) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(60), [&] { return release; });
    res.status = 503;
  });
  const int hub_port = slow_hub.bind_to_any_port("127.0.0.1");
  std::thread hub_thread([&] { slow_hub.listen_after_bind(); });
  ServerProcess downloading;
  ASSERT_TRUE(downloading.Start(CPM_CPMSERVE_BIN, "org/slow-model", Args({}),
                                {"HF_ENDPOINT=http://127.0.0.1:" + std::to_string(hub_port),
                                 "HF_HUB_CACHE=" + cache.string(), "no_proxy=*"}));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto sent = std::chrono::steady_clock::now();
  EXPECT_EQ(downloading.Stop(SIGTERM, 10), 1);
  EXPECT_LT(std::chrono::steady_clock::now() - sent, std::chrono::seconds(5));
  EXPECT_NE(downloading.Log().find("received SIGTERM while resolving the model"), std::string::npos)
      << downloading.Log();
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  slow_hub.stop();
  hub_thread.join();

  ServerProcess other_revision;
  ASSERT_TRUE(other_revision.Start(CPM_CPMSERVE_BIN, "org/tiny-model",
                                   Args({"--revision", "v2", "--download-dir", cache.string()}),
                                   {"HF_HUB_OFFLINE=1", "VLLM_USE_MODELSCOPE=True"}));
  EXPECT_EQ(other_revision.Wait(30), 1);
  EXPECT_NE(other_revision.Log().find("VLLM_USE_MODELSCOPE is set"), std::string::npos)
      << other_revision.Log();
  EXPECT_NE(other_revision.Log().find("(revision v2) is not in the Hugging Face cache " +
                                      cache.string()),
            std::string::npos)
      << other_revision.Log();
  fs::remove_all(cache);
}

// vLLM's --hf-overrides, as JSON and dotted: merged over config.json for every reader (here the
// derived max_model_len); a value that is no JSON object is a start-up error.
TEST_F(ServerLifecycle, HfOverridesReachTheConfig) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--hf-overrides", R"({"max_position_embeddings": 100})"},
        std::vector<std::string>{"--hf-overrides.max_position_embeddings", "90"}}) {
    ServerProcess p;
    ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args(flags)));
    ASSERT_TRUE(p.WaitReady()) << p.Log();
    const Json models = e2e::Get(p.port(), "/v1/models").json();
    EXPECT_EQ(models["data"][0]["max_model_len"], flags.size() == 2 && flags[1][0] == '{' ? 100 : 90)
        << models.dump();
    EXPECT_NE(p.Log().find("Overriding HF config with"), std::string::npos);
    EXPECT_EQ(p.Stop(SIGTERM), 0);
  }
  ServerProcess bad;
  ASSERT_TRUE(bad.Start(CPM_CPMSERVE_BIN, dir_, Args({"--hf-overrides", "[1]"})));
  EXPECT_EQ(bad.Wait(30), 1);
  EXPECT_NE(bad.Log().find("--hf-overrides: not a JSON object"), std::string::npos) << bad.Log();
}

// vLLM's spellings that mean what they mean there: -tp 1 / -pp 1, underscores, --model instead
// of the positional, and the flags that are harmless to ignore on a CPU (a log line each).
TEST_F(ServerLifecycle, VllmAliasesAndIgnoredFlagsServe) {
  ServerProcess p;
  // ServerProcess puts its model argument first: "--model" there, the folder in the args.
  std::vector<std::string> args = {dir_};
  for (const std::string& a :
       Args({"-tp", "1", "-pp=1", "-dp", "1", "--uvicorn-log-level", "warning",
             "--tensor_parallel_size", "1", "--pipeline-parallel-size", "1",
             "--swap-space", "4", "--disable-frontend-multiprocessing", "--tokenizer-mode", "auto",
             "--chat-template-content-format", "auto", "--max_num_seqs=4",
             // GPU, hub and frontend flags vLLM's CPU platform takes and drops.
             "--code-revision", "main", "-O3", "--enable-sleep-mode", "--distributed-executor-backend",
             "mp", "--root-path", "/api", "--enable-tokenizer-info-endpoint",
             "--runner", "generate", "--task", "generate", "--reasoning-config",
             R"({"reasoning_start_str":"<think>","reasoning_end_str":"</think>"})",
             "--show-hidden-metrics-for-version", "0.10", "--enable-offline-docs",
             // argparse's --no- forms, human-readable counts, and a repeated flag's last value.
             "--no-enforce-eager", "--no-trust-remote-code", "--no-enable-log-requests",
             "--max-num-batched-tokens", "1k", "--max-num-seqs", "3",
             // vLLM's dotted keys of a JSON flag (underscores kept in the key).
             "--override_generation_config.max_new_tokens", "3", "--limit-mm-per-prompt.image",
             "2", "--dtype", "half", "--enable-force-include-usage", "--allowed-media-domains",
             "example.com", "upload.example"})) {
    args.push_back(a);
  }
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, "--model", args));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  const std::string log = p.Log();
  EXPECT_NE(log.find("--swap-space: accepted, ignored"), std::string::npos) << log;
  EXPECT_NE(log.find("--disable-frontend-multiprocessing: accepted"), std::string::npos) << log;
  for (const char* flag : {"--code-revision", "--compilation-config", "--enable-sleep-mode",
                           "--distributed-executor-backend"}) {
    EXPECT_NE(log.find(std::string(flag) + ": accepted, ignored ("), std::string::npos) << flag;
  }
  EXPECT_NE(log.find("The 'task' option has been deprecated"), std::string::npos) << log;
  EXPECT_NE(log.find("max_num_batched_tokens=1000"), std::string::npos) << log;
  EXPECT_NE(log.find("'max_tokens': 3}"), std::string::npos) << log;
  EXPECT_NE(log.find("--dtype float16: cpmserve computes in bfloat16 or float32"), std::string::npos)
      << log;
  EXPECT_NE(log.find("Maximum concurrency"), std::string::npos) << log;
  const e2e::Reply r = e2e::Post(p.port(), "/v1/completions", R"({"prompt":"a","max_tokens":1})");
  EXPECT_EQ(r.status, 200) << r.body;
  // --enable-tokenizer-info-endpoint: vLLM's TokenizerInfo (tokenizer_config.json's kwargs,
  // added tokens as their content, the fast class); off by default (404).
  const Json info = e2e::Get(p.port(), "/tokenizer_info").json();
  EXPECT_EQ(info["tokenizer_class"].get<std::string>().substr(info["tokenizer_class"].get<std::string>().size() - 4), "Fast")
      << info.dump();
  ASSERT_TRUE(info.contains("added_tokens_decoder")) << info.dump();
  for (const auto& [id, token] : info["added_tokens_decoder"].items()) EXPECT_TRUE(token.is_string()) << id;
  EXPECT_FALSE(info.contains("vocab_file"));
  // FastAPI's documentation routes: the OpenAPI document lists the routes, the two pages read it.
  const Json openapi = e2e::Get(p.port(), "/openapi.json").json();
  EXPECT_EQ(openapi["info"]["title"], "FastAPI");
  EXPECT_TRUE(openapi["paths"]["/v1/chat/completions"].contains("post")) << openapi.dump();
  EXPECT_TRUE(openapi["paths"]["/v1/models/{model_id}"].contains("get")) << openapi.dump();
  EXPECT_TRUE(openapi["paths"].contains("/tokenizer_info")) << openapi.dump();
  EXPECT_EQ(e2e::Post(p.port(), "/tokenizer_info", "{}").status, 405);
  for (const char* page : {"/docs", "/redoc"}) {
    const e2e::Reply html = e2e::Get(p.port(), page);
    EXPECT_EQ(html.status, 200) << page;
    EXPECT_NE(html.body.find("/openapi.json"), std::string::npos) << page;
  }
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.Log();
  ServerProcess plain;
  ASSERT_TRUE(plain.Start(CPM_CPMSERVE_BIN, dir_, Args({"--disable-fastapi-docs"})));
  ASSERT_TRUE(plain.WaitReady()) << plain.Log();
  // A route vLLM did not register is a 404 for every method (not a 405), and is not logged.
  for (const char* path : {"/tokenizer_info", "/openapi.json", "/docs", "/redoc"}) {
    EXPECT_EQ(e2e::Get(plain.port(), path).status, 404) << path;
    EXPECT_EQ(e2e::Post(plain.port(), path, "{}").status, 404) << path;
  }
  EXPECT_EQ(plain.Stop(SIGTERM), 0);
  EXPECT_NE(plain.Log().find("Route: /v1/completions, Methods: POST"), std::string::npos);
  EXPECT_NE(plain.Log().find("Route: /v1/responses/{response_id}/cancel, Methods: POST"),
            std::string::npos);
  EXPECT_EQ(plain.Log().find("Route: /tokenizer_info"), std::string::npos) << plain.Log();
  EXPECT_EQ(plain.Log().find("Route: /docs"), std::string::npos) << plain.Log();
}

// --max-num-seqs above the default step budget (256) starts, the budget growing to it (vLLM's
// CPU default, 2048, holds it; refusing it was ours); --long-prefill-token-threshold is taken.
TEST_F(ServerLifecycle, DefaultBudgetGrowsToMaxNumSeqs) {
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_,
                      Args({"--max-num-seqs", "300", "--long-prefill-token-threshold", "8"})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  EXPECT_NE(p.Log().find("max_num_batched_tokens=300"), std::string::npos) << p.Log();
  const e2e::Reply r = e2e::Post(p.port(), "/v1/completions",
                                 R"({"prompt":"a b c d e f g h i j k l","max_tokens":2})");
  EXPECT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.Log();
}

// vLLM's --config FILE.yaml: each key a flag (lists spread, mappings as JSON, false as --no-),
// the command line's own flags winning over the file's.
TEST_F(ServerLifecycle, ConfigFileFlags) {
  const std::string yaml = dir_ + "/serve.yaml";
  {
    std::ofstream out(yaml);
    out << "max_model_len: 100\n"
           "served-model-name:\n  - from-yaml\n  - alias\n"
           "enable-prefix-caching: false\n"
           "override-generation-config: {max_new_tokens: 3}\n"
           "disable-log-requests: false\n"  // --no-disable-log-requests, as vLLM 0.10-0.11
           "port: 1\n";
  }
  ServerProcess p;
  // Args' port wins; --max-model is argparse's abbreviation of --max-model-len.
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({"--config", yaml, "--max-model", "90"})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  const Json models = e2e::Get(p.port(), "/v1/models").json();
  ASSERT_EQ(models["data"].size(), 2u) << models.dump();
  EXPECT_EQ(models["data"][0]["id"], "from-yaml");
  EXPECT_EQ(models["data"][1]["id"], "alias");
  EXPECT_EQ(models["data"][0]["max_model_len"], 90);
  EXPECT_NE(p.Log().find("'max_tokens': 3}"), std::string::npos) << p.Log();
  EXPECT_EQ(p.Stop(SIGTERM), 0);
  // A list flag given again (after the file's, or twice on the command line) keeps only its
  // last occurrence's values, as argparse's nargs="+".
  ServerProcess again;
  ASSERT_TRUE(again.Start(CPM_CPMSERVE_BIN, dir_,
                          Args({"--config", yaml, "--served_model_name", "x", "y",
                                "--served-model-name=cli", "--api-key", "k1", "k2",
                                "--api-key", "k3"})));
  ASSERT_TRUE(again.WaitReady()) << again.Log();
  const e2e::Reply listed = e2e::Get(again.port(), "/v1/models", {{"Authorization", "Bearer k3"}});
  ASSERT_EQ(listed.status, 200) << listed.body;
  const Json names = listed.json()["data"];
  ASSERT_EQ(names.size(), 1u) << names.dump();
  EXPECT_EQ(names[0]["id"], "cli");
  EXPECT_EQ(e2e::Get(again.port(), "/v1/models", {{"Authorization", "Bearer k1"}}).status, 401);
  EXPECT_EQ(again.Stop(SIGTERM), 0);
  for (const std::string& bad : {dir_ + "/missing.yaml", dir_ + "/serve.json"}) {
    ServerProcess q;
    ASSERT_TRUE(q.Start(CPM_CPMSERVE_BIN, dir_, Args({"--config", bad})));
    EXPECT_EQ(q.Wait(30), 2) << q.Log();
    EXPECT_NE(q.Log().find("--config: " + bad + ": "), std::string::npos) << q.Log();
  }
}

// --quantization q8_0 (vLLM's -q): the weights load as Q8_0 and the server answers as usual.
TEST_F(ServerLifecycle, QuantizedWeightsServe) {
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({"-q", "q8_0"})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  const auto r = e2e::Post(p.port(), "/v1/chat/completions",
                           R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":4,)"
                           R"("temperature":0})");
  EXPECT_EQ(r.status, 200) << r.body;
  const Json j = Json::parse(r.body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.body;
  EXPECT_EQ(j["usage"]["completion_tokens"], 4) << r.body;
  EXPECT_EQ(p.Stop(SIGTERM), 0);
  EXPECT_NE(p.Log().find("linear weights as Q8_0"), std::string::npos) << p.Log();
}

TEST_F(ServerLifecycle, ApiKeyProtectsV1Only) {
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({}), {"VLLM_API_KEY=sekret"}));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  EXPECT_EQ(e2e::Get(p.port(), "/v1/models").status, 401);
  EXPECT_EQ(e2e::Get(p.port(), "/v1/models", {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(e2e::Get(p.port(), "/v1/models", {{"Authorization", "Bearer sekret"}}).status, 200);
  EXPECT_EQ(e2e::Post(p.port(), "/v1/completions", R"({"prompt":"a","max_tokens":1})").status, 401);
  EXPECT_EQ(e2e::Get(p.port(), "/health").status, 200);
  EXPECT_EQ(e2e::Get(p.port(), "/metrics").status, 200);
  EXPECT_EQ(e2e::Post(p.port(), "/tokenize", R"({"prompt":"a"})").status, 200);
  // A browser's preflight carries no key: answered before authentication, as vLLM's is.
  httplib::Client cli("127.0.0.1", p.port());
  auto pre = cli.Options("/v1/models", {{"Origin", "http://ui.example"},
                                        {"Access-Control-Request-Method", "GET"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 200);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(pre->get_header_value_count("Access-Control-Allow-Origin"), 1u);
  // A 401 to a cross-origin request carries the header once too.
  auto denied = cli.Get("/v1/models", {{"Origin", "http://ui.example"}});
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(denied->get_header_value_count("Access-Control-Allow-Origin"), 1u);
  EXPECT_EQ(p.Stop(SIGTERM), 0);
  // uvicorn's access log, on by default as in vLLM.
  EXPECT_NE(p.Log().find(" - \"GET /v1/models HTTP/1.1\" 401 Unauthorized"), std::string::npos)
      << p.Log();
  EXPECT_NE(p.Log().find(" - \"POST /tokenize HTTP/1.1\" 200 OK"), std::string::npos);

  // vLLM's optional_type: --api-key "" (a deployment script's unset variable) or None is no
  // key, and $VLLM_API_KEY is then not read either; any OPTIONS request passes to the router
  // (its 405). uvicorn at warning logs no access lines.
  for (const char* none : {"", "None"}) {
    ServerProcess open;
    ASSERT_TRUE(open.Start(CPM_CPMSERVE_BIN, dir_,
                           Args({"--api-key", none, "--uvicorn-log-level", "warning"}),
                           {"VLLM_API_KEY=sekret"}));
    ASSERT_TRUE(open.WaitReady()) << open.Log();
    EXPECT_EQ(e2e::Get(open.port(), "/v1/models").status, 200) << none;
    EXPECT_EQ(open.Stop(SIGTERM), 0);
    EXPECT_EQ(open.Log().find("GET /v1/models HTTP/1.1"), std::string::npos) << open.Log();
  }
  ServerProcess keyed;
  ASSERT_TRUE(keyed.Start(CPM_CPMSERVE_BIN, dir_, Args({"--api-key", "k"})));
  ASSERT_TRUE(keyed.WaitReady()) << keyed.Log();
  httplib::Client keyed_cli("127.0.0.1", keyed.port());
  auto options = keyed_cli.Options("/v1/models");
  ASSERT_TRUE(options);
  EXPECT_EQ(options->status, 405);
  EXPECT_EQ(keyed.Stop(SIGTERM), 0);
}

// --chat-template-content-format forces a format over the detected one (with vLLM's warning):
// openai gives MiniCPM4's template, which concatenates content as a string, a list it cannot
// add to a string: the template's 400. auto logs the detected format.
TEST_F(ServerLifecycle, ChatTemplateContentFormatReachesTheTemplate) {
  const std::string chat = R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":1})";
  ServerProcess forced;
  ASSERT_TRUE(forced.Start(CPM_CPMSERVE_BIN, dir_,
                           Args({"--chat-template-content-format", "openai"})));
  ASSERT_TRUE(forced.WaitReady()) << forced.Log();
  const e2e::Reply r = e2e::Post(forced.port(), "/v1/chat/completions", chat);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("can only concatenate str"), std::string::npos) << r.body;
  EXPECT_EQ(forced.Stop(SIGTERM), 0);
  EXPECT_NE(forced.Log().find("You specified `--chat-template-content-format openai` which is "
                              "different from the detected format 'string'."),
            std::string::npos)
      << forced.Log();
  ServerProcess detected;
  ASSERT_TRUE(detected.Start(CPM_CPMSERVE_BIN, dir_, Args({})));
  ASSERT_TRUE(detected.WaitReady()) << detected.Log();
  EXPECT_EQ(e2e::Post(detected.port(), "/v1/chat/completions", chat).status, 200);
  EXPECT_EQ(detected.Stop(SIGTERM), 0);
  EXPECT_NE(detected.Log().find("Detected the chat template content format to be 'string'."),
            std::string::npos)
      << detected.Log();
}

// vLLM's --root-path (FastAPI's root_path, for a proxy that forwards /llm/v1/... unchanged):
// the prefixed paths are routed, authorized and redirected as the bare ones, which still serve.
TEST_F(ServerLifecycle, RootPathServesUnderTheProxysPrefix) {
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({"--root-path", "/llm", "--api-key", "k"})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  const httplib::Headers key = {{"Authorization", "Bearer k"}};
  const e2e::Reply chat = e2e::Post(
      p.port(), "/llm/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})", key);
  EXPECT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json()["choices"].size(), 1u) << chat.body;
  EXPECT_EQ(e2e::Get(p.port(), "/llm/v1/models", {{"Authorization", "Bearer no"}}).status, 401);
  EXPECT_EQ(e2e::Get(p.port(), "/llm/v1/models").status, 401);
  EXPECT_EQ(e2e::Get(p.port(), "/v1/models", key).status, 200);
  EXPECT_EQ(e2e::Get(p.port(), "/llm/health").status, 200);
  EXPECT_EQ(e2e::Get(p.port(), "/llmx/v1/models", key).status, 404);  // not the prefix
  EXPECT_EQ(e2e::Get(p.port(), "/llm").status, 404);
  httplib::Client cli("127.0.0.1", p.port());
  auto slash = cli.Get("/llm/v1/models/?x=1", key);
  ASSERT_TRUE(slash);
  EXPECT_EQ(slash->status, 307);
  EXPECT_EQ(slash->get_header_value("Location"), "/llm/v1/models?x=1");
  // FastAPI's documentation under a root path: the pages read the document through the
  // prefix, and the document lists the prefix as its server.
  EXPECT_NE(e2e::Get(p.port(), "/llm/docs").body.find("url: '/llm/openapi.json'"),
            std::string::npos);
  EXPECT_NE(e2e::Get(p.port(), "/redoc").body.find("spec-url=\"/llm/openapi.json\""),
            std::string::npos);
  EXPECT_EQ(e2e::Get(p.port(), "/llm/openapi.json").json()["servers"],
            (Json::array({{{"url", "/llm"}}})));
  EXPECT_EQ(p.Stop(SIGTERM), 0);
  // The access log shows the path as the client sent it.
  EXPECT_NE(p.Log().find(" - \"GET /llm/v1/models HTTP/1.1\" 401 Unauthorized"),
            std::string::npos)
      << p.Log();
}

// vLLM's serving flags beyond the seeds': a tokenizer folder of its own, --max-logprobs,
// request logging cut to --max-log-len, --response-role, prefill without chunks.
TEST_F(ServerLifecycle, VllmServeFlagsTakeEffect) {
  const std::string tok = dir_ + "/tok";
  int32_t vocab = 0;
  std::filesystem::create_directories(tok);
  ASSERT_TRUE(WriteTinyTokenizer(tok, TinyTokenizerFamily::kSentencePieceBpe, &vocab).ok());
  for (const auto& f : std::filesystem::directory_iterator(tok)) {  // none beside the weights
    std::filesystem::remove(dir_ + "/" + f.path().filename().string());
  }
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_,
                      Args({"--tokenizer", tok, "--max-logprobs", "3", "--enable-log-requests",
                            "--max-log-len", "5", "--response-role", "bot",
                            "--no-enable-chunked-prefill", "--max-model-len", "128",
                            "--kv-cache-dtype", "auto", "--disable-log-stats",
                            "--disable-uvicorn-access-log", "--enable-prompt-tokens-details",
                            "--enable-request-id-headers", "--scheduling-policy", "priority"})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  EXPECT_NE(p.Log().find("Chunked prefill is disabled: each prompt is prefilled in one step of at "
                         "most max_num_batched_tokens=256."),
            std::string::npos) << p.Log();
  auto complete = [&](int logprobs) {
    return e2e::Post(p.port(), "/v1/completions",
                     R"({"prompt":"hello world hello world","max_tokens":2,"logprobs":)" +
                         std::to_string(logprobs) + "}");
  };
  const e2e::Reply over = complete(4);
  EXPECT_EQ(over.status, 400);
  EXPECT_NE(over.body.find("greater than max allowed: 3"), std::string::npos) << over.body;
  const e2e::Reply ok = complete(3);
  ASSERT_EQ(ok.status, 200) << ok.body;
  // The top 3, and the sampled token where it is not among them (vLLM's completions form).
  const size_t top = ok.json()["choices"][0]["logprobs"]["top_logprobs"][0].size();
  EXPECT_TRUE(top == 3 || top == 4) << ok.body;
  // The logged prompt: at most 5 characters of its text and 5 of its ids.
  const std::string log = p.Log();
  const size_t at = log.find("Received request cmpl-");
  ASSERT_NE(at, std::string::npos) << log;
  // A lone completion prompt is logged as <id>-0, as vLLM's completions endpoint logs it.
  EXPECT_EQ(log.substr(log.find(':', at) - 2, 2), "-0") << log.substr(at, 80);
  const size_t text = log.find("prompt: '", at) + 9, end = log.find("', params: SamplingParams(n=1", at);
  ASSERT_NE(end, std::string::npos) << log.substr(at);
  EXPECT_LE(end - text, 5u) << log.substr(at);
  EXPECT_NE(log.find("logprobs=3", at), std::string::npos);
  const size_t ids = log.find("prompt_token_ids: [", at) + 19;
  EXPECT_EQ(std::count(log.begin() + ids, log.begin() + log.find(']', ids), ','), 4) << log.substr(at);
  // The reply's role: --response-role, or the continued message's without a generation prompt.
  const Json chat = e2e::Post(p.port(), "/v1/chat/completions",
                              R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":2})")
                        .json();
  EXPECT_EQ(chat["choices"][0]["message"]["role"], "bot") << chat.dump();
  const Json cont =
      e2e::Post(p.port(), "/v1/chat/completions",
                R"({"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"Su"}],)"
                R"("add_generation_prompt":false,"continue_final_message":true,"max_tokens":2})")
          .json();
  EXPECT_EQ(cont["choices"][0]["message"]["role"], "assistant") << cont.dump();
  // A prompt near max_model_len runs whole (one step of ~100 tokens).
  std::string words;
  for (int i = 0; i < 40; ++i) words += "hello ";
  const e2e::Reply longer = e2e::Post(p.port(), "/v1/completions",
                                      R"({"prompt":")" + words + R"(","max_tokens":2})");
  EXPECT_EQ(longer.status, 200) << longer.body;
  // With nothing cached yet, a count of 0 (vLLM's current `is not None` test).
  EXPECT_EQ(longer.json()["usage"]["prompt_tokens_details"], (Json{{"cached_tokens", 0}}))
      << longer.body;
  // The same prompt again reads its full blocks from the prefix cache, and usage says so.
  const Json again = e2e::Post(p.port(), "/v1/completions",
                               R"({"prompt":")" + words + R"(","max_tokens":2})").json();
  ASSERT_TRUE(again.contains("usage")) << again.dump();
  const int64_t prompt_tokens = again["usage"]["prompt_tokens"];
  ASSERT_TRUE(again["usage"]["prompt_tokens_details"].is_object()) << again.dump();
  const int64_t cached = again["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_EQ(cached, (prompt_tokens - 1) / 16 * 16) << again.dump();
  // n = 2 on a fresh prompt: the second choice, planned in the first one's step, hits the blocks
  // it computes. vLLM's reply reads the output its last-finishing choice made (the second
  // here: its full blocks cached); its stream, the first output's (the first choice: none).
  std::string unseen;
  for (int i = 0; i < 12; ++i) unseen += "fresh ";
  const std::string two = R"({"prompt":")" + unseen + R"(","max_tokens":2,"n":2,"seed":1})";
  const Json both = e2e::Post(p.port(), "/v1/completions", two).json();
  ASSERT_TRUE(both.contains("usage")) << both.dump();
  ASSERT_TRUE(both["usage"]["prompt_tokens_details"].is_object()) << both.dump();
  EXPECT_EQ(both["usage"]["prompt_tokens_details"]["cached_tokens"],
            (both["usage"]["prompt_tokens"].get<int64_t>() - 1) / 16 * 16) << both.dump();
  std::string fresher;
  for (int i = 0; i < 12; ++i) fresher += "other ";
  const e2e::Reply streamed = e2e::Post(
      p.port(), "/v1/completions",
      R"({"prompt":")" + fresher +
          R"(","max_tokens":2,"n":2,"seed":1,"stream":true,"stream_options":{"include_usage":true}})");
  EXPECT_NE(streamed.body.find(R"("usage":{"prompt_tokens")"), std::string::npos) << streamed.body;
  // The stream's count is its first output's (the first choice: nothing cached).
  EXPECT_NE(streamed.body.find(R"("prompt_tokens_details":{"cached_tokens":0})"),
            std::string::npos)
      << streamed.body;
  const std::string input = R"({"input":")" + words.substr(0, 120) + R"(","max_output_tokens":2})";
  e2e::Post(p.port(), "/v1/responses", input);
  const Json resp = e2e::Post(p.port(), "/v1/responses", input).json();
  ASSERT_TRUE(resp.contains("usage")) << resp.dump();
  EXPECT_GT(resp["usage"]["input_tokens_details"]["cached_tokens"].get<int64_t>(), 0) << resp.dump();
  // --scheduling-policy priority takes a request's priority.
  EXPECT_EQ(e2e::Post(p.port(), "/v1/completions", R"({"prompt":"a","max_tokens":1,"priority":-5})")
                .status,
            200);
  // --enable-request-id-headers: the request's X-Request-Id back, else 32 random hex digits.
  httplib::Client cli("127.0.0.1", p.port());
  auto echoed = cli.Post("/v1/completions", {{"X-Request-Id", "mine"}},
                         R"({"prompt":"a","max_tokens":1})", "application/json");
  ASSERT_TRUE(echoed);
  EXPECT_EQ(echoed->get_header_value("X-Request-Id"), "mine");
  auto fresh = cli.Get("/health");
  ASSERT_TRUE(fresh);
  const std::string id = fresh->get_header_value("X-Request-Id");
  EXPECT_EQ(id.size(), 32u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  EXPECT_EQ(p.Stop(SIGTERM), 0);
  EXPECT_EQ(p.Log().find("HTTP/1.1\" 200 OK"), std::string::npos) << p.Log();
}

TEST_F(ServerLifecycle, GenerationConfigDefaults) {
  const std::string gen = dir_ + "/gen";
  std::filesystem::create_directories(gen);
  std::ofstream(gen + "/generation_config.json") << R"({"temperature": 0.0, "top_p": 0.9})";
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({"--generation-config", gen})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  EXPECT_NE(p.Log().find("Default sampling parameters have been overridden by the model's Hugging "
                         "Face generation config"),
            std::string::npos);
  EXPECT_NE(p.Log().find("Using default chat sampling params from model: {'temperature': 0.0, "
                         "'top_p': 0.9}"),
            std::string::npos)
      << p.Log();
  // temperature 0 by default: two unseeded requests agree.
  const std::string body =
      R"({"messages":[{"role":"user","content":"defaults"}],"max_tokens":8,"ignore_eos":true})";
  Json a = e2e::Post(p.port(), "/v1/chat/completions", body).json();
  Json b = e2e::Post(p.port(), "/v1/chat/completions", body).json();
  EXPECT_EQ(a["choices"][0]["message"], b["choices"][0]["message"]);
  EXPECT_EQ(p.Stop(SIGTERM), 0);

  // --override-generation-config merges over the folder's: top_p replaced, max_new_tokens added.
  ServerProcess q;
  ASSERT_TRUE(q.Start(CPM_CPMSERVE_BIN, dir_,
                      Args({"--generation-config", gen, "--override-generation-config",
                            R"({"top_p": 0.5, "max_new_tokens": 3, "do_sample": true})"})));
  ASSERT_TRUE(q.WaitReady()) << q.Log();
  EXPECT_NE(q.Log().find("Using default chat sampling params from model: {'temperature': 0.0, "
                         "'top_p': 0.5, 'max_tokens': 3}"),
            std::string::npos)
      << q.Log();
  const Json capped = e2e::Post(q.port(), "/v1/chat/completions",
                                R"({"messages":[{"role":"user","content":"cap"}],"ignore_eos":true})")
                          .json();
  EXPECT_EQ(capped["usage"]["completion_tokens"], 3) << capped.dump();
  // The cap applies after the request's own max_tokens met the context check (vLLM's order):
  // too large for the window is still the 400, not a quiet 3 tokens.
  const e2e::Reply too_large =
      e2e::Post(q.port(), "/v1/completions", R"({"prompt":"cap","max_tokens":100000})");
  EXPECT_EQ(too_large.status, 400) << too_large.body;
  EXPECT_NE(too_large.body.find("'max_tokens' or 'max_completion_tokens' is too large"),
            std::string::npos)
      << too_large.body;
  EXPECT_EQ(q.Stop(SIGTERM), 0);

  // A folder without generation_config.json: no defaults (vLLM's try_get_generation_config
  // gives None), a warning, and the server starts.
  ServerProcess none;
  ASSERT_TRUE(none.Start(CPM_CPMSERVE_BIN, dir_, Args({"--generation-config", dir_ + "/empty"})));
  ASSERT_TRUE(none.WaitReady()) << none.Log();
  EXPECT_NE(none.Log().find("generation_config.json does not exist"), std::string::npos);
  EXPECT_EQ(none.Stop(SIGTERM), 0);
}

TEST_F(ServerLifecycle, PreemptionUnderTinyKvBudgetCompletesCorrectly) {
  ServerProcess p;
  // Room for about two sequences of max model len: eight concurrent requests must preempt.
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_,
                      {"--host", "127.0.0.1", "--port", "0", "--threads", "2", "--max-model-len",
                       "96", "--block-size", "16", "--kv-cache-memory-bytes", "50000"}));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  // Long enough (a prompt of ~10 tokens + 72 = 6 blocks) that at most two sequences fit, and the
  // eight requests start together: a fast engine could otherwise finish early ones before late
  // ones arrive, and nothing would need preempting.
  constexpr int kMaxTokens = 72;
  auto run = [&](int i) {
    const Json body = {{"prompt", "preempt me please, request " + std::to_string(i)},
                       {"max_tokens", kMaxTokens}, {"temperature", 0}, {"ignore_eos", true}};
    return e2e::Post(p.port(), "/v1/completions", body.dump()).json();
  };
  std::vector<Json> alone;
  for (int i = 0; i < 8; ++i) alone.push_back(run(i));
  ASSERT_TRUE(alone[0].contains("usage")) << alone[0].dump();
  ASSERT_LE(alone[0]["usage"]["prompt_tokens"].get<int>() + kMaxTokens, 96);
  std::vector<Json> together(8);
  std::vector<std::thread> threads;
  std::latch start(8);
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      together[i] = run(i);
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 8; ++i) {
    ASSERT_TRUE(together[i].contains("choices")) << together[i].dump();
    EXPECT_EQ(together[i]["choices"][0]["text"], alone[i]["choices"][0]["text"]) << i;
    EXPECT_EQ(together[i]["usage"]["completion_tokens"], kMaxTokens);
  }
  const std::string m = e2e::Get(p.port(), "/metrics").body;
  EXPECT_GT(e2e::Metric(m, "vllm:num_preemptions_total"), 0) << p.Log();
  EXPECT_EQ(p.Stop(SIGTERM), 0);
}

// --speculative-config (n-gram): the same text and log-probs as without it, greedy and seeded,
// with drafts proposed and accepted (a request whose logit bias makes it repeat one token
// accepts every draft), counted in vLLM's spec_decode metrics.
TEST_F(ServerLifecycle, NgramSpeculationGivesTheSameOutput) {
  ServerProcess plain, spec;
  ASSERT_TRUE(plain.Start(CPM_CPMSERVE_BIN, dir_, Args({})));
  ASSERT_TRUE(spec.Start(
      CPM_CPMSERVE_BIN, dir_,
      Args({"--speculative-config",
            R"({"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":1,"prompt_lookup_max":3})"}),
      {"VLLM_LOG_STATS_INTERVAL=0.2"}));
  ASSERT_TRUE(plain.WaitReady()) << plain.Log();
  ASSERT_TRUE(spec.WaitReady()) << spec.Log();
  EXPECT_NE(spec.Log().find("Speculative decoding: ngram, num_speculative_tokens=4"),
            std::string::npos) << spec.Log();
  // Every position's counter from the start (vLLM creates them at 0), model_name before it.
  const std::string fresh = e2e::Get(spec.port(), "/metrics").body;
  EXPECT_NE(fresh.find("vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\","
                       "model_name=\""),
            std::string::npos)
      << fresh;
  EXPECT_EQ(e2e::Metric(fresh, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                        "position=\"3\""),
            0);
  const Json tokens = e2e::Post(plain.port(), "/tokenize", R"({"prompt":"Hello"})").json()["tokens"];
  const std::string hello = std::to_string(tokens.back().get<int>());
  const std::vector<Json> bodies = {
      {{"prompt", "one two one two one two one"}, {"temperature", 0}},
      {{"prompt", "the cat sat on the mat"}, {"temperature", 0}, {"logprobs", 2}},
      {{"prompt", "x"}, {"temperature", 0}, {"logit_bias", {{hello, 100}}}},
      {{"prompt", "seeded"}, {"temperature", 1.0}, {"seed", 5}, {"logprobs", 1}}};
  for (Json body : bodies) {
    body["max_tokens"] = 40;
    body["ignore_eos"] = true;
    const Json a = e2e::Post(plain.port(), "/v1/completions", body.dump()).json();
    const Json b = e2e::Post(spec.port(), "/v1/completions", body.dump()).json();
    ASSERT_TRUE(a.contains("choices")) << a.dump();
    ASSERT_TRUE(b.contains("choices")) << b.dump();
    EXPECT_EQ(b["choices"][0]["text"], a["choices"][0]["text"]) << body.dump();
    EXPECT_EQ(b["choices"][0]["logprobs"], a["choices"][0]["logprobs"]) << body.dump();
    EXPECT_EQ(b["usage"], a["usage"]);
  }
  const std::string m = e2e::Get(spec.port(), "/metrics").body;
  EXPECT_GT(e2e::Metric(m, "vllm:spec_decode_num_drafts_total"), 0) << m;
  EXPECT_GT(e2e::Metric(m, "vllm:spec_decode_num_accepted_tokens_total"), 30);
  EXPECT_GE(e2e::Metric(m, "vllm:spec_decode_num_draft_tokens_total"),
            e2e::Metric(m, "vllm:spec_decode_num_accepted_tokens_total"));
  // Per draft position; position 0 stood at least as often as any later one.
  const double pos0 = e2e::Metric(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                                  "position=\"0\"");
  EXPECT_GT(pos0, 0);
  EXPECT_LE(e2e::Metric(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total",
                        "position=\"3\""), pos0);
  const std::string plain_metrics = e2e::Get(plain.port(), "/metrics").body;
  // No speculative config: no spec_decode series at all, as vLLM's SpecDecodingProm.
  EXPECT_EQ(e2e::Metric(plain_metrics, "vllm:spec_decode_num_drafts_total"), -1);
  EXPECT_EQ(e2e::Metric(plain_metrics, "vllm:spec_decode_num_accepted_tokens_per_pos_total"), -1);
  // vLLM's SpecDecodingLogging line after an interval's Engine line.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(spec.Stop(SIGTERM), 0);
  EXPECT_NE(spec.Log().find("SpecDecoding metrics: Mean acceptance length: "), std::string::npos)
      << spec.Log();
  EXPECT_NE(spec.Log().find("Per-position acceptance rate: "), std::string::npos);
  EXPECT_EQ(plain.Stop(SIGTERM), 0);
  EXPECT_EQ(plain.Log().find("SpecDecoding metrics"), std::string::npos);
}

// vLLM's boolean environment flags take "1" or "true", any case, around whitespace.
TEST_F(ServerLifecycle, AllowLongMaxModelLenTakesTrue) {
  ASSERT_EQ(setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", " True ", 1), 0);
  ServerProcess p;
  const bool started = p.Start(CPM_CPMSERVE_BIN, dir_, Args({"--max-model-len", "512"}));
  unsetenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN");
  ASSERT_TRUE(started);
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  EXPECT_NE(p.Log().find("must be used with extreme caution"), std::string::npos) << p.Log();
  EXPECT_EQ(p.Stop(SIGINT), 0) << p.Log();
}

// vLLM's HTTPS flags (uvicorn's): the server's certificate and key, the API over TLS only.
TEST_F(ServerLifecycle, HttpsWithTheGivenCertificate) {
  const e2e::CertFiles server_cert = e2e::WriteSelfSignedCert(dir_, "server", "cpmserve-test");
  ASSERT_FALSE(server_cert.cert.empty());
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_,
                      Args({"--ssl-certfile", server_cert.cert, "--ssl-keyfile", server_cert.key})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  EXPECT_NE(p.Log().find("Starting cpmserve API server on https://"), std::string::npos);
  // A client that trusts the certificate (checked against the address too) gets the API.
  httplib::Client tls("https://127.0.0.1:" + std::to_string(p.port()));
  tls.set_ca_cert_path(server_cert.cert);
  tls.enable_server_certificate_verification(true);
  tls.set_keep_alive(true);  // left idle at the end: the shutdown closes it at once
  auto models = tls.Get("/v1/models");
  ASSERT_TRUE(models) << httplib::to_string(models.error());
  EXPECT_EQ(models->status, 200);
  auto completion = tls.Post("/v1/completions", R"({"prompt":"a","max_tokens":3,"stream":true})",
                             "application/json");
  ASSERT_TRUE(completion);
  EXPECT_EQ(completion->status, 200);
  EXPECT_NE(completion->body.find("data: [DONE]"), std::string::npos) << completion->body;
  // TLS 1.2 with Python's default ciphers (uvicorn's, so vLLM's): forward-secret AEAD suites,
  // not SHA-1 ones or RSA key exchange.
  void* fresh = nullptr;
  EXPECT_EQ(e2e::TlsConnect(p.port(), nullptr, "ECDHE-ECDSA-AES128-GCM-SHA256", &fresh).status, 200);
  e2e::FreeSession(fresh);
  fresh = nullptr;
  EXPECT_FALSE(e2e::TlsConnect(p.port(), nullptr, "ECDHE-ECDSA-AES128-SHA", &fresh).connected);
  // One that does not trust it is refused at the handshake; plain HTTP gets no reply.
  httplib::Client untrusting("https://127.0.0.1:" + std::to_string(p.port()));
  untrusting.enable_server_certificate_verification(true);
  EXPECT_FALSE(untrusting.Get("/health"));
  httplib::Client plain("127.0.0.1", p.port());
  plain.set_read_timeout(5);
  EXPECT_FALSE(plain.Get("/health"));
  ASSERT_TRUE(tls.Get("/health"));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.Log();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 3.0);
}

// --ssl-cert-reqs 2 with --ssl-ca-certs: only clients with a certificate the CAs vouch for.
TEST_F(ServerLifecycle, HttpsClientCertificatesWhenRequired) {
  // A refused client learns it only when its request is written (TLS 1.3 checks the client's
  // certificate after the client's handshake ends), and OpenSSL's writes to the closed socket
  // raise SIGPIPE, which would end this test process.
  signal(SIGPIPE, SIG_IGN);
  const e2e::CertFiles server_cert = e2e::WriteSelfSignedCert(dir_, "server", "cpmserve-test");
  const e2e::CertFiles client_cert = e2e::WriteSelfSignedCert(dir_, "client", "a client");
  const e2e::CertFiles stranger = e2e::WriteSelfSignedCert(dir_, "stranger", "a stranger");
  ASSERT_FALSE(client_cert.cert.empty() || stranger.cert.empty());
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_,
                      Args({"--ssl-certfile", server_cert.cert, "--ssl-keyfile", server_cert.key,
                            "--ssl-ca-certs", client_cert.cert, "--ssl-cert-reqs", "2"})));
  // WaitReady's client sends no certificate: the log says when it listens.
  for (int i = 0; i < 600 && p.Log().find("Application startup complete") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(p.Log().find("Application startup complete"), std::string::npos) << p.Log();
  static const std::regex port_re(R"(listening on https://[^ ]*:(\d+))");
  std::smatch m;
  const std::string log = p.Log();
  ASSERT_TRUE(std::regex_search(log, m, port_re));
  const int port = std::stoi(m[1]);
  const auto health = [&](const e2e::CertFiles* as) {
    std::unique_ptr<httplib::SSLClient> cli =
        as ? std::make_unique<httplib::SSLClient>("127.0.0.1", port, as->cert, as->key)
           : std::make_unique<httplib::SSLClient>("127.0.0.1", port);
    cli->enable_server_certificate_verification(false);
    auto r = cli->Get("/health");
    return r ? r->status : -1;
  };
  EXPECT_EQ(health(&client_cert), 200);
  EXPECT_EQ(health(nullptr), -1);
  EXPECT_EQ(health(&stranger), -1);
  // A client's next connection resumes its session (a proxy's, a browser's): with client
  // certificates checked, OpenSSL refuses that unless the server has a session id context.
  void* session = nullptr;
  const e2e::Handshake first = e2e::TlsConnect(port, &client_cert, "", &session);
  EXPECT_TRUE(first.connected);
  EXPECT_EQ(first.status, 200);
  const e2e::Handshake again = e2e::TlsConnect(port, &client_cert, "", &session);
  EXPECT_TRUE(again.connected);
  EXPECT_TRUE(again.resumed);
  EXPECT_EQ(again.status, 200);
  e2e::FreeSession(session);
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.Log();
}

// --enable-ssl-refresh: a renewed certificate (its files rewritten) is served from the next
// connection on, without a restart.
TEST_F(ServerLifecycle, HttpsCertificateRefresh) {
  const std::string old_dir = dir_ + "/old", new_dir = dir_ + "/new";
  std::filesystem::create_directories(old_dir);
  std::filesystem::create_directories(new_dir);
  const e2e::CertFiles served = e2e::WriteSelfSignedCert(old_dir, "server", "first");
  const e2e::CertFiles renewed = e2e::WriteSelfSignedCert(new_dir, "server", "second");
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_,
                      Args({"--ssl-certfile", served.cert, "--ssl-keyfile", served.key,
                            "--enable-ssl-refresh"})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  const auto trusted_by = [&](const std::string& ca) {
    httplib::Client cli("https://127.0.0.1:" + std::to_string(p.port()));
    cli.set_ca_cert_path(ca);
    cli.enable_server_certificate_verification(true);
    auto r = cli.Get("/health");
    return r && r->status == 200;
  };
  // Copies, so that the test's own trust anchors stay what they were.
  const std::string first_ca = dir_ + "/first.pem", second_ca = dir_ + "/second.pem";
  std::filesystem::copy_file(served.cert, first_ca);
  std::filesystem::copy_file(renewed.cert, second_ca);
  EXPECT_TRUE(trusted_by(first_ca));
  EXPECT_FALSE(trusted_by(second_ca));
  std::filesystem::copy_file(renewed.key, served.key, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::copy_file(renewed.cert, served.cert, std::filesystem::copy_options::overwrite_existing);
  bool renewed_served = false;
  for (int i = 0; i < 100 && !renewed_served; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    renewed_served = trusted_by(second_ca);
  }
  EXPECT_TRUE(renewed_served) << p.Log();
  EXPECT_FALSE(trusted_by(first_ca));
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.Log();
}

// Broken HTTPS set-ups stop the start with the flag and the file named.
TEST_F(ServerLifecycle, HttpsSetUpErrorsNameTheFile) {
  const e2e::CertFiles a = e2e::WriteSelfSignedCert(dir_, "a", "a");
  const e2e::CertFiles b = e2e::WriteSelfSignedCert(dir_, "b", "b");
  const std::string missing = dir_ + "/missing.pem";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--ssl-keyfile", a.key}, "--ssl-keyfile needs --ssl-certfile"},
      {{"--ssl-certfile", missing, "--ssl-keyfile", a.key}, "--ssl-certfile: " + missing},
      {{"--ssl-certfile", a.cert, "--ssl-keyfile", b.key},
       "the private key does not match the certificate"},
      {{"--ssl-certfile", a.cert}, "--ssl-certfile: " + a.cert + ": no PEM private key"},
      {{"--ssl-certfile", a.cert, "--ssl-keyfile", a.key, "--ssl-cert-reqs", "3"},
       "--ssl-cert-reqs: 3 is not"},
      {{"--ssl-certfile", a.cert, "--ssl-keyfile", a.key, "--ssl-ciphers", "NO-SUCH-CIPHER"},
       "--ssl-ciphers: 'NO-SUCH-CIPHER' names no cipher"},
      {{"--ssl-certfile", a.cert, "--ssl-keyfile", a.key, "--ssl-ca-certs", missing},
       "--ssl-ca-certs: " + missing}};
  for (const auto& [flags, message] : cases) {
    ServerProcess p;
    ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args(flags)));
    EXPECT_NE(p.Wait(30), 0) << message;
    EXPECT_NE(p.Log().find(message), std::string::npos) << message << "\n" << p.Log();
  }
  // The other TLS flags without a certificate: plain HTTP, as vLLM serves, with a warning.
  ServerProcess plain;
  ASSERT_TRUE(plain.Start(CPM_CPMSERVE_BIN, dir_,
                          Args({"--ssl-cert-reqs", "2", "--enable-ssl-refresh"})));
  ASSERT_TRUE(plain.WaitReady()) << plain.Log();
  EXPECT_EQ(plain.Stop(SIGTERM), 0);
  EXPECT_NE(plain.Log().find("--ssl-cert-reqs, --enable-ssl-refresh: ignored without --ssl-certfile"),
            std::string::npos)
      << plain.Log();
}

// A client that stops reading its stream for longer than the write timeout (5 s) loses the
// stream, and sees it cut: no [DONE] and no last chunk, so an SDK raises instead of handing
// back a reply that looks whole.
TEST_F(ServerLifecycle, AStalledReadersStreamEndsCutNotComplete) {
  WidenContext();
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({"--max-model-len", "8192"})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  // A small receive window, so that the server's writes block soon after the client stops.
  const int fd = ConnectLoopback(p.port(), 4096);
  ASSERT_GE(fd, 0);
  // ~7 MB of events: more than the socket buffers between the two ends hold (Linux grows a
  // loopback sender's to 4 MiB), so the server's writes block for good once the client stops.
  const std::string body =
      R"({"prompt":"a","max_tokens":6000,"n":2,"ignore_eos":true,"logprobs":5,"stream":true})";
  const std::string request = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(::send(fd, request.data(), request.size(), 0), static_cast<ssize_t>(request.size()));
  char buf[4096];
  std::string got;
  while (got.find("data: ") == std::string::npos) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<size_t>(n));
  }
  // Past the server's write timeout (5 s) after its buffers fill, with room for a slow machine.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) got.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_EQ(got.find("data: [DONE]"), std::string::npos) << got.size() << " bytes";
  EXPECT_NE(got.substr(got.size() - 5), "0\r\n\r\n");
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.Log();
}

// An IPv6 listen address is written in brackets, as vLLM writes it (http://[::]:8000).
TEST_F(ServerLifecycle, Ipv6HostInBracketsInTheLog) {
  {  // Skipped only where this machine has no dual-stack IPv6 socket at all.
    const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    const bool ipv6 =
        probe >= 0 && ::bind(probe, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0;
    if (probe >= 0) ::close(probe);
    if (!ipv6) GTEST_SKIP() << "no IPv6 sockets here";
  }
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_,
                      {"--host", "::", "--port", "0", "--kv-cache-memory-bytes", "4M"}));
  ASSERT_TRUE(p.WaitReady(30)) << p.Log();
  EXPECT_NE(p.Log().find("Starting cpmserve API server on http://[::]:"), std::string::npos)
      << p.Log();
  EXPECT_EQ(p.Stop(SIGTERM), 0);
}

// A client's idle keep-alive connection (an OpenAI client's pool holds one between requests)
// does not hold the shutdown for the keep-alive timeout (5 s): uvicorn closes idle
// connections at once when it stops, and so does cpmserve.
TEST_F(ServerLifecycle, IdleKeepAliveConnectionsDoNotDelayShutdown) {
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  httplib::Client idle("127.0.0.1", p.port());
  idle.set_keep_alive(true);
  auto r = idle.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.Log();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 3.0) << "the shutdown waited for the idle connection's keep-alive timeout";
}

// A signal while the model loads ends the process at once (vLLM's handler raises out of the
// engine's start-up) rather than after the load: here one that never ends, its weights a FIFO
// no one writes.
TEST_F(ServerLifecycle, ASignalWhileLoadingExitsAtOnce) {
  std::filesystem::remove(dir_ + "/model.safetensors");
  ASSERT_EQ(mkfifo((dir_ + "/model.safetensors").c_str(), 0600), 0);
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({})));
  for (int i = 0; i < 600 && p.Log().find("listening on") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_NE(p.Log().find("listening on"), std::string::npos) << p.Log();
  EXPECT_EQ(p.Stop(SIGTERM, 10), 0) << p.Log();
  EXPECT_NE(p.Log().find("Received SIGTERM while loading the model, exiting"), std::string::npos)
      << p.Log();
}

namespace {

// A completion request whose body arrives in two parts: the server holds it in flight (read,
// not yet answered) from Open() until Finish() sends the rest and reads the reply.
class SlowUpload {
 public:
  SlowUpload(int port, std::string body) : body_(std::move(body)), fd_(ConnectLoopback(port)) {}
  ~SlowUpload() {
    if (fd_ >= 0) ::close(fd_);
  }
  bool Open() {
    const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             "application/json\r\nContent-Length: " +
                             std::to_string(body_.size()) + "\r\n\r\n" + body_.substr(0, 5);
    return fd_ >= 0 && Send(head);
  }
  // The rest of the body; the reply (status line to the end of the body) or "".
  std::string Finish() {
    if (!Send(body_.substr(5))) return "";
    timeval tv{30, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    std::string reply;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd_, buf, sizeof buf, 0)) > 0;) reply.append(buf, n);
    return reply;
  }

 private:
  bool Send(const std::string& data) {
    return ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  const std::string body_;
  int fd_;
};

// Waits until the server's log holds `text` (true), or ~10 s pass.
bool WaitForLog(const ServerProcess& p, const std::string& text) {
  for (int i = 0; i < 500; ++i) {
    if (p.Log().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

}  // namespace

// vLLM's --shutdown-timeout: after SIGTERM new requests get a 503 while those in flight may
// finish; past the timeout, or at a second signal, what is left is aborted. A request held in
// flight by its body (sent in two parts) makes each case deterministic.
TEST_F(ServerLifecycle, ShutdownTimeoutLetsRequestsInFlightFinish) {
  enum class Case { kFinishes, kTimesOut, kSecondSignal };
  for (const Case c : {Case::kFinishes, Case::kTimesOut, Case::kSecondSignal}) {
    const std::string timeout = c == Case::kTimesOut ? "1" : "120";
    ServerProcess p;
    ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({"--shutdown-timeout", timeout})));
    ASSERT_TRUE(p.WaitReady()) << p.Log();
    // The second-signal case streams: its reply, begun after the shutdown, is a whole stream.
    const bool stream = c == Case::kSecondSignal;
    SlowUpload held(p.port(), Json{{"prompt", "a"}, {"max_tokens", 5}, {"ignore_eos", true},
                                   {"stream", stream}}
                                  .dump());
    ASSERT_TRUE(held.Open());
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its headers read
    kill(p.pid(), SIGTERM);
    ASSERT_TRUE(WaitForLog(p, "Waiting up to " + timeout + " s for 1 request(s)")) << p.Log();
    const e2e::Reply late = e2e::Get(p.port(), "/health");
    EXPECT_EQ(late.status, 503) << late.body;
    EXPECT_NE(late.body.find("The server is shutting down"), std::string::npos) << late.body;
    if (c == Case::kSecondSignal) kill(p.pid(), SIGTERM);
    if (c != Case::kFinishes) {
      EXPECT_TRUE(WaitForLog(p, "Aborting the 1 request(s) still in flight")) << p.Log();
    }
    const std::string reply = held.Finish();
    if (c == Case::kFinishes) {
      EXPECT_EQ(reply.rfind("HTTP/1.1 200", 0), 0u) << reply;
      EXPECT_NE(reply.find("\"finish_reason\":\"length\""), std::string::npos) << reply;
    } else if (!stream) {
      // Its engine gone by the time its body came: the engine's refusal, not a reply.
      EXPECT_EQ(reply.rfind("HTTP/1.1 503", 0), 0u) << reply;
    } else {
      EXPECT_NE(reply.find("the engine is shut down"), std::string::npos) << reply;
      EXPECT_NE(reply.find("data: [DONE]"), std::string::npos) << reply;
      EXPECT_EQ(reply.substr(reply.size() - 5), "0\r\n\r\n") << reply;
    }
    EXPECT_EQ(p.Wait(30), 0) << p.Log();
    EXPECT_NE(p.Log().find("Shutdown complete"), std::string::npos) << p.Log();
  }
}

// A client that holds its request open (a body sent a byte a second) holds the shutdown, as it
// holds uvicorn's; a further signal ends the process then, as a second Ctrl-C ends uvicorn.
TEST_F(ServerLifecycle, AFurtherSignalEndsAShutdownHeldByAClient) {
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  const int fd = ConnectLoopback(p.port());
  ASSERT_GE(fd, 0);
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: 1000\r\n\r\n{";
  ASSERT_EQ(::send(fd, head.data(), head.size(), MSG_NOSIGNAL), static_cast<ssize_t>(head.size()));
  std::atomic<bool> stop_sending{false};
  std::thread trickle([&] {
    for (int i = 0; i < 60 && !stop_sending.load(); ++i) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      ::send(fd, " ", 1, MSG_NOSIGNAL);
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.Wait(2), -1) << "the shutdown should wait for the request being read";
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.Wait(10), 0) << p.Log();
  stop_sending.store(true);
  trickle.join();
  ::close(fd);
  EXPECT_NE(p.Log().find("Exiting with 1 request(s) still in flight"), std::string::npos)
      << p.Log();
}

TEST_F(ServerLifecycle, SigtermEndsInFlightRequestsAndExitsZero) {
  // A request far longer than the shutdown takes (the server notices the signal within 50 ms):
  // 8000 tokens, so the model's context is widened from the tiny checkpoint's 256 (240 tokens
  // once finished before the abort on a fast run).
  WidenContext();
  ServerProcess p;
  ASSERT_TRUE(p.Start(CPM_CPMSERVE_BIN, dir_, Args({"--max-model-len", "8192"})));
  ASSERT_TRUE(p.WaitReady()) << p.Log();
  bool signalled = false;
  auto r = e2e::PostStream(
      p.port(), "/v1/chat/completions",
      Json{{"messages", {{{"role", "user"}, {"content", "long"}}}}, {"max_tokens", 8000},
           {"ignore_eos", true}, {"stream", true}}
          .dump(),
      [&](const std::string& all) {
        if (!signalled && all.find("\"content\"") != std::string::npos) {
          kill(p.pid(), SIGTERM);
          signalled = true;
        }
        return true;
      });
  ASSERT_TRUE(signalled);
  bool ok = false;
  auto data = e2e::SseData(r.body, &ok);
  EXPECT_TRUE(ok);
  ASSERT_FALSE(data.empty());
  EXPECT_EQ(data.back(), "[DONE]");
  std::string finish;
  for (const std::string& d : data) {
    if (d == "[DONE]") continue;
    Json c = Json::parse(d);
    if (!c["choices"].empty() && !c["choices"][0]["finish_reason"].is_null()) {
      finish = c["choices"][0]["finish_reason"];
    }
  }
  // Cut short with "abort", long before its 8000 tokens.
  EXPECT_EQ(finish, "abort");
  EXPECT_EQ(p.Wait(30), 0) << p.Log();
  EXPECT_NE(p.Log().find("Shutdown complete"), std::string::npos);
}

}  // namespace
}  // namespace cpm
