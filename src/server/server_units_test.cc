// Unit tests of the server's pure parts: flag syntax, KV sizing, request parsing and
// validation texts, stop-string hold-back, SSE framing and the metrics exposition.
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>

#include "multimodal/image_source.h"
#include "server/api_error.h"
#include "server/cors.h"
#include "server/json_media_type.h"
#include "server/auth.h"
#include "server/chat_prompt.h"
#include "server/memory_budget.h"
#include "server/http_metrics.h"
#include "server/http_server.h"
#include "server/json_reader.h"
#include "server/metrics.h"
#include "server/process_metrics.h"
#include "server/protocol.h"
#include "server/request_log.h"
#include "server/sampling_request.h"
#include "server/serve_config.h"
#include "server/sse.h"
#include "server/stop_matcher.h"
#include "tokenizer/test_util.h"

namespace cpm {
namespace {

TEST(ServeConfig, MaxModelLenForms) {
  EXPECT_EQ(*ParseMaxModelLen("4096"), 4096);
  EXPECT_EQ(*ParseMaxModelLen("1k"), 1000);
  EXPECT_EQ(*ParseMaxModelLen("1K"), 1024);
  EXPECT_EQ(*ParseMaxModelLen("32K"), 32768);
  EXPECT_EQ(*ParseMaxModelLen("1.5k"), 1500);
  EXPECT_EQ(*ParseMaxModelLen("-1"), -1);
  EXPECT_EQ(*ParseMaxModelLen("auto"), -1);
  EXPECT_FALSE(ParseMaxModelLen("abc").ok());
  EXPECT_FALSE(ParseMaxModelLen("").ok());
  EXPECT_FALSE(ParseMaxModelLen("0").ok());
  // As vLLM's human_readable_int_or_auto: int(float(number) * 1000) for decimal suffixes, no
  // decimals with binary ones, whitespace and case of "auto" ignored, T suffixes.
  EXPECT_EQ(*ParseMaxModelLen("1.0005k"), 1000);
  EXPECT_EQ(*ParseMaxModelLen("25.6k"), 25600);
  EXPECT_EQ(*ParseMaxModelLen(" 200 "), 200);
  EXPECT_EQ(*ParseMaxModelLen("AUTO"), -1);
  EXPECT_EQ(*ParseMaxModelLen("1t"), 1000000000000);
  EXPECT_EQ(*ParseMaxModelLen("1_024"), 1024);
  EXPECT_EQ(ParseMaxModelLen("1.5K").status().message(),
            "--max-model-len: Decimals are not allowed with binary suffixes like K. Did you mean "
            "to use 1.5k instead?");
  EXPECT_FALSE(ParseMaxModelLen("0.25K").ok());
  EXPECT_FALSE(ParseMaxModelLen("1T").ok());  // 2^40: beyond any model
}

TEST(ServeConfigTest, LimitMmPerPromptTakesEachModalitysCount) {
  EXPECT_EQ(*ParseMediaLimit("", "image"), 999);  // vLLM's default
  EXPECT_EQ(*ParseMediaLimit(R"({"image": 2})", "image"), 2);
  EXPECT_EQ(*ParseMediaLimit(R"({"image": 2})", "video"), 999);
  // vLLM's per-modality options form.
  EXPECT_EQ(*ParseMediaLimit(R"({"image": {"count": 3, "width": 512, "height": 512}})", "image"),
            3);
  EXPECT_EQ(*ParseMediaLimit(R"({"video": {"num_frames": 8}})", "video"), 999);
  EXPECT_FALSE(ParseMediaLimit(R"({"image": {"count": -1}})", "image").ok());
  EXPECT_EQ(*ParseMediaLimit(R"({"image": 0, "video": 1})", "image"), 0);
  EXPECT_EQ(*ParseMediaLimit(R"({"image": 0, "video": 1})", "video"), 1);
  EXPECT_EQ(*ParseMediaLimit(R"({"video": 1, "audio": 3})", "image"), 999);
  for (const char* bad : {"2", "{\"image\": -1}", "{\"image\": \"2\"}", "{"}) {
    auto r = ParseMediaLimit(bad, "image");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--limit-mm-per-prompt"), std::string::npos);
  }
  EXPECT_FALSE(ParseMediaLimit(R"({"video": 1.5})", "video").ok());
}

TEST(ServeConfigTest, MediaIoKwargsSetTheVideoFrameCount) {
  MediaOptions media;
  EXPECT_EQ(media.video_num_frames, 32);  // vLLM's default
  ASSERT_TRUE(ApplyMediaIoKwargs("", &media).ok());
  EXPECT_EQ(media.video_num_frames, 32);
  ASSERT_TRUE(ApplyMediaIoKwargs(R"({"video": {"num_frames": 8}})", &media).ok());
  EXPECT_EQ(media.video_num_frames, 8);
  ASSERT_TRUE(ApplyMediaIoKwargs(R"({"video": {"num_frames": -1}})", &media).ok());
  EXPECT_EQ(media.video_num_frames, -1);
  for (const char* bad : {"[]", R"({"video": {"num_frames": 0}})", R"({"video": {"num_frames": -2}})",
                          R"({"video": {"fps": 2}})", R"({"image": {}})", R"({"video": 3})"}) {
    const Status s = ApplyMediaIoKwargs(bad, &media);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_NE(s.message().find("--media-io-kwargs"), std::string::npos) << s.message();
  }
}

TEST(ServeConfigTest, StructuredOutputsConfigAsVllm) {
  EXPECT_FALSE(ParseStructuredOutputsConfig("")->enable_in_reasoning);
  EXPECT_FALSE(ParseStructuredOutputsConfig(R"({"backend": "xgrammar"})")->enable_in_reasoning);
  EXPECT_FALSE(ParseStructuredOutputsConfig(R"({"backend": "auto", "disable_fallback": true})")
                   ->enable_in_reasoning);
  EXPECT_TRUE(ParseStructuredOutputsConfig(R"({"enable_in_reasoning": true})")->enable_in_reasoning);
  const auto compact = ParseStructuredOutputsConfig(R"({"disable_any_whitespace": true})");
  EXPECT_TRUE(compact->disable_any_whitespace && !compact->enable_in_reasoning);
  EXPECT_FALSE(ParseStructuredOutputsConfig(R"({"disable_any_whitespace": 1})").ok());
  for (const char* bad : {"x", "[]", R"({"backend": "gbnf"})", R"({"enable_in_reasoning": 1})",
                          R"({"backendd": "auto"})"}) {
    auto r = ParseStructuredOutputsConfig(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--structured-outputs-config"), std::string::npos);
  }
}

TEST(ServeConfigTest, SpeculativeConfigAsVllm) {
  auto off = ParseSpeculativeConfig("");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->enabled());
  auto both = ParseSpeculativeConfig(
      R"({"method":"ngram","num_speculative_tokens":4,"prompt_lookup_min":2,"prompt_lookup_max":3})");
  ASSERT_TRUE(both.ok()) << both.status().message();
  EXPECT_EQ(both->num_speculative_tokens, 4);
  EXPECT_EQ(both->prompt_lookup_min, 2);
  EXPECT_EQ(both->prompt_lookup_max, 3);
  // The window defaults as vLLM's: 5 and 5, or the one bound given for both.
  auto k_only = ParseSpeculativeConfig(R"({"method":"ngram","num_speculative_tokens":2})");
  ASSERT_TRUE(k_only.ok());
  EXPECT_EQ(k_only->prompt_lookup_min, 5);
  EXPECT_EQ(k_only->prompt_lookup_max, 5);
  auto max_only = ParseSpeculativeConfig(
      R"({"method":"ngram","num_speculative_tokens":2,"prompt_lookup_max":3})");
  ASSERT_TRUE(max_only.ok());
  EXPECT_EQ(max_only->prompt_lookup_min, 3);
  auto limited = ParseSpeculativeConfig(
      R"({"method":"ngram","num_speculative_tokens":2,"disable_by_batch_size":4})");
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->disable_by_batch_size, 4);
  EXPECT_EQ(k_only->disable_by_batch_size, 0);
  // vLLM's older spelling (the method as the model) and its draft-model fields, which change
  // nothing for prompt lookup.
  for (const char* json : {R"({"model":"[ngram]","num_speculative_tokens":3})",
                           R"({"model":"ngram","num_speculative_tokens":3,"enforce_eager":true,)"
                           R"("draft_tensor_parallel_size":1})"}) {
    auto legacy = ParseSpeculativeConfig(json);
    ASSERT_TRUE(legacy.ok()) << json << ": " << legacy.status().message();
    EXPECT_EQ(legacy->num_speculative_tokens, 3);
  }
  const auto error = [](const char* json) { return ParseSpeculativeConfig(json).status().message(); };
  EXPECT_NE(error(R"({"method":"eagle","num_speculative_tokens":2})").find("'eagle' is not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"method":"mtp","num_speculative_tokens":1})").find("'mtp' is not supported"),
            std::string::npos);
  EXPECT_NE(error(R"({"method":"ngram"})").find("num_speculative_tokens is required"),
            std::string::npos);
  EXPECT_NE(error(R"({"method":"ngram","num_speculative_tokens":0})").find("positive integer"),
            std::string::npos);
  EXPECT_NE(error(R"({"method":"ngram","num_speculative_tokens":2,"prompt_lookup_min":4,)"
                  R"("prompt_lookup_max":3})").find("must be <= prompt_lookup_max=3"),
            std::string::npos);
  EXPECT_NE(error(R"({"model":"draft","num_speculative_tokens":2})").find("draft model"),
            std::string::npos);
  EXPECT_NE(error(R"({"method":"ngram","num_speculative_tokens":2,"speed":1})").find("'speed'"),
            std::string::npos);
  EXPECT_NE(error("[1]").find("not a JSON object"), std::string::npos);
  EXPECT_NE(error(R"({"method":"ngram","num_speculative_tokens":2,"disable_by_batch_size":1})")
                .find("disable_by_batch_size must be an integer >= 2"),
            std::string::npos);
}

TEST(ServeConfig, Validation) {
  ServeConfig c;
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.tensor_parallel_size = 2;
  EXPECT_NE(ValidateServeConfig(c).message().find("--tensor-parallel-size"), std::string::npos);
  c = ServeConfig();
  c.gpu_memory_utilization = 1.5;
  EXPECT_FALSE(ValidateServeConfig(c).ok());
  c = ServeConfig();
  c.default_chat_template_kwargs_json = "[1]";
  EXPECT_FALSE(ValidateServeConfig(c).ok());
  c.default_chat_template_kwargs_json = R"({"enable_thinking": false})";
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c = ServeConfig();  // vLLM: the auto tool choice needs a parser; the parser must be known
  c.enable_auto_tool_choice = true;
  EXPECT_NE(ValidateServeConfig(c).message().find("requires --tool-call-parser"),
            std::string::npos);
  c.tool_call_parser = "hermes";
  EXPECT_NE(ValidateServeConfig(c).message().find("--tool-call-parser"), std::string::npos);
  c.tool_call_parser = "qwen3_coder";
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c = ServeConfig();  // --logprobs-mode: vLLM's default only, its other modes said so
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.logprobs_mode = "processed_logprobs";
  EXPECT_NE(ValidateServeConfig(c).message().find("--logprobs-mode processed_logprobs is not supported"),
            std::string::npos);
  c.logprobs_mode = "bogus";
  EXPECT_NE(ValidateServeConfig(c).message().find("invalid choice: 'bogus'"), std::string::npos);
  c = ServeConfig();
  c.enable_auto_tool_choice = false;  // unused without the flag, so unchecked (vLLM)
  c.tool_call_parser = "hermes";
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c = ServeConfig();  // the model's load choices, checked before any model is read
  c.quantization = "q8_0";
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.quantization = "awq";
  EXPECT_NE(ValidateServeConfig(c).message().find("--quantization: 'awq'"), std::string::npos);
  c = ServeConfig();
  c.dtype = "float16";  // runs as bfloat16 (LoadModel warns)
  EXPECT_TRUE(ValidateServeConfig(c).ok());
  c.dtype = "float8";
  EXPECT_NE(ValidateServeConfig(c).message().find("--dtype: 'float8'"), std::string::npos);
}

KvBudgetInput Input() {
  KvBudgetInput in;
  in.memory = {int64_t{16} << 30, int64_t{16} << 30};
  in.weight_bytes = int64_t{1} << 30;
  in.activation_bytes = int64_t{1} << 30;
  in.kv_bytes_per_block = 1 << 20;
  in.block_size = 16;
  in.derived_max_model_len = 4096;
  in.max_num_seqs = 1024;
  return in;
}

TEST(ServeConfig, HttpWorkersOutnumberTheClientsNotTheBatch) {
  EXPECT_EQ(DefaultHttpThreads(16), 128);  // the seeds' --max-num-seqs 16
  EXPECT_EQ(DefaultHttpThreads(128), 320);  // vLLM's CPU default
  EXPECT_EQ(DefaultHttpThreads(1024), 512);
}

TEST(MemoryBudget, UtilisationMinusWeightsAndActivations) {
  auto b = PlanKvBudget(Input());
  ASSERT_TRUE(b.ok()) << b.status().message();
  const int64_t requested = static_cast<int64_t>((int64_t{16} << 30) * 0.9);
  EXPECT_EQ(b->num_blocks, (requested - (int64_t{2} << 30)) >> 20);
  EXPECT_EQ(b->num_tokens, b->num_blocks * 16);
  EXPECT_EQ(b->max_model_len, 4096);
}

// Beyond what max_num_seqs full-length requests can use, blocks are cut; the memory the share
// left (vLLM's "Available KV cache memory") is still reported as it was.
TEST(MemoryBudget, CapKeepsTheAvailableFigure) {
  KvBudgetInput in = Input();
  in.max_num_seqs = 2;  // 2 × 2 × 256 blocks of 4096 tokens
  auto b = PlanKvBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->capped);
  EXPECT_EQ(b->num_blocks, 1024);
  EXPECT_EQ(b->kv_bytes, int64_t{1024} << 20);
  const int64_t requested = static_cast<int64_t>((int64_t{16} << 30) * 0.9);
  EXPECT_EQ(b->available_kv_bytes, requested - (int64_t{2} << 30));
}

TEST(MemoryBudget, ExplicitBytesWin) {
  KvBudgetInput in = Input();
  in.kv_cache_memory_bytes = int64_t{300} << 20;
  auto b = PlanKvBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->num_blocks, 300);
}

TEST(MemoryBudget, StateSlotsComeOutOfTheCacheMemory) {
  KvBudgetInput in = Input();
  in.kv_cache_memory_bytes = int64_t{300} << 20;
  in.state_bytes = int64_t{40} << 20;  // e.g. 8 slots of 5 MiB
  auto b = PlanKvBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->num_blocks, 260);
  EXPECT_EQ(b->kv_bytes, int64_t{260} << 20);
  in = Input();
  in.state_bytes = int64_t{1} << 30;
  b = PlanKvBudget(in);
  ASSERT_TRUE(b.ok());
  const int64_t requested = static_cast<int64_t>((int64_t{16} << 30) * 0.9);
  EXPECT_EQ(b->num_blocks, (requested - (int64_t{3} << 30)) >> 20);
  in.state_bytes = int64_t{13} << 30;  // states alone exceed the budget
  EXPECT_NE(PlanKvBudget(in).status().message().find("No available memory for the cache blocks"),
            std::string::npos);
}

TEST(MemoryBudget, VllmErrors) {
  KvBudgetInput in = Input();
  in.memory.available_bytes = int64_t{4} << 30;
  in.utilization_explicit = true;
  EXPECT_EQ(PlanKvBudget(in).status().message().rfind("Free memory on device cpu (4.00/16.00 GiB)", 0),
            0u);
  // What the flag means on a CPU, and what to use instead (a seed's 0.9 on a busy host).
  EXPECT_NE(PlanKvBudget(in).status().message().find("try 0.5, or size the cache with "
                                                     "--kv-cache-memory-bytes"),
            std::string::npos);
  in.utilization_explicit = false;  // the default falls back to what is available
  auto b = PlanKvBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->fell_back_to_available);
  in = Input();
  in.weight_bytes = int64_t{15} << 30;
  EXPECT_NE(PlanKvBudget(in).status().message().find("No available memory for the cache blocks"),
            std::string::npos);
  in = Input();
  in.kv_cache_memory_bytes = int64_t{10} << 20;  // 10 blocks = 160 tokens < 4096
  EXPECT_NE(PlanKvBudget(in).status().message().find(
                "To serve at least one request with the model's max seq len (4096)"),
            std::string::npos);
  in.max_model_len = -1;  // auto: fits what there is
  b = PlanKvBudget(in);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->max_model_len, 160);
  EXPECT_EQ(WithThousands(34952), "34,952");
  EXPECT_EQ(WithThousands(100), "100");
}

TEST(Protocol, ChatTypesAndUnknownFields) {
  std::vector<std::string> ignored;
  auto r = protocol::ParseChatCompletionRequest(
      R"({"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.5,
          "max_tokens":5,"max_completion_tokens":7,"stop":"x","n":2,"top_k":3.0,
          "stream":true,"stream_options":{"include_usage":true},"guided_json":{}})",
      &ignored);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r->sampling.max_tokens, 7);
  EXPECT_EQ(r->sampling.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(*r->sampling.top_k, 3);
  EXPECT_TRUE(r->sampling.include_usage);
  EXPECT_EQ(ignored, std::vector<std::string>{"guided_json"});
  for (const char* bad : {
           "{", "[]", R"({"messages":"hi"})", R"({})", R"({"messages":[{"content":"x"}]})",
           R"({"messages":[],"temperature":"hot"})", R"({"messages":[],"n":1.5})",
           R"({"messages":[],"stream":"maybe"})", R"({"messages":[],"stop":[1]})",
           R"({"messages":[],"max_tokens":"3.5"})", R"({"messages":[],"n":"two"})",
           R"({"messages":[],"top_logprobs":"2"})", R"({"messages":[],"temperature":"inf"})",
           R"({"messages":[],"max_tokens":"+-5"})", R"({"messages":[],"temperature":"0x1p-1"})",
           R"({"messages":[],"temperature":"+"})"}) {
    auto e = protocol::ParseChatCompletionRequest(bad, nullptr);
    EXPECT_FALSE(e.ok()) << bad;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << bad;
  }
  // pydantic's lax mode, as vLLM's models read them: numeric strings, booleans as 0 / 1,
  // pydantic's boolean words; a string where vLLM's logprobs validators look first is refused.
  auto lax = protocol::ParseChatCompletionRequest(
      R"({"messages":[{"role":"user","content":"hi"}],"max_tokens":" +3 ","temperature":"0.5",
          "n":true,"ignore_eos":"yes","stop_token_ids":["5", 6.0],"stream":"on",
          "logprobs":1})",
      nullptr);
  ASSERT_TRUE(lax.ok()) << lax.status().message();
  EXPECT_EQ(*lax->sampling.max_tokens, 3);
  EXPECT_EQ(*lax->sampling.temperature, 0.5);
  EXPECT_EQ(lax->sampling.n, 1);
  EXPECT_TRUE(lax->sampling.ignore_eos);
  EXPECT_EQ(lax->sampling.stop_token_ids, (std::vector<int64_t>{5, 6}));
  EXPECT_TRUE(lax->sampling.stream);
  EXPECT_TRUE(lax->logprobs);
  EXPECT_EQ(protocol::ParseChatCompletionRequest(R"({"messages":[],"n":2.5})", nullptr)
                .status().message(),
            "1 validation error: field 'n': Input should be a valid integer, got a number with a "
            "fractional part");
  EXPECT_EQ(*protocol::ParseCompletionRequest(R"({"prompt":"a","logprobs":true})", nullptr)
                 ->logprobs, 1);
  EXPECT_FALSE(protocol::ParseCompletionRequest(R"({"prompt":"a","logprobs":"1"})", nullptr).ok());
  // Beyond a 64-bit long: pydantic's bound of vLLM's seed, from a JSON integer, a float or a
  // lax string alike; the long's own ends pass.
  auto seed_error = [](const std::string& seed) {
    return protocol::ParseChatCompletionRequest(R"({"messages":[],"seed":)" + seed + "}", nullptr)
        .status()
        .message();
  };
  const std::string above = "1 validation error: field 'seed': Input should be less than or "
                            "equal to 9223372036854775807";
  const std::string below = "1 validation error: field 'seed': Input should be greater than or "
                            "equal to -9223372036854775808";
  EXPECT_EQ(seed_error("9223372036854775808"), above);
  EXPECT_EQ(seed_error("1e19"), above);
  EXPECT_EQ(seed_error(R"("9223372036854775808")"), above);
  EXPECT_EQ(seed_error("-9223372036854775809"), below);
  EXPECT_EQ(seed_error(R"("-99999999999999999999")"), below);
  EXPECT_EQ(*protocol::ParseChatCompletionRequest(
                 R"({"messages":[],"seed":9223372036854775807})", nullptr)->sampling.seed,
            INT64_MAX);
  EXPECT_EQ(*protocol::ParseChatCompletionRequest(
                 R"({"messages":[],"seed":-9223372036854775808})", nullptr)->sampling.seed,
            INT64_MIN);
}

// tool_choice as vLLM validates it; whether the server can serve it is the handler's (tested
// in handlers_test).
// documents: vLLM's list[dict[str, str]].
// The template variables: the request's chat_template_kwargs over the server's defaults, without
// the request's chat_template (a template, not a variable).
TEST(ChatPrompt, EffectiveTemplateKwargs) {
  ServerContext ctx;
  using J = nlohmann::ordered_json;
  ctx.default_chat_template_kwargs = J::parse(R"({"enable_thinking": false, "a": 1})");
  EXPECT_EQ(EffectiveTemplateKwargs(ctx, nullptr), ctx.default_chat_template_kwargs);
  EXPECT_EQ(EffectiveTemplateKwargs(
                ctx, J::parse(R"({"enable_thinking": true, "chat_template": "{{ 1 }}", "b": 2})")),
            J::parse(R"({"enable_thinking": true, "a": 1, "b": 2})"));
  ctx.default_chat_template_kwargs = J::object();
  EXPECT_EQ(EffectiveTemplateKwargs(ctx, J::parse(R"({"b": [2]})")), J::parse(R"({"b": [2]})"));
}

// prometheus-fastapi-instrumentator's series as vLLM's /metrics has them: statuses grouped,
// vLLM's excluded routes not counted, durations in both histograms.
TEST(HttpMetrics, InstrumentatorSeries) {
  HttpMetrics m;
  m.Observe("/v1/completions", "POST", 200, 0.3, 29, 395);
  m.Observe("/v1/completions", "POST", 201, 2.0, 10, 5);
  m.Observe("none", "GET", 404, 0.001, 0, 22);
  m.Observe("/health", "GET", 200, 0.001, 0, 0);  // excluded, as vLLM's Instrumentator does
  const std::string text = m.Render();
  const auto has = [&](const std::string& line) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line << " in\n" << text;
  };
  has(R"(http_requests_total{handler="/v1/completions",method="POST",status="2xx"} 2.0)");
  has(R"(http_requests_total{handler="none",method="GET",status="4xx"} 1.0)");
  EXPECT_EQ(text.find("/health"), std::string::npos);
  has(R"(http_request_size_bytes_sum{handler="/v1/completions"} 39.0)");
  has(R"(http_response_size_bytes_count{handler="none"} 1.0)");
  has(R"(http_request_duration_seconds_bucket{handler="/v1/completions",method="POST",le="0.5"} 1.0)");
  has(R"(http_request_duration_seconds_bucket{handler="/v1/completions",method="POST",le="+Inf"} 2.0)");
  has(R"(http_request_duration_highr_seconds_bucket{le="0.01"} 1.0)");
  has("http_request_duration_highr_seconds_count 3.0");
  has("# TYPE http_requests_total counter");
}

// The Prometheus process collector's series, read from /proc for this very process.
TEST(ProcessMetrics, ThisProcess) {
  const std::string text = ProcessMetricsText();
  const auto value = [&](const std::string& name) {
    const size_t at = text.find("\n" + name + " ");
    EXPECT_NE(at, std::string::npos) << name << " in\n" << text;
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + name.size() + 2));
  };
  EXPECT_GT(value("process_resident_memory_bytes"), 1e6);
  EXPECT_GE(value("process_virtual_memory_bytes"), value("process_resident_memory_bytes"));
  const double now = static_cast<double>(std::time(nullptr));
  EXPECT_LE(value("process_start_time_seconds"), now + 1);
  EXPECT_GT(value("process_start_time_seconds"), now - 3600);  // this test started just now
  EXPECT_GE(value("process_cpu_seconds_total"), 0.0);
  EXPECT_GE(value("process_open_fds"), 3.0);  // stdin, stdout, stderr at least
  EXPECT_GE(value("process_max_fds"), value("process_open_fds"));
  EXPECT_NE(text.find("# TYPE process_cpu_seconds_total counter\n"), std::string::npos);
}

TEST(Protocol, DocumentsAreListsOfStringMaps) {
  const auto parse = [](const std::string& documents) {
    return protocol::ParseChatCompletionRequest(
        R"({"messages":[{"role":"user","content":"x"}],"documents":)" + documents + "}", nullptr);
  };
  EXPECT_TRUE(parse(R"([{"title":"a","text":"b"}])").ok());
  EXPECT_TRUE(parse("null").ok());
  EXPECT_EQ(parse(R"("x")").status().message(),
            "1 validation error: field 'documents': Input should be a valid list");
  EXPECT_EQ(parse(R"([1])").status().message(),
            "1 validation error: field 'documents.0': Input should be a valid dictionary");
  EXPECT_EQ(parse(R"([{"title":1}])").status().message(),
            "1 validation error: field 'documents.0.title': Input should be a valid string");
}

TEST(Protocol, ToolChoiceValidatedAsVllm) {
  const std::string tools = R"(,"tools":[{"type":"function","function":{"name":"f"}}])";
  auto chat = [](const std::string& extra) {
    return protocol::ParseChatCompletionRequest(
        R"({"messages":[{"role":"user","content":"hi"}])" + extra + "}", nullptr);
  };
  using protocol::ToolChoice;
  const std::vector<std::pair<std::string, ToolChoice>> cases = {
      {"", ToolChoice::kNone},
      {tools, ToolChoice::kAuto},  // tools alone: "auto"
      {tools + R"(,"tool_choice":"auto")", ToolChoice::kAuto},
      {tools + R"(,"tool_choice":"none")", ToolChoice::kNone},
      {R"(,"tool_choice":"none")", ToolChoice::kNone},
      {R"(,"tool_choice":null)", ToolChoice::kNone},
      {R"(,"tools":[])", ToolChoice::kNone},
      {R"(,"tools":[],"tool_choice":"required")", ToolChoice::kNone},  // OpenAI's rule
      {tools + R"(,"tool_choice":"required")", ToolChoice::kRequired},
      {tools + R"(,"tool_choice":{"type":"function","function":{"name":"f"}})",
       ToolChoice::kNamed}};
  for (const auto& [extra, want] : cases) {
    auto r = chat(extra);
    ASSERT_TRUE(r.ok()) << extra << ": " << r.status().message();
    EXPECT_EQ(r->tool_choice, want) << extra;
  }
  // The template still sees the tools with tool_choice "none" (vLLM renders them too).
  EXPECT_TRUE(chat(tools + R"(,"tool_choice":"none")")->chat.tools.has_value());
  auto message = [&](const std::string& extra) {
    auto r = chat(extra);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << extra;
    return std::string(r.status().message());
  };
  EXPECT_NE(message(R"(,"tool_choice":"auto")")
                .find("When using `tool_choice`, `tools` must be set."),
            std::string::npos);
  // vLLM's check_tool_usage texts.
  for (const auto& [bad, text] : std::vector<std::pair<const char*, const char*>>{
           {R"(,"tool_choice":{"type":"function","function":{}})",
            "Expected field `name` in `function` in `tool_choice`! Correct usage: "},
           {R"(,"tool_choice":{"type":"function","function":{"name":1}})",
            "Invalid `name` in `function`: `1` in `tool_choice`!"},
           {R"(,"tool_choice":{"type":"function","function":{"name":""}})",
            "Invalid `name` in `function`: `` in `tool_choice`!"},
           {R"(,"tool_choice":{"type":"function"})",
            "Invalid value for `function`: `None` in `tool_choice`!"}}) {
    EXPECT_NE(message(tools + bad).find(text), std::string::npos) << bad << ": " << message(tools + bad);
  }
  EXPECT_NE(message(tools + R"(,"tool_choice":{"type":"function","function":{"name":"g"}})")
                .find("The tool specified in `tool_choice` does not match any of the specified "
                      "`tools`"),
            std::string::npos);
  // Each tool as vLLM's ChatCompletionToolsParam: type "function", a function with a name.
  for (const char* bad_tools :
       {R"(,"tools":[{"type":"retrieval","function":{"name":"f"}}],"tool_choice":"none")",
        R"(,"tools":[{"type":"function","function":{"description":"x"}}],"tool_choice":"none")",
        R"(,"tools":[{"type":"function"}])", R"(,"tools":[3])"}) {
    EXPECT_NE(message(bad_tools).find("field 'tools.0"), std::string::npos) << bad_tools;
  }
  EXPECT_TRUE(chat(R"(,"tools":[{"function":{"name":"f"}}],"tool_choice":"none")").ok());
  // FunctionDefinition's types: description a string, parameters a dictionary (null for both
  // is "not given"), whatever the tool_choice.
  for (const auto& [fn, field] : std::vector<std::pair<const char*, const char*>>{
           {R"({"name":"f","parameters":"str"})", "tools.0.function.parameters"},
           {R"({"name":"f","parameters":[1]})", "tools.0.function.parameters"},
           {R"({"name":"f","parameters":true})", "tools.0.function.parameters"},
           {R"({"name":"f","description":5})", "tools.0.function.description"}}) {
    for (const char* choice : {"none", "auto"}) {
      const std::string extra = std::string(R"(,"tools":[{"type":"function","function":)") + fn +
                                R"(}],"tool_choice":")" + choice + "\"";
      EXPECT_NE(message(extra).find(std::string("field '") + field + "'"), std::string::npos)
          << extra << ": " << message(extra);
    }
  }
  EXPECT_TRUE(chat(R"(,"tools":[{"type":"function","function":{"name":"f","description":null,)"
                   R"("parameters":null}}])").ok());
  // A named choice's type is "function" (or left out).
  EXPECT_NE(message(tools + R"(,"tool_choice":{"type":"custom","function":{"name":"f"}})")
                .find("field 'tool_choice.type'"),
            std::string::npos);
  EXPECT_EQ(chat(tools + R"(,"tool_choice":{"function":{"name":"f"}})")->tool_choice,
            ToolChoice::kNamed);
  EXPECT_NE(message(tools + R"(,"tool_choice":"always")")
                .find("Invalid value for `tool_choice`: always!"),
            std::string::npos);
  EXPECT_NE(message(R"(,"tools":{"type":"function"})").find("'tools': Input should be a valid list"),
            std::string::npos);
}

// Structured outputs: the supported kinds become a schema on both endpoints; the others are
// an error, never silently free text.
TEST(Protocol, StructuredOutputs) {
  auto chat = [](const std::string& extra) {
    return protocol::ParseChatCompletionRequest(
        R"({"messages":[{"role":"user","content":"hi"}],)" + extra + "}", nullptr);
  };
  // The server's disable_any_whitespace makes every JSON constraint compact.
  for (const char* format : {R"("response_format":{"type":"json_object"})",
                             R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{}}})",
                             R"("structured_outputs":{"json":{"type":"object"}})"}) {
    const std::string body = std::string(R"({"prompt":"a",)") + format + "}";
    EXPECT_EQ(protocol::ParseCompletionRequest(body, nullptr, true)->sampling.structured
                  ->max_whitespace(), 0) << format;
    EXPECT_GT(protocol::ParseCompletionRequest(body, nullptr, false)->sampling.structured
                  ->max_whitespace(), 0) << format;
  }
  auto completion = [](const std::string& extra) {
    return protocol::ParseCompletionRequest(R"({"prompt":"a",)" + extra + "}", nullptr);
  };
  // response_format with structured_outputs: the format's constraint replaces theirs of its kind
  // and keeps their options (vLLM's structured_outputs_from_response_format); one of another
  // kind beside it is two, a 400.
  {
    const auto merged = completion(
        R"("response_format":{"type":"json_schema","json_schema":{"name":"n","schema":{"type":"integer"}}},)"
        R"("structured_outputs":{"json":{"type":"string"},"disable_any_whitespace":true})");
    ASSERT_TRUE(merged.ok()) << merged.status().message();
    EXPECT_EQ(merged->sampling.structured->max_whitespace(), 0);
    EXPECT_EQ(merged->sampling.structured->root()->kind, structured::Kind::kInteger);
    const auto two = completion(
        R"("response_format":{"type":"json_object"},"structured_outputs":{"regex":"a+"})");
    EXPECT_NE(two.status().message().find(
                  "You can only use one kind of structured outputs constraint but multiple are "
                  "specified"),
              std::string::npos) << two.status().message();
  }
  std::vector<std::string> ignored;
  auto text = protocol::ParseChatCompletionRequest(
      R"({"messages":[{"role":"user","content":"hi"}],"response_format":{"type":"text"},
          "structured_outputs":null})",
      &ignored);
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_TRUE(ignored.empty());
  EXPECT_EQ(text->sampling.structured, nullptr);
  EXPECT_TRUE(completion(R"("response_format":null)").ok());
  for (const char* good :
       {R"("response_format":{"type":"json_object"})",
        R"("response_format":{"type":"json_schema","json_schema":{"name":"x","strict":true,
            "schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})",
        R"("structured_outputs":{"choice":["a","b"]})",
        R"("structured_outputs":{"json":{"type":"array"},"disable_any_whitespace":true})",
        R"("structured_outputs":{"json":"{\"type\": \"string\"}"})",
        R"("structured_outputs":{"json_object":true})",
        R"("structured_outputs":{"regex":"a+"})",
        R"("structured_outputs":{"grammar":"root ::= \"a\" b\nb ::= [0-9]+"})",
        R"("response_format":{"type":"json_schema","json_schema":{"name":"s",
            "schema":{"type":"string","pattern":"a"}}})"}) {
    auto c = chat(good);
    auto p = completion(good);
    ASSERT_TRUE(c.ok()) << good << ": " << c.status().message();
    ASSERT_TRUE(p.ok()) << good << ": " << p.status().message();
    EXPECT_NE(c->sampling.structured, nullptr) << good;
    EXPECT_NE(p->sampling.structured, nullptr) << good;
  }
  for (const char* bad : {R"("response_format":{"type":"json_schema","json_schema":{"name":"x"}})",
                          R"("response_format":{"type":"structural_tag"})",
                          R"("response_format":"json")", R"("response_format":{})",
                          R"("structured_outputs":{"regex":"(a"})",
                          R"("structured_outputs":{"regex":3})",
                          R"("structured_outputs":{"grammar":"root ::= root \"a\""})",
                          R"("structured_outputs":{"structural_tag":"{}"})",
                          R"("structured_outputs":{"choice":["a"],"json":{}})",
                          R"("structured_outputs":{})", R"("structured_outputs":{"json":"{"})",
                          R"("structured_outputs":{"choice":"a"})",
                          R"("response_format":{"type":"json_object"},"structured_outputs":{"json":{}})",
                          R"("response_format":{"type":"json_schema","json_schema":{"name":"s",
                              "schema":{"type":"string","pattern":"\\1"}}})",
                          // OpenAI's and vLLM's json_schema needs its name.
                          R"("response_format":{"type":"json_schema","json_schema":{
                              "schema":{"type":"object"}}})"}) {
    for (auto r : {chat(bad).status(), completion(bad).status()}) {
      EXPECT_EQ(r.code(), StatusCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_NE(chat(R"("structured_outputs":{"structural_tag":"{}"})").status().message().find(
                "structured_outputs.structural_tag is not supported"),
            std::string::npos);
  EXPECT_NE(chat(R"("structured_outputs":{"grammar":"root ::= x\nx ::= \"(\" x \")\""})")
                .status()
                .message()
                .find("structured_outputs.grammar: rule 'x' can never end"),
            std::string::npos);
  EXPECT_NE(chat(R"("structured_outputs":{"grammar":"root ::= root \"x\" | \"y\""})")
                .status()
                .message()
                .find("structured_outputs.grammar: rule 'root' is left-recursive"),
            std::string::npos);
  EXPECT_NE(chat(R"x("structured_outputs":{"regex":"a(?=b)"})x").status().message().find(
                "structured_outputs.regex: lookahead is not supported at offset 1"),
            std::string::npos);
  EXPECT_NE(chat(R"("response_format":{"type":"json_schema","json_schema":{"name":"s",
                     "schema":{"type":"string","pattern":"\\1"}}})")
                .status()
                .message()
                .find("'pattern' (regex: backreferences are not supported at offset 0) at '#'"),
            std::string::npos);
}

TEST(Protocol, CompletionPromptForms) {
  auto one = [](const char* body) { return protocol::ParseCompletionRequest(body, nullptr); };
  EXPECT_EQ(one(R"({"prompt":"a"})")->prompts.size(), 1u);
  EXPECT_EQ(one(R"({"prompt":["a","b"]})")->prompts.size(), 2u);
  auto ids = one(R"({"prompt":[1,2,3]})");
  ASSERT_TRUE(ids.ok());
  EXPECT_FALSE(ids->prompts[0].is_text);
  EXPECT_EQ(ids->prompts[0].ids, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(one(R"({"prompt":[[1],[2,3]]})")->prompts.size(), 2u);
  // pydantic's lax list[int]: integral floats are token ids (a numpy or JavaScript client's).
  auto floats = one(R"({"prompt":[1.0,300.0]})");
  ASSERT_TRUE(floats.ok()) << floats.status().message();
  EXPECT_EQ(floats->prompts[0].ids, (std::vector<int64_t>{1, 300}));
  EXPECT_EQ(one(R"({"prompt":[[1.0],[2]]})")->prompts[0].ids, std::vector<int64_t>{1});
  EXPECT_FALSE(one(R"({"prompt":[1.5]})").ok());
  EXPECT_EQ(*one(R"({"prompt":"a"})")->sampling.max_tokens, 16);
  // An explicit null is the default too (vLLM's normalize_null_max_tokens).
  EXPECT_EQ(*one(R"({"prompt":"a","max_tokens":null})")->sampling.max_tokens, 16);
  // vLLM's validate_prompt_and_prompt_embeds.
  for (const char* body : {R"({"prompt":""})", R"({"prompt":null})", R"({})", R"({"prompt":[]})"}) {
    EXPECT_EQ(one(body).status().message(),
              "1 validation error: Value error, Either prompt or prompt_embeds must be provided "
              "and non-empty.")
        << body;
  }
  EXPECT_FALSE(one(R"({"prompt":[1,"a"]})").ok());
  EXPECT_FALSE(one(R"({"prompt":5})").ok());
  // prompt_embeds without vLLM's --enable-prompt-embeds: its 400, not a reply to `prompt` alone.
  EXPECT_EQ(one(R"({"prompt":"a","prompt_embeds":"AAAA"})").status().message(),
            "You must set `--enable-prompt-embeds` to input `prompt_embeds`. (cpmserve does not "
            "take prompt embeddings.)");
  EXPECT_TRUE(one(R"({"prompt":"a","prompt_embeds":null})").ok());
  // Typed as vLLM's models type them, though without effect here.
  EXPECT_NE(one(R"({"prompt":"a","user":5})").status().message().find("'user'"), std::string::npos);
  EXPECT_NE(one(R"({"prompt":"a","vllm_xargs":[1]})").status().message().find("'vllm_xargs'"),
            std::string::npos);
  EXPECT_NE(one(R"({"prompt":"a","kv_transfer_params":"x"})").status().message().find(
                "'kv_transfer_params': Input should be a valid dictionary"),
            std::string::npos);
  EXPECT_TRUE(one(R"({"prompt":"a","user":"u","vllm_xargs":{"k":1},"kv_transfer_params":null})").ok());
}

TEST(Protocol, StreamOptionsOnlyWhenStreaming) {
  // vLLM's validate_stream_options: non-empty options on a request that does not stream.
  const char* msg =
      "1 validation error: Value error, Stream options can only be defined when `stream=True`.";
  auto chat = [](const char* body) { return protocol::ParseChatCompletionRequest(body, nullptr); };
  auto completion = [](const char* body) {
    return protocol::ParseCompletionRequest(body, nullptr);
  };
  EXPECT_EQ(chat(R"({"messages":[{"role":"user","content":"hi"}],
                     "stream_options":{"include_usage":true}})").status().message(), msg);
  EXPECT_EQ(completion(R"({"prompt":"a","stream":false,
                           "stream_options":{"include_usage":true}})").status().message(), msg);
  EXPECT_TRUE(completion(R"({"prompt":"a","stream":true,
                             "stream_options":{"include_usage":true}})").ok());
  EXPECT_TRUE(chat(R"({"messages":[{"role":"user","content":"hi"}],
                       "stream_options":{}})").ok());
  EXPECT_TRUE(chat(R"({"messages":[{"role":"user","content":"hi"}],
                       "stream_options":null})").ok());
}

TEST(Sampling, MaxLogprobsIsTheServersLimit) {
  protocol::SamplingFields f;
  EXPECT_TRUE(ResolveSampling(f, {}, 20, 100).ok());  // vLLM's default limit, 20
  EXPECT_EQ(ResolveSampling(f, {}, 21, 100).status().message(),
            "Requested sample logprobs of 21, which is greater than max allowed: 20");
  EXPECT_TRUE(ResolveSampling(f, {}, 5, 100, nullptr, 5).ok());
  EXPECT_EQ(ResolveSampling(f, {}, 6, 100, nullptr, 5).status().message(),
            "Requested sample logprobs of 6, which is greater than max allowed: 5");
  EXPECT_TRUE(ResolveSampling(f, {}, 50, 100, nullptr, 100).ok());
  f.prompt_logprobs = 6;
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100, nullptr, 5).status().message(),
            "Requested prompt logprobs of 6, which is greater than max allowed: 5");
  f = {};
  f.use_beam_search = true;
  f.n = 3;  // a beam search asks for 2·n
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100, nullptr, 5).status().message(),
            "Requested sample logprobs of 6, which is greater than max allowed: 5");
}

// vLLM's check: the media type before any parameter, in any case, nothing else.
TEST(JsonMediaType, AsVllmComparesIt) {
  EXPECT_TRUE(IsJsonMediaType("application/json"));
  EXPECT_TRUE(IsJsonMediaType("Application/JSON; charset=utf-8"));
  EXPECT_TRUE(IsJsonMediaType("application/json;charset=UTF-8"));
  EXPECT_FALSE(IsJsonMediaType(""));
  EXPECT_FALSE(IsJsonMediaType("application/x-www-form-urlencoded"));
  EXPECT_FALSE(IsJsonMediaType("text/plain"));
  EXPECT_FALSE(IsJsonMediaType("application/json-patch+json"));
  EXPECT_FALSE(IsJsonMediaType("application/jsonx"));
  EXPECT_FALSE(IsJsonMediaType("application/json ; charset=utf-8"));  // vLLM trims nothing
  EXPECT_FALSE(JsonMediaTypeError("application/json").has_value());
  const auto e = JsonMediaTypeError("text/plain");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->status, 400);
  EXPECT_EQ(e->type, "Bad Request");
}

// Starlette's CORSMiddleware, as vLLM configures it.
TEST(Cors, DefaultsAllowEveryOriginMethodAndHeader) {
  const CorsOptions o;
  EXPECT_EQ(CorsResponseHeaders(o, "http://ui.example"),
            (HeaderList{{"Access-Control-Allow-Origin", "*"}}));
  EXPECT_TRUE(CorsResponseHeaders(o, "").empty());  // not a cross-origin request
  const PreflightReply p = CorsPreflight(o, "http://ui.example", "POST", "content-type, authorization");
  EXPECT_EQ(p.status, 200);
  EXPECT_EQ(p.body, "OK");
  EXPECT_EQ(p.headers, (HeaderList{{"Access-Control-Allow-Origin", "*"},
                                   {"Access-Control-Allow-Methods",
                                    "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT"},
                                   {"Access-Control-Max-Age", "600"},
                                   {"Access-Control-Allow-Headers", "content-type, authorization"}}));
}

TEST(Cors, RestrictedListsAndCredentials) {
  CorsOptions o;
  o.allowed_origins = {"http://a.example"};
  o.allowed_methods = {"GET", "POST"};
  o.allowed_headers = {"X-Trace"};
  EXPECT_EQ(CorsResponseHeaders(o, "http://a.example"),
            (HeaderList{{"Access-Control-Allow-Origin", "http://a.example"}, {"Vary", "Origin"}}));
  EXPECT_TRUE(CorsResponseHeaders(o, "http://b.example").empty());
  PreflightReply p = CorsPreflight(o, "http://a.example", "POST", "Content-Type, x-trace");
  EXPECT_EQ(p.status, 200) << p.body;
  p = CorsPreflight(o, "http://b.example", "DELETE", "authorization");
  EXPECT_EQ(p.status, 400);
  EXPECT_EQ(p.body, "Disallowed CORS origin, method, headers");
  o.allowed_origins = {"*"};
  o.allow_credentials = true;  // the origin echoed, never "*"
  EXPECT_EQ(CorsResponseHeaders(o, "http://c.example"),
            (HeaderList{{"Access-Control-Allow-Origin", "http://c.example"},
                        {"Vary", "Origin"},
                        {"Access-Control-Allow-Credentials", "true"}}));
  EXPECT_EQ(*ParseCorsList("--allowed-origins", R"(["http://a", "http://b"])"),
            (std::vector<std::string>{"http://a", "http://b"}));
  EXPECT_EQ(*ParseCorsList("--allowed-origins", ""), (std::vector<std::string>{"*"}));  // unset
  EXPECT_EQ(ParseCorsList("--allowed-origins", "*").status().message(),
            "--allowed-origins: not a JSON list of strings: *");
  ServeConfig c;
  c.allowed_methods_json = "[1]";
  EXPECT_NE(ValidateServeConfig(c).message().find("--allowed-methods"), std::string::npos);
}

TEST(Sampling, PriorityIsCarried) {
  protocol::SamplingFields f;
  f.priority = -3;
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100)->priority, -3);
}

TEST(RequestLog, VllmsLineCutToMaxLogLen) {
  ResolvedSampling s;
  s.params.temperature = 0.5f;
  s.params.top_p = 0.2f;  // printed as 0.2, the JSON number it came from
  s.params.seed = 7;
  s.stop = {"it's"};
  s.stop_token_ids = {2};
  s.logprobs = 3;
  const std::vector<int32_t> ids = {5, 6, 7, 8};
  EXPECT_EQ(RequestLogLine("cmpl-1", "h\u00e9llo\n", ids, s, 16, -1),
            "Received request cmpl-1: prompt: 'h\u00e9llo\\n', params: SamplingParams(n=1, "
            "presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
            "temperature=0.5, top_p=0.2, top_k=0, min_p=0.0, seed=7, stop=[\"it's\"], "
            "stop_token_ids=[2], include_stop_str_in_output=False, ignore_eos=False, "
            "max_tokens=16, min_tokens=0, logprobs=3, prompt_logprobs=None, "
            "skip_special_tokens=True), prompt_token_ids: [5, 6, 7, 8].");
  // --max-log-len counts code points (é is one) and ids.
  const std::string cut = RequestLogLine("x", "h\u00e9llo", ids, s, 16, 2);
  EXPECT_NE(cut.find("prompt: 'h\u00e9', params"), std::string::npos) << cut;
  EXPECT_NE(cut.find("prompt_token_ids: [5, 6]."), std::string::npos) << cut;
  EXPECT_NE(RequestLogLine("x", "abc", ids, s, 16, 0).find("prompt: '', "), std::string::npos);
}

TEST(ServeConfig, KvCacheDtypeAndUnchunkedBudget) {
  EXPECT_TRUE(CheckKvCacheDtype("auto", "bfloat16").ok());
  EXPECT_TRUE(CheckKvCacheDtype("bfloat16", "bfloat16").ok());
  EXPECT_EQ(CheckKvCacheDtype("fp8_e5m2", "bfloat16").message(),
            "--kv-cache-dtype: 'fp8_e5m2' is not supported: the KV cache holds the model's dtype "
            "(bfloat16 here; pass auto)");
  EXPECT_FALSE(CheckKvCacheDtype("bfloat16", "float32").ok());
  EXPECT_TRUE(CheckUnchunkedBudget(4096, 4096).ok());
  EXPECT_NE(CheckUnchunkedBudget(256, 4096).message().find(
                "max_num_batched_tokens (256) is smaller than max_model_len (4096)"),
            std::string::npos);
  ServeConfig c;
  c.max_logprobs = -2;
  EXPECT_NE(ValidateServeConfig(c).message().find("--max-logprobs"), std::string::npos);
  c.max_logprobs = -1;
  c.max_log_len = -3;
  EXPECT_NE(ValidateServeConfig(c).message().find("--max-log-len"), std::string::npos);
}

TEST(Sampling, RangesAndDefaults) {
  GenerationDefaults d;
  d.temperature = 0.7;
  d.top_p = 0.8;
  protocol::SamplingFields f;
  auto r = ResolveSampling(f, d, -1, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_FLOAT_EQ(r->params.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r->params.top_p, 0.8f);
  f.temperature = 0.0;
  EXPECT_FLOAT_EQ(ResolveSampling(f, d, -1, 100)->params.temperature, 0.0f);
  auto msg = [&](protocol::SamplingFields g, int64_t lp = -1) {
    return ResolveSampling(g, d, lp, 100).status().message();
  };
  protocol::SamplingFields g;
  g.temperature = -0.1;
  EXPECT_EQ(msg(g), "temperature must be non-negative, got -0.1.");
  g = {};
  g.top_p = 0.0;
  EXPECT_EQ(msg(g), "top_p must be in (0, 1], got 0.0.");  // Python's repr of the float
  EXPECT_EQ(ResolveSampling(g, d, -1, 100).status().param(), "top_p");  // the error's param
  g = {};
  g.temperature = -1.0;
  EXPECT_EQ(msg(g), "temperature must be non-negative, got -1.0.");
  g = {};
  g.n = 0;
  EXPECT_EQ(msg(g), "n must be at least 1, got 0.");
  g = {};
  g.stop = {""};
  EXPECT_FALSE(msg(g).empty());
  g = {};
  g.stop_token_ids = {100};
  EXPECT_FALSE(msg(g).empty());
  EXPECT_EQ(msg({}, 21), "Requested sample logprobs of 21, which is greater than max allowed: 20");
  g = {};
  g.max_tokens = 0;
  EXPECT_FALSE(msg(g).empty());
  EXPECT_FALSE(ChatLogprobsCount(false, 3, 100).ok());
  EXPECT_EQ(*ChatLogprobsCount(true, std::nullopt, 100), 0);
  EXPECT_EQ(*ChatLogprobsCount(false, std::nullopt, 100), -1);
}

// vLLM's SamplingParams and request checks: a positive temperature below 0.01 is raised to it
// (only 0 is greedy), greedy n > 1 is refused, seed -1 is no seed, -1 log-prob counts are the
// whole vocabulary (then held to --max-logprobs), top_logprobs 0 needs no `logprobs`,
// prompt_logprobs 0 may stream, thinking_token_budget -1 is no budget.
TEST(Sampling, VllmEdgeValues) {
  protocol::SamplingFields f;
  f.temperature = 1e-6;
  auto r = ResolveSampling(f, {}, -1, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_FLOAT_EQ(r->params.temperature, 0.01f);
  EXPECT_FALSE(r->params.greedy());
  f.temperature = 0;
  f.n = 2;
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100).status().message(),
            "n must be 1 when using greedy sampling, got 2.");
  f.use_beam_search = true;  // a beam search's n is its width
  EXPECT_TRUE(ResolveSampling(f, {}, -1, 100, nullptr, 100).ok());
  f = {};
  f.seed = -1;
  EXPECT_FALSE(ResolveSampling(f, {}, -1, 100)->params.seed.has_value());
  f.seed = 7;
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100)->params.seed, 7u);

  EXPECT_EQ(*ChatLogprobsCount(true, -1, 100), 100);
  EXPECT_EQ(*ChatLogprobsCount(false, 0, 100), -1);
  EXPECT_EQ(ChatLogprobsCount(false, -1, 100).status().message(),
            "1 validation error: Value error, when using `top_logprobs`, `logprobs` must be set "
            "to true.");
  EXPECT_EQ(ChatLogprobsCount(true, -2, 100).status().message(),
            "1 validation error: Value error, `top_logprobs` must be a positive value or -1.");
  EXPECT_EQ(*CompletionLogprobsCount(3), 3);
  EXPECT_EQ(*CompletionLogprobsCount(std::nullopt), -1);
  EXPECT_EQ(CompletionLogprobsCount(-1).status().message(),
            "1 validation error: Value error, `logprobs` must be a positive value.");
  EXPECT_EQ(CompletionLogprobsCount(-1).status().param(), "logprobs");
  EXPECT_EQ(ResolveSampling({}, {}, 100, 100).status().message(),
            "Requested sample logprobs of 100, which is greater than max allowed: 20");
  EXPECT_EQ(ResolveSampling({}, {}, -3, 100).status().message(),
            "1 validation error: Value error, `logprobs` must be a positive value or -1.");

  f = {};
  f.stream = true;
  f.prompt_logprobs = 0;
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100)->prompt_logprobs, 0);
  f.prompt_logprobs = 1;
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100).status().message(),
            "1 validation error: Value error, `prompt_logprobs` are not available when `stream=True`.");
  f.stream = false;
  f.prompt_logprobs = -1;
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100, nullptr, 100)->prompt_logprobs, 100);
  EXPECT_EQ(ResolveSampling(f, {}, -1, 100).status().message(),
            "Requested prompt logprobs of 100, which is greater than max allowed: 20");

  f = {};
  f.thinking_token_budget = -1;
  EXPECT_FALSE(ResolveSampling(f, {}, -1, 100)->thinking_token_budget.has_value());
  f.thinking_token_budget = -2;
  EXPECT_FALSE(ResolveSampling(f, {}, -1, 100).ok());
}

// logit_bias, allowed_token_ids and bad_words: parsed with their types checked, resolved with
// vLLM's checks and messages (the bias clamped to OpenAI's [-100, 100]).
TEST(Sampling, LogitsRulesFromTheRequest) {
  const GenerationDefaults d;
  const auto resolve = [&](const std::string& extra) -> StatusOr<ResolvedSampling> {
    auto req = protocol::ParseCompletionRequest(R"({"prompt":"a",)" + extra + "}", nullptr);
    if (!req.ok()) return req.status();
    return ResolveSampling(req->sampling, d, -1, 100);
  };
  auto none = resolve(R"("logit_bias":{},"allowed_token_ids":null,"bad_words":[])");
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->logits_rules, nullptr);

  auto r = resolve(R"("logit_bias":{"5":2.5," 7 ":-300,"+9":1000},"allowed_token_ids":[5,7,99])");
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_NE(r->logits_rules, nullptr);
  EXPECT_EQ(r->logits_rules->logit_bias,
            (std::vector<std::pair<int32_t, float>>{{5, 2.5f}, {7, -100.0f}, {9, 100.0f}}));
  EXPECT_EQ(r->logits_rules->allowed_token_ids, (std::vector<int32_t>{5, 7, 99}));
  // Keys naming one id are one entry, the last key's (vLLM's dict), not a sum.
  auto dup = resolve(R"("logit_bias":{"5":-100,"05":100," 5 ":7})");
  ASSERT_TRUE(dup.ok()) << dup.status().message();
  EXPECT_EQ(dup->logits_rules->logit_bias, (std::vector<std::pair<int32_t, float>>{{5, 7.0f}}));

  const auto message = [&](const std::string& extra) {
    return resolve(extra).status().message();
  };
  EXPECT_EQ(message(R"("logit_bias":{"100":1,"3":1,"-1":1})"),
            "token_id(s) [100, -1] in logit_bias contain out-of-vocab token ids. Vocabulary "
            "size: 100");
  // Every key int() refuses, as the repr of their list (vLLM's), before any id's range.
  EXPECT_EQ(message(R"("logit_bias":{"x1":1,"3":1,"it's":2,"100":1})"),
            "logit_bias contains key(s) that cannot be converted to integer token IDs: ['x1', "
            "\"it's\"]");
  EXPECT_EQ(resolve(R"("logit_bias":{"x1":1})").status().param(), "logit_bias");
  EXPECT_EQ(message(R"("stop_token_ids":[3,100,-2])"),
            "token_id(s) [100, -2] in stop_token_ids contain out-of-vocab token ids. "
            "Vocabulary size: 100");
  EXPECT_EQ(resolve(R"("stop_token_ids":[100])").status().param(), "stop_token_ids");
  EXPECT_EQ(message(R"("logit_bias":{"1":"2"})"),
            "1 validation error: field 'logit_bias.1': Input should be a valid number");
  EXPECT_EQ(message(R"("logit_bias":[1])"),
            "1 validation error: field 'logit_bias': Input should be a valid dictionary");
  EXPECT_EQ(message(R"("allowed_token_ids":[])"), "allowed_token_ids is not None and empty!");
  EXPECT_EQ(message(R"("allowed_token_ids":[1,100])"),
            "allowed_token_ids contains out-of-vocab token id!");
  EXPECT_EQ(message(R"("allowed_token_ids":["a"])"),
            "1 validation error: field 'allowed_token_ids': Input should be a valid list of "
            "integers");
  EXPECT_EQ(message(R"("bad_words":"no")"),
            "1 validation error: field 'bad_words': Input should be a valid list of strings");
}

// bad_words as vLLM tokenizes them (MiniCPM4's tokenizer: no dummy prefix, so a word alone and
// after a space are different tokens).
TEST(Sampling, BadWordsAloneAndAfterASpace) {
  const auto dir = tokenizer_test::MiniCpm4Dir();
  if (!std::filesystem::exists(dir / "tokenizer.model")) GTEST_SKIP() << "no shared/models";
  auto tok = Tokenizer::Load(dir.string());
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const Tokenizer& t = **tok;
  const auto ids = [&](const char* text) { return t.Encode(text, false); };
  ASSERT_EQ(ids("world").size(), 1u);
  ASSERT_EQ(ids(" world").size(), 1u);
  ASSERT_EQ(ids(" 你好").size(), 2u);  // "▁" then the word: not a word mid-text
  EXPECT_EQ(BadWordsTokenIds({"world", "  world"}, t),
            (std::vector<std::vector<int32_t>>{ids("world"), ids(" world"), ids("world"),
                                               ids(" world")}));
  EXPECT_EQ(BadWordsTokenIds({"你好", "", " "}, t),
            (std::vector<std::vector<int32_t>>{ids("你好")}));
  EXPECT_EQ(BadWordsTokenIds({"Hello world"}, t),
            (std::vector<std::vector<int32_t>>{ids("Hello world"), ids(" Hello world")}));

  protocol::SamplingFields f;
  f.bad_words = {"world"};
  auto r = ResolveSampling(f, GenerationDefaults{}, -1, t.vocab_size(), &t);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->logits_rules->bad_words.size(), 2u);
}

TEST(Sampling, TruncatePromptKeepsTheLastTokens) {
  const auto cut = [](std::optional<int64_t> k, bool multimodal = false, bool first = false) {
    std::vector<int32_t> ids = {1, 2, 3, 4, 5};
    const Status s = TruncatePrompt(k, first, 4, multimodal, &ids);
    return s.ok() ? ids : std::vector<int32_t>{-1};
  };
  EXPECT_EQ(cut(std::nullopt), (std::vector<int32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(cut(2), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(cut(2, false, true), (std::vector<int32_t>{1, 2}));  // truncation_side "right"
  EXPECT_EQ(cut(-1), (std::vector<int32_t>{2, 3, 4, 5}));  // max_model_len
  EXPECT_EQ(cut(0), (std::vector<int32_t>{1, 2, 3, 4, 5}));  // vLLM's ids[-0:]
  EXPECT_EQ(cut(2, true), std::vector<int32_t>{-1});
  std::vector<int32_t> ids = {1};
  EXPECT_EQ(TruncatePrompt(5, false, 4, false, &ids).message(),
            "truncate_prompt_tokens value (5) is greater than max_model_len (4). Please, select "
            "a smaller truncation size.");
  EXPECT_FALSE(TruncatePrompt(-2, false, 4, false, &ids).ok());
  EXPECT_TRUE(TruncatePrompt(3, false, 4, true, &ids).ok());  // nothing cut: fine with images
  // A prompt with images is truncated as its text (vLLM): 92 expanded ids, 24 of text.
  std::vector<int32_t> expanded(92, 5);
  EXPECT_TRUE(TruncatePrompt(50, false, 200, true, &expanded, {}, 24).ok());
  EXPECT_EQ(expanded.size(), 92u);
  EXPECT_FALSE(TruncatePrompt(20, false, 200, true, &expanded, {}, 24).ok());
  EXPECT_EQ(protocol::ParseCompletionRequest(R"({"prompt":"a","truncation_side":"middle"})",
                                             nullptr)
                .status()
                .message(),
            "1 validation error: field 'truncation_side': Input should be 'left' or 'right'");
}

// A text prompt's added special tokens stay (Hugging Face's truncation=True, max_length=k);
// with no room for any text token the slice is plain.
TEST(Sampling, TruncatePromptKeepsAddedSpecialTokens) {
  const auto cut = [](int64_t k, bool first) {
    std::vector<int32_t> ids = {1, 10, 11, 12, 13, 2};  // <s> text </s>
    EXPECT_TRUE(TruncatePrompt(k, first, 8, false, &ids, {1, 1}).ok());
    return ids;
  };
  EXPECT_EQ(cut(4, false), (std::vector<int32_t>{1, 12, 13, 2}));
  EXPECT_EQ(cut(4, true), (std::vector<int32_t>{1, 10, 11, 2}));
  EXPECT_EQ(cut(3, false), (std::vector<int32_t>{1, 13, 2}));
  EXPECT_EQ(cut(2, false), (std::vector<int32_t>{13, 2}));
  EXPECT_EQ(cut(6, false), (std::vector<int32_t>{1, 10, 11, 12, 13, 2}));
}

TEST(Sampling, BeamSearchFieldsAndTheirLimits) {
  const auto resolve = [](const char* body) -> StatusOr<ResolvedSampling> {
    auto req = protocol::ParseCompletionRequest(body, nullptr);
    if (!req.ok()) return req.status();
    return ResolveSampling(req->sampling, GenerationDefaults{}, -1, 1000);
  };
  auto on = resolve(R"({"prompt":"a","use_beam_search":true,"n":3,"length_penalty":0.5})");
  ASSERT_TRUE(on.ok()) << on.status().message();
  EXPECT_TRUE(on->beam_search);
  EXPECT_EQ(on->n, 3);
  EXPECT_EQ(on->length_penalty, 0.5f);
  auto off = resolve(R"({"prompt":"a","use_beam_search":null})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->beam_search);
  EXPECT_EQ(off->length_penalty, 1.0f);
  // Each beam is expanded by its 2·n likeliest tokens: log-probs --max-logprobs (20) bounds.
  EXPECT_EQ(resolve(R"({"prompt":"a","use_beam_search":true,"n":11})").status().message(),
            "Requested sample logprobs of 22, which is greater than max allowed: 20");
  EXPECT_TRUE(resolve(R"({"prompt":"a","use_beam_search":true,"n":10})").ok());
  EXPECT_FALSE(resolve(R"({"prompt":"a","length_penalty":"long"})").ok());
}

TEST(Sampling, ContextLengthTexts) {
  EXPECT_EQ(ResolveMaxTokens(300, std::nullopt, 256).status().message(),
            "This model's maximum context length is 256 tokens. However, your request has 300 "
            "input tokens. Please reduce the length of the input messages.");
  EXPECT_EQ(ResolveMaxTokens(100, 200, 256).status().message(),
            "'max_tokens' or 'max_completion_tokens' is too large: 200. This model's maximum "
            "context length is 256 tokens and your request has 100 input tokens (200 > 256 - "
            "100).");
  EXPECT_EQ(*ResolveMaxTokens(100, std::nullopt, 256), 156);
  EXPECT_EQ(*ResolveMaxTokens(100, 156, 256), 156);
  EXPECT_EQ(*ResolveMaxTokens(100, 156, 256, 8), 8);          // the generation config's cap
  EXPECT_EQ(*ResolveMaxTokens(100, std::nullopt, 256, 8), 8);
  EXPECT_FALSE(ResolveMaxTokens(100, 200, 256, 8).ok());      // checked before the cap
  // min_tokens above what the context leaves (vLLM checks it against the resolved max).
  EXPECT_EQ(ResolveMaxTokens(100, std::nullopt, 256, std::nullopt, 300).status().message(),
            "min_tokens must be less than or equal to max_tokens=156, got 300.");
  EXPECT_EQ(*ResolveMaxTokens(100, std::nullopt, 256, std::nullopt, 156), 156);
}

// A prompt with images: the request is checked against its text tokens (20: each image one
// placeholder), generation capped where the expanded prompt (180) leaves the context, and an
// expanded prompt that fills it is vLLM's engine-side "decoder prompt" 400.
TEST(Sampling, MultimodalPromptsAreCheckedAsTheirText) {
  // As the chat handler resolves them: checked as the text, then limited by the expansion.
  const auto ResolveMultimodalMaxTokens = [](int64_t text_tokens, int64_t prompt_tokens,
                                             std::optional<int64_t> requested, int64_t l,
                                             std::optional<int64_t> cap,
                                             int64_t min_tokens) -> StatusOr<int64_t> {
    CPM_ASSIGN_OR_RETURN(const int64_t asked,
                         ResolveMaxTokens(text_tokens, requested, l, cap, min_tokens));
    return LimitToExpandedPrompt(asked, prompt_tokens, l);
  };
  EXPECT_EQ(*ResolveMultimodalMaxTokens(20, 180, 200, 256, std::nullopt, 0), 76);
  EXPECT_EQ(*ResolveMultimodalMaxTokens(20, 180, 50, 256, std::nullopt, 0), 50);
  EXPECT_EQ(*ResolveMultimodalMaxTokens(20, 180, std::nullopt, 256, std::nullopt, 0), 76);
  EXPECT_NE(ResolveMultimodalMaxTokens(20, 180, 237, 256, std::nullopt, 0)
                .status().message().find("'max_tokens' or 'max_completion_tokens' is too large: 237"),
            std::string::npos);
  EXPECT_EQ(ResolveMultimodalMaxTokens(20, 300, 5, 256, std::nullopt, 0).status().message(),
            "The decoder prompt (length 300) is longer than the maximum model length of 256. Make "
            "sure that `max_model_len` is no smaller than the number of text tokens plus "
            "multimodal tokens. For image inputs, the number of image tokens depends on the "
            "number of images, and possibly their aspect ratios as well.");
  EXPECT_NE(ResolveMultimodalMaxTokens(20, 256, 5, 256, std::nullopt, 0)
                .status().message().find("(prompt + requested output tokens)"),
            std::string::npos);
}

TEST(StopMatcher, HoldsBackPartialMatches) {
  StopMatcher m({"STOP", "xy"}, false);
  EXPECT_EQ(m.Push("hello S"), "hello ");
  EXPECT_EQ(m.Push("T"), "");
  EXPECT_EQ(m.Push("A"), "STA");  // no longer a prefix: released
  EXPECT_EQ(m.Push("x"), "");
  EXPECT_EQ(m.Push("yz"), "");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.matched_stop(), "xy");
  EXPECT_EQ(m.Push("more"), "");
  EXPECT_EQ(m.Flush(), "");
}

// Stops found in the same text: the first listed wins, not the earliest (vLLM's
// check_stop_strings), with the output cut at its occurrence.
TEST(StopMatcher, IncludeAndFirstListedAndFlush) {
  StopMatcher inc({"b", "abc"}, true);
  EXPECT_EQ(inc.Push("xxabcd"), "xxab");  // "abc" starts before "b", but "b" is listed first
  EXPECT_EQ(inc.matched_stop(), "b");
  StopMatcher excl({"\n", "."}, false);
  EXPECT_EQ(excl.Push("Done.\nNext"), "Done.");
  EXPECT_EQ(excl.matched_stop(), "\n");
  StopMatcher tail({"END"}, false);
  EXPECT_EQ(tail.Push("the EN"), "the ");
  EXPECT_EQ(tail.Flush(), "EN");
  StopMatcher none({}, false);
  EXPECT_EQ(none.Push("abc"), "abc");
}

// min_tokens: the first tokens' text is not checked alone, but a stop begun there and finished
// in later text matches (vLLM searches back from the new text), and is held back meanwhile.
TEST(StopMatcher, UncheckedTextMatchesOnlyAcrossItsEnd) {
  StopMatcher across({"\n\n"}, false);
  EXPECT_EQ(across.PushUnchecked("Hi\n"), "Hi");
  EXPECT_EQ(across.Push("\nThere"), "");
  EXPECT_TRUE(across.matched());
  StopMatcher inside({"ab"}, false);
  EXPECT_EQ(inside.PushUnchecked("xa"), "x");
  EXPECT_EQ(inside.PushUnchecked("b"), "ab");  // whole within the unchecked text: no match
  EXPECT_EQ(inside.Push("qab"), "q");
  EXPECT_TRUE(inside.matched());  // the later one, in checked text
  StopMatcher plain({"END"}, false);
  EXPECT_EQ(plain.PushUnchecked("ENDx"), "ENDx");
  EXPECT_EQ(plain.Push("y"), "y");
  EXPECT_FALSE(plain.matched());
}

TEST(Sse, Framing) {
  EXPECT_EQ(SseEvent({{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
  // Invalid UTF-8 never throws.
  EXPECT_NE(SseEvent({{"a", std::string("\xff")}}).find("data: "), std::string::npos);
}

TEST(ApiError, Shape) {
  auto e = ApiErrorFromStatus(NotFound("The model `x` does not exist."));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(ErrorBody(e),
            R"({"error":{"message":"The model `x` does not exist.","type":"NotFoundError","param":null,"code":404}})");
  EXPECT_EQ(ApiErrorFromStatus(InvalidArgument("x")).type, "BadRequestError");
  // The type goes with the Status, not its wording: a message alike is still BadRequestError.
  EXPECT_EQ(ApiErrorFromStatus(InvalidArgument("1 validation error: x")).type, "BadRequestError");
  const Status prefixed = RequestValidationError("x").WithPrefix("messages").WithParam("seed");
  EXPECT_EQ(ApiErrorFromStatus(prefixed).type, "Bad Request");
  EXPECT_EQ(ApiErrorFromStatus(prefixed).status, 400);
  // pydantic's errors while FastAPI parses the body: vLLM's RequestValidationError handler.
  const auto type_of = [](const char* body) {
    return ApiErrorFromStatus(protocol::ParseCompletionRequest(body, nullptr).status()).type;
  };
  EXPECT_EQ(type_of(R"({"prompt":"a","seed":"x"})"), "Bad Request");              // a field's type
  EXPECT_EQ(type_of(R"({"prompt":"a",)"), "Bad Request");                         // JSON syntax
  EXPECT_EQ(type_of(R"([1])"), "Bad Request");                                    // not an object
  std::vector<int32_t> ids = {1, 2};
  EXPECT_EQ(ApiErrorFromStatus(TruncatePrompt(-2, false, 4, false, &ids)).type, "Bad Request");
  // A model validator's ValueError (validate_stream_options, check_logprobs, ...) is one too.
  EXPECT_EQ(ApiErrorFromStatus(protocol::ModelValidatorError("x")).type, "Bad Request");
  EXPECT_EQ(type_of(R"({"prompt":"a","stream_options":{"include_usage":true}})"), "Bad Request");
  // Raised while serving: the prompt and max_tokens against the context, a cut past it.
  EXPECT_EQ(ApiErrorFromStatus(ResolveMaxTokens(4, 1, 4).status()).type, "BadRequestError");
  EXPECT_EQ(ApiErrorFromStatus(TruncatePrompt(5, false, 4, false, &ids)).type, "BadRequestError");
}

// Starlette's get_route_path, which FastAPI's root_path (vLLM's --root-path) routes by.
TEST(RootPath, StripsThePrefixBeforeASlashOnly) {
  EXPECT_EQ(RoutePath("/llm", "/llm/v1/models"), "/v1/models");
  EXPECT_EQ(RoutePath("/llm", "/v1/models"), "/v1/models");
  EXPECT_EQ(RoutePath("/llm", "/llm"), "");
  EXPECT_EQ(RoutePath("/llm", "/llmx/v1/models"), "/llmx/v1/models");
  EXPECT_EQ(RoutePath("/llm/", "/llm/v1/models"), "/llm/v1/models");  // Starlette's too
  EXPECT_EQ(RoutePath("", "/v1/models"), "/v1/models");
}

TEST(Auth, OnlyV1IsProtected) {
  const std::vector<std::string> keys = {"k1", "k2"};
  EXPECT_TRUE(IsAuthorized({}, "/v1/models", ""));
  EXPECT_FALSE(IsAuthorized(keys, "/v1/models", ""));
  EXPECT_FALSE(IsAuthorized(keys, "/v1/models", "Bearer k3"));
  EXPECT_FALSE(IsAuthorized(keys, "/v1/models", "Bearer k"));
  EXPECT_TRUE(IsAuthorized(keys, "/v1/models", "Bearer k2"));
  EXPECT_TRUE(IsAuthorized(keys, "/v1/models", "bearer k2"));  // the scheme in any case (vLLM)
  EXPECT_TRUE(IsAuthorized(keys, "/v1/models", "BEARER k2"));
  EXPECT_FALSE(IsAuthorized(keys, "/v1/models", "Basic k2"));
  EXPECT_FALSE(IsAuthorized(keys, "/v1/models", "bearer"));
  EXPECT_TRUE(IsAuthorized(keys, "/health", ""));
  EXPECT_TRUE(IsAuthorized(keys, "/metrics", ""));
  EXPECT_TRUE(IsAuthorized(keys, "/v10", ""));
}

TEST(Metrics, Exposition) {
  ServerMetrics m("tiny \"model\"", 100);
  RequestObservation o;
  o.finish_reason = "length";
  o.e2e_s = 0.4;
  o.time_per_output_token_s = 0.025;
  o.prompt_tokens = 7;
  o.generation_tokens = 3;
  m.ObserveFirstToken(0.05);
  m.ObserveInterTokenLatency(0.02);
  m.ObserveInterTokenLatency(0.03);
  m.Observe(o);
  o.generation_tokens = 1;  // one token: a time per output token of 0, observed (vLLM)
  o.time_per_output_token_s = 0;
  m.Observe(o);
  m.ObservePrompt(2, 7);
  m.SetCacheConfigInfo({{"block_size", "16"}, {"enable_prefix_caching", "True"}});
  EngineStats s;
  for (int64_t tokens : {1, 8, 9, 600, 20000}) s.iteration_tokens.Observe(tokens);
  s.num_running = 2;
  s.kv_cache_usage = 0.25;
  s.prefix_cache_queries = 10;
  s.prefix_cache_hits = 4;
  const std::string text = m.Render(s);
  const std::string l = R"(engine="0",model_name="tiny \"model\"")";
  for (const std::string& line : std::vector<std::string>{
           "vllm:num_requests_running{" + l + "} 2.0",
           "vllm:kv_cache_usage_perc{" + l + "} 0.25",
           "vllm:prefix_cache_queries_total{" + l + "} 10.0",
           "vllm:prefix_cache_hits_total{" + l + "} 4.0",
           // vLLM's unconditional series, 0 here (no KV connector, no processor cache).
           "vllm:external_prefix_cache_queries_total{" + l + "} 0.0",
           "vllm:external_prefix_cache_hits_total{" + l + "} 0.0",
           "vllm:mm_cache_queries_total{" + l + "} 0.0",
           "vllm:mm_cache_hits_total{" + l + "} 0.0",
           "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"tiny \\\"model\\\"\"} 2.0",
           "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"tiny \\\"model\\\"\"} 0.0",
           "vllm:request_time_per_output_token_seconds_count{" + l + "} 2.0",
           "vllm:request_time_per_output_token_seconds_sum{" + l + "} 0.025",
           "vllm:time_to_first_token_seconds_count{" + l + "} 1.0",
           "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"tiny \\\"model\\\"\"} 2.0",
           "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"tiny \\\"model\\\"\"} 0.0",
           "vllm:inter_token_latency_seconds_count{" + l + "} 2.0",
           "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"10.0\",model_name=\"tiny \\\"model\\\"\"} 2.0",
           "# TYPE vllm:time_to_first_token_seconds histogram",
           // A prompt's n and the most tokens one of its choices generated, once per prompt.
           "vllm:request_params_n_bucket{engine=\"0\",le=\"1.0\",model_name=\"tiny \\\"model\\\"\"} 0.0",
           "vllm:request_params_n_bucket{engine=\"0\",le=\"2.0\",model_name=\"tiny \\\"model\\\"\"} 1.0",
           "vllm:request_max_num_generation_tokens_bucket{engine=\"0\",le=\"5.0\",model_name=\"tiny \\\"model\\\"\"} 0.0",
           "vllm:request_max_num_generation_tokens_bucket{engine=\"0\",le=\"10.0\",model_name=\"tiny \\\"model\\\"\"} 1.0",
           // Buckets are ≤ their bound: 1 | 8 | 9 | 600 | 20000 (+Inf).
           "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"1.0\",model_name=\"tiny \\\"model\\\"\"} 1.0",
           "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"8.0\",model_name=\"tiny \\\"model\\\"\"} 2.0",
           "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"16.0\",model_name=\"tiny \\\"model\\\"\"} 3.0",
           "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"512.0\",model_name=\"tiny \\\"model\\\"\"} 3.0",
           "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"1024.0\",model_name=\"tiny \\\"model\\\"\"} 4.0",
           "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"16384.0\",model_name=\"tiny \\\"model\\\"\"} 4.0",
           "vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"+Inf\",model_name=\"tiny \\\"model\\\"\"} 5.0",
           "vllm:iteration_tokens_total_count{" + l + "} 5.0",
           "vllm:iteration_tokens_total_sum{" + l + "} 20618.0",
           "vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",engine=\"0\"} 1.0"}) {
    EXPECT_NE(text.find(line + "\n"), std::string::npos) << line;
  }
  EXPECT_EQ(Buckets125(100), (std::vector<double>{1, 2, 5, 10, 20, 50, 100}));
}

}  // namespace
}  // namespace cpm
