// `cpmserve bench serve`: a serving benchmark client against a running OpenAI-compatible server
// (ours or vLLM), modelled on `vllm bench serve`: vLLM's random dataset sent as token-id prompts
// to /v1/completions (or decoded to text for /v1/chat/completions), streamed with usage,
// Poisson / gamma arrivals or all at once, an optional concurrency cap, and vLLM's metrics
// (TTFT, TPOT, ITL, E2EL, throughputs, goodput; src/benchserve/serve_metrics.h), result table
// and result JSON. One thread per in-flight request.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "benchserve/random_requests.h"
#include "hub/model_source.h"
#include "benchserve/report.h"
#include "benchserve/serve_metrics.h"
#include "benchserve/spec_decode_stats.h"
#include "benchserve/stream_client.h"
#include "commands.h"
#include "multimodal/base64.h"
#include "multimodal/image_encode.h"
#include "tokenizer/tokenizer.h"

namespace cpm {
namespace {

using benchserve::Api;
using benchserve::BenchmarkMetrics;
using benchserve::Center;
using benchserve::ErrorText;
using benchserve::Now;
using benchserve::RateText;
using benchserve::ReportMetric;
using benchserve::RequestOutput;
using benchserve::Row;
using benchserve::RunRequest;
using benchserve::SampleRequest;
using benchserve::Server;
using Json = nlohmann::ordered_json;

// JSON text; invalid UTF-8 (a decoded random prompt, a generated text) becomes U+FFFD.
std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

struct ServeBenchArgs {
  std::string base_url;
  bool insecure = false;  // an https:// server's certificate is not checked
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string endpoint = "/v1/completions";
  bool endpoint_given = false;  // else --backend may choose it
  std::string backend;          // vLLM's --backend: openai, vllm (completions), openai-chat
  std::string dataset_name = "random";
  std::string model;
  std::string served_model_name;  // the name requests send (default: --model, or the server's)
  std::string tokenizer;
  std::string api_key;
  std::vector<std::string> headers;  // KEY=VALUE, sent with every request
  std::string request_id_prefix;     // x-request-id: prefix + the request's index
  std::vector<std::string> metadata;  // KEY=VALUE, written into the result JSON
  std::optional<int64_t> logprobs;    // logprobs of every request (default: not sent)
  int64_t num_warmups = 0;
  bool append_result = false;
  int64_t num_prompts = 1000;
  int64_t max_concurrency = 0;  // 0: no cap
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  int64_t input_len = 1024;
  int64_t output_len = 128;
  int64_t prefix_len = 0;
  double range_ratio = 0.0;
  uint64_t seed = 0;
  bool ignore_eos = true;
  // vLLM's "sampling parameters" group: each sent only when given (temperature always, 0 by
  // default: greedy); --extra-body's keys win over them, as there.
  double temperature = 0.0;
  std::optional<double> top_p, min_p, frequency_penalty, presence_penalty, repetition_penalty;
  std::optional<int64_t> top_k;
  std::string extra_body;
  std::string percentile_metrics = "ttft,tpot,itl";
  std::string metric_percentiles = "99";
  std::vector<std::string> goodput;
  bool save_result = false;
  bool save_detailed = false;
  std::string result_dir;
  std::string result_filename;
  std::string label;
  double ready_check_timeout = 0;
  // Images per chat request (vLLM's random-mm dataset), random noise sent as JPEG data URLs.
  int64_t mm_items = 0;
  std::string mm_image_size = "448x448";  // HxW, one bucket of vLLM's --random-mm-bucket-config
};

// A line on stderr and the exit code: 2 for unusable flags, 1 for everything else.
struct Failure {
  int code;
  std::string message;
};

std::optional<Server> MakeServer(const ServeBenchArgs& a, Failure* f) {
  std::string url =
      a.base_url.empty() ? "http://" + a.host + ":" + std::to_string(a.port) : a.base_url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos ||
      (url.substr(0, scheme) != "http" && url.substr(0, scheme) != "https")) {
    *f = {2, "--base-url must start with http:// or https:// (got '" + url + "')"};
    return std::nullopt;
  }
  const size_t slash = url.find('/', scheme + 3);
  const std::string origin = slash == std::string::npos ? url : url.substr(0, slash);
  const std::string prefix = slash == std::string::npos ? "" : url.substr(slash);
  std::string key = a.api_key;
  if (key.empty()) {
    if (const char* env = std::getenv("OPENAI_API_KEY")) key = env;
  }
  httplib::Headers headers;
  for (const std::string& h : a.headers) {
    const size_t eq = h.find('=');
    if (eq == std::string::npos || eq == 0) {
      *f = {2, "--header must be KEY=VALUE (got '" + h + "')"};
      return std::nullopt;
    }
    headers.emplace(h.substr(0, eq), h.substr(eq + 1));
  }
  return Server(origin, prefix, key, std::move(headers), !a.insecure);
}

// The model as requests name it, and as the results and the tokenizer know it: vLLM's
// model_name (--served-model-name, --model, or the server's first model id) and model_id
// (--model, or that model's `root`: its path on the server).
struct ServedModel {
  std::string name;
  std::string id;
};

// GET /v1/models (retried while the server is not up, up to the ready-check timeout); its first
// model unless --model names one.
std::optional<ServedModel> ResolveModel(const Server& s, const ServeBenchArgs& a, Failure* f) {
  const double deadline = Now() + a.ready_check_timeout;
  const auto named = [&](std::string name, std::string id) {
    return ServedModel{a.served_model_name.empty() ? std::move(name) : a.served_model_name,
                       std::move(id)};
  };
  for (;;) {
    auto [status, body] = s.Get("/v1/models");
    if (status == 200) {
      if (!a.model.empty()) return named(a.model, a.model);
      Json j = Json::parse(body, nullptr, false);
      if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty() &&
          j["data"][0].contains("id") && j["data"][0]["id"].is_string()) {
        const Json& m = j["data"][0];
        const std::string id = m["id"].get<std::string>();
        const bool root = m.contains("root") && m["root"].is_string();
        return named(id, root ? m["root"].get<std::string>() : id);
      }
      *f = {1, s.Url("/v1/models") + " lists no model; pass --model"};
      return std::nullopt;
    }
    if ((status == 0 || status == 503) && Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      continue;
    }
    const std::string hint = body == "SSLServerVerification"
                                 ? ": its certificate is not trusted; --insecure skips the check"
                                 : "";
    *f = {1, status == 0 ? "cannot reach the server at " + s.Url("") + " (" + body + ")" + hint
                         : "GET " + s.Url("/v1/models") + " failed: " + ErrorText(status, body)};
    return std::nullopt;
  }
}

// The token ids prompts are drawn from, and a local tokenizer when one is at hand: --tokenizer,
// or the model id when it is a local model directory (as vLLM loads the tokenizer from --model).
// Without one, the vocabulary size is found by asking the server's /detokenize which ids it
// accepts (a binary search).
struct Vocabulary {
  std::vector<int32_t> allowed;
  std::unique_ptr<Tokenizer> tokenizer;
  std::string source;
};

std::optional<Vocabulary> FindVocabulary(const Server& s, const ServeBenchArgs& a,
                                         const std::string& model, Failure* f) {
  Vocabulary v;
  namespace fs = std::filesystem;
  std::string dir = a.tokenizer;
  // vLLM's bench loads the tokenizer from --tokenizer, else the model: a folder, or a hub
  // repository id (its cached or downloaded snapshot); failing that, the server's /detokenize.
  if (!dir.empty()) {
    hub::HubOptions o;
    o.need_weights = false;
    o.need_config = false;
    auto resolved = hub::ResolveModelFolder(dir, o);
    if (!resolved.ok()) {
      *f = {2, "--tokenizer: " + resolved.status().message()};
      return std::nullopt;
    }
    dir = *resolved;
  }
  std::string model_dir = model;
  if (dir.empty() && !fs::is_directory(model)) {
    hub::HubOptions o;
    o.need_weights = false;
    o.need_config = false;
    if (auto resolved = hub::ResolveModelFolder(model, o); resolved.ok()) model_dir = *resolved;
  }
  const bool local_model = fs::exists(fs::path(model_dir) / "tokenizer.json") ||
                           fs::exists(fs::path(model_dir) / "tokenizer.model");
  if (dir.empty() && local_model) dir = model_dir;
  if (!dir.empty()) {
    auto t = Tokenizer::Load(dir);
    if (!t.ok()) {
      *f = {a.tokenizer.empty() ? 1 : 2, "--tokenizer: " + t.status().message()};
      return std::nullopt;
    }
    v.tokenizer = std::move(*t);
    for (int32_t id = 0; id < v.tokenizer->vocab_size(); ++id) {
      if (!v.tokenizer->IsSpecial(id)) v.allowed.push_back(id);
    }
    v.source = dir;
    return v;
  }
  auto accepts = [&](int64_t id, int* status) {
    Json body = {{"model", model}, {"tokens", {id}}};
    auto [st, text] = s.Post("/detokenize", Dump(body));
    *status = st;
    return st == 200;
  };
  int status = 0;
  if (!accepts(0, &status)) {
    *f = {1, "cannot find the vocabulary: the server's /detokenize answered HTTP " +
                 std::to_string(status) + "; pass --tokenizer DIR"};
    return std::nullopt;
  }
  int64_t lo = 0, hi = int64_t{1} << 24;  // lo accepted, hi refused
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (accepts(mid, &status)) {
      lo = mid;
    } else if (status == 400) {
      hi = mid;
    } else {
      *f = {1, "cannot find the vocabulary: /detokenize answered HTTP " + std::to_string(status)};
      return std::nullopt;
    }
  }
  for (int32_t id = 0; id <= lo; ++id) v.allowed.push_back(id);
  v.source = "server /detokenize";
  return v;
}

// `n` images of uniform noise (seeded), as vLLM's random-mm dataset makes them, as JPEG data
// URLs (quality 75, PIL's default, as its image encoding uses).
Json RandomImageParts(int64_t n, int64_t height, int64_t width, uint64_t seed) {
  Json parts = Json::array();
  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    RgbImage image = BlankRgbImage(static_cast<int>(width), static_cast<int>(height));
    for (uint8_t& v : image.pixels) v = static_cast<uint8_t>(rng() >> 56);
    const std::string url = "data:image/jpeg;base64," + EncodeBase64(EncodeJpeg(image, 75));
    parts.push_back({{"type", "image_url"}, {"image_url", {{"url", url}}}});
  }
  return parts;
}

// One request's JSON body; `images`: image_url parts put before the text (chat only).
std::string Payload(Api api, const std::string& model, const SampleRequest& r,
                    const std::string& chat_text, const ServeBenchArgs& a, const Json& extra,
                    const Json& images) {
  Json p;
  p["model"] = model;
  if (api == Api::kCompletions) {
    p["prompt"] = r.prompt;
  } else if (images.empty()) {
    p["messages"] = Json::array({{{"role", "user"}, {"content", chat_text}}});
  } else {
    Json content = images;
    content.push_back({{"type", "text"}, {"text", chat_text}});
    p["messages"] = Json::array({{{"role", "user"}, {"content", content}}});
  }
  p["temperature"] = a.temperature;
  const auto put = [&p](const char* key, const auto& v) {
    if (v) p[key] = *v;
  };
  put("top_p", a.top_p);
  put("top_k", a.top_k);
  put("min_p", a.min_p);
  put("frequency_penalty", a.frequency_penalty);
  put("presence_penalty", a.presence_penalty);
  put("repetition_penalty", a.repetition_penalty);
  if (a.logprobs) {
    if (api == Api::kCompletions) {
      p["logprobs"] = *a.logprobs;
    } else {
      p["logprobs"] = true;
      p["top_logprobs"] = *a.logprobs;
    }
  }
  p[api == Api::kCompletions ? "max_tokens" : "max_completion_tokens"] = r.output_len;
  p["stream"] = true;
  p["stream_options"] = {{"include_usage", true}};
  if (a.ignore_eos) p["ignore_eos"] = true;
  for (auto it = extra.begin(); it != extra.end(); ++it) p[it.key()] = it.value();
  return Dump(p);
}

// Limits the requests in flight (a negative limit: none).
class Gate {
 public:
  explicit Gate(int64_t limit) : unlimited_(limit < 0), free_(limit) {}
  void Enter() {
    if (unlimited_) return;
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return free_ > 0; });
    --free_;
  }
  void Leave() {
    if (unlimited_) return;
    {
      std::lock_guard<std::mutex> l(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  const bool unlimited_;  // read without the lock: it never changes
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t free_;  // guarded by mu_
};

int Fail(const Failure& f) {
  std::fprintf(stderr, "bench serve: %s\n", f.message.c_str());
  return f.code;
}

// The flags that need parsing beyond CLI11's, checked before any request is sent.
struct Plan {
  Api api = Api::kCompletions;
  std::string endpoint;  // --endpoint, or --backend's
  std::string backend;   // --backend, or the endpoint's: "openai" or "openai-chat"
  std::vector<std::string> metrics;
  std::vector<double> percentiles;
  benchserve::GoodputSlos slos;
  Json extra = Json::object();
  int64_t image_height = 0, image_width = 0;  // the random images' size (mm_items > 0)
  std::vector<std::pair<std::string, std::string>> metadata;  // --metadata, for the result JSON
};

std::optional<Plan> CheckFlags(const ServeBenchArgs& a, Failure* f) {
  auto fail = [&](std::string message) {
    *f = {2, std::move(message)};
    return std::nullopt;
  };
  if (a.num_prompts < 1) return fail("--num-prompts must be at least 1");
  if (a.input_len < 1 || a.output_len < 1) {
    return fail("--random-input-len and --random-output-len must be at least 1");
  }
  if (a.range_ratio < 0 || a.range_ratio >= 1) return fail("--random-range-ratio must be in [0, 1)");
  if (!(a.request_rate > 0)) return fail("--request-rate must be positive (or inf)");
  if (!(a.burstiness > 0)) return fail("--burstiness must be positive");
  if (a.max_concurrency < 0) return fail("--max-concurrency must be positive");
  Plan plan;
  auto metrics = benchserve::ParseMetricNames(a.percentile_metrics);
  if (!metrics) return fail("--percentile-metrics: a comma list of ttft, tpot, itl, e2el");
  auto percentiles = benchserve::ParsePercentiles(a.metric_percentiles);
  if (!percentiles) return fail("--metric-percentiles: a comma list of numbers in [0, 100]");
  auto slos = benchserve::ParseGoodput(a.goodput);
  if (!slos) return fail("--goodput: KEY:MS pairs with KEY one of ttft, tpot, e2el");
  plan.metrics = std::move(*metrics);
  plan.percentiles = std::move(*percentiles);
  plan.slos = std::move(*slos);
  if (a.dataset_name != "random") {
    return fail("--dataset-name: only the random dataset is supported (got '" + a.dataset_name +
                "')");
  }
  if (a.prefix_len < 0) return fail("--random-prefix-len must be >= 0");
  for (const std::string& kv : a.metadata) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return fail("--metadata must be KEY=VALUE (got '" + kv + "')");
    }
    plan.metadata.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  if (a.num_warmups < 0) return fail("--num-warmups must be >= 0");
  // vLLM's --backend names the API: openai and vllm the completions one, openai-chat the chat
  // one, whose path --endpoint must then give (here it defaults to /v1/chat/completions).
  plan.endpoint = a.endpoint;
  if (!a.backend.empty()) {
    if (a.backend != "openai" && a.backend != "vllm" && a.backend != "openai-chat") {
      return fail("--backend: openai, vllm or openai-chat (got '" + a.backend + "')");
    }
    const bool chat = a.backend == "openai-chat";
    if (!a.endpoint_given && chat) plan.endpoint = "/v1/chat/completions";
    if (plan.endpoint.ends_with("/chat/completions") != chat) {
      return fail("--backend " + a.backend + " does not go with --endpoint " + plan.endpoint);
    }
  }
  if (plan.endpoint.ends_with("/chat/completions")) {
    plan.api = Api::kChat;
  } else if (!plan.endpoint.ends_with("/completions")) {
    return fail("--endpoint must end in /completions or /chat/completions");
  }
  plan.backend = !a.backend.empty() ? a.backend : plan.api == Api::kChat ? "openai-chat" : "openai";
  if (a.mm_items < 0) return fail("--random-mm-base-items-per-request must be >= 0");
  if (a.mm_items > 0) {
    if (plan.api != Api::kChat) return fail("--random-mm-base-items-per-request needs --endpoint /v1/chat/completions");
    char x = 0;
    std::istringstream size(a.mm_image_size);
    if (!(size >> plan.image_height >> x >> plan.image_width) || x != 'x' || !size.eof() ||
        plan.image_height < 1 || plan.image_width < 1 || plan.image_height * plan.image_width > (1 << 26))
      return fail("--random-mm-image-size must be HxW in pixels, e.g. 448x448");
  }
  if (!a.extra_body.empty()) {
    plan.extra = Json::parse(a.extra_body, nullptr, false);
    if (!plan.extra.is_object()) return fail("--extra-body must be a JSON object");
  }
  return plan;
}

// Request bodies for the sampled prompts; chat prompts are decoded to text locally or by the
// server's /detokenize.
std::optional<std::vector<std::string>> BuildPayloads(const ServeBenchArgs& a, const Plan& plan,
                                                      const Server& server,
                                                      const std::string& model,
                                                      const Vocabulary& vocab,
                                                      const std::vector<SampleRequest>& requests,
                                                      Failure* f) {
  std::vector<std::string> payloads;
  for (const SampleRequest& r : requests) {
    std::string text;
    if (plan.api == Api::kChat && vocab.tokenizer) {
      text = vocab.tokenizer->Decode(r.prompt, /*skip_special_tokens=*/false);
    } else if (plan.api == Api::kChat) {
      auto [st, body] = server.Post("/detokenize", Dump(Json{{"model", model}, {"tokens", r.prompt}}));
      Json j = Json::parse(body, nullptr, false);
      if (st != 200 || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string()) {
        *f = {1, "POST /detokenize failed: " + ErrorText(st, body)};
        return std::nullopt;
      }
      text = j["prompt"].get<std::string>();
    }
    const Json images = RandomImageParts(a.mm_items, plan.image_height, plan.image_width,
                                         a.seed * 1000003 + payloads.size());
    payloads.push_back(Payload(plan.api, model, r, text, a, plan.extra, images));
  }
  return payloads;
}

// Sends every request at its arrival offset (under the concurrency cap) and waits for all;
// returns the benchmark duration.
double RunTraffic(const ServeBenchArgs& a, const Plan& plan, const Server& server,
                  const std::vector<SampleRequest>& requests,
                  const std::vector<std::string>& payloads, std::vector<RequestOutput>* outputs) {
  const std::vector<double> offsets =
      benchserve::ArrivalOffsets(a.num_prompts, a.request_rate, a.burstiness, a.seed);
  outputs->assign(requests.size(), RequestOutput());
  Gate gate(a.max_concurrency > 0 ? a.max_concurrency : -1);
  std::vector<std::thread> threads;
  const double t_start = Now();
  for (size_t i = 0; i < requests.size(); ++i) {
    const double wait = t_start + offsets[i] - Now();
    if (wait > 0) std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    gate.Enter();
    threads.emplace_back([&, i] {
      (*outputs)[i] = RunRequest(
          server, plan.endpoint, plan.api, payloads[i],
          static_cast<int64_t>(requests[i].prompt.size()),
          a.request_id_prefix.empty() ? "" : a.request_id_prefix + std::to_string(i));
      gate.Leave();
    });
  }
  for (std::thread& t : threads) t.join();
  return Now() - t_start;
}

void PrintSummary(const ServeBenchArgs& a, const Plan& plan, const BenchmarkMetrics& m,
                  double duration) {
  std::printf("%s\n", Center(" Serving Benchmark Result ", '=', 50).c_str());
  Row("Successful requests:", m.completed);
  Row("Failed requests:", m.failed);
  if (a.max_concurrency > 0) Row("Maximum request concurrency:", a.max_concurrency);
  if (!std::isinf(a.request_rate)) Row("Request rate configured (RPS):", a.request_rate);
  Row("Benchmark duration (s):", duration);
  Row("Total input tokens:", m.total_input);
  Row("Total generated tokens:", m.total_output);
  Row("Request throughput (req/s):", m.request_throughput);
  if (!plan.slos.empty()) Row("Request goodput (req/s):", m.request_goodput);
  Row("Output token throughput (tok/s):", m.output_throughput);
  Row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  Row("Peak concurrent requests:", static_cast<double>(m.max_concurrent_requests));
  Row("Total Token throughput (tok/s):", m.total_token_throughput);
}

// vLLM's result JSON (the per-metric entries are added by ReportMetric).
Json ResultJson(const ServeBenchArgs& a, const Plan& plan, const std::string& model,
                const std::string& tokenizer_id, const std::string& date,
                const BenchmarkMetrics& m, const std::vector<RequestOutput>& outputs,
                double duration) {
  Json result;
  result["date"] = date;
  result["endpoint_type"] = plan.backend;
  result["backend"] = plan.backend;
  result["label"] = a.label.empty() ? Json(nullptr) : Json(a.label);
  result["model_id"] = model;
  result["tokenizer_id"] = tokenizer_id;
  result["num_prompts"] = a.num_prompts;
  result["request_rate"] = std::isinf(a.request_rate) ? Json("inf") : Json(a.request_rate);
  result["burstiness"] = a.burstiness;
  result["max_concurrency"] = a.max_concurrency > 0 ? Json(a.max_concurrency) : Json(nullptr);
  result["duration"] = duration;
  result["completed"] = m.completed;
  result["failed"] = m.failed;
  result["total_input_tokens"] = m.total_input;
  result["total_output_tokens"] = m.total_output;
  result["request_throughput"] = m.request_throughput;
  result["request_goodput"] = plan.slos.empty() ? Json(nullptr) : Json(m.request_goodput);
  result["output_throughput"] = m.output_throughput;
  result["total_token_throughput"] = m.total_token_throughput;
  if (a.save_detailed) {
    Json in = Json::array(), ttfts = Json::array(), itls = Json::array(), texts = Json::array(),
         errors = Json::array();
    for (const RequestOutput& o : outputs) {
      in.push_back(o.prompt_len);
      ttfts.push_back(o.ttft);
      itls.push_back(o.itl);
      texts.push_back(o.generated_text);
      errors.push_back(o.error);
    }
    result["input_lens"] = in;
    result["output_lens"] = m.output_lens;
    result["ttfts"] = ttfts;
    result["itls"] = itls;
    result["generated_texts"] = texts;
    result["errors"] = errors;
  }
  result["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  result["max_concurrent_requests"] = m.max_concurrent_requests;
  return result;
}

// The speculative-decoding block (only when the server drafted during the run).
void ReportSpecDecode(const benchserve::SpecDecodeSummary& s, Json& result) {
  std::printf("%s\n", Center("Speculative Decoding", '-', 50).c_str());
  Row("Acceptance rate (%):", s.acceptance_rate);
  Row("Acceptance length:", s.acceptance_length);
  Row("Drafts:", s.drafts);
  Row("Draft tokens:", s.draft_tokens);
  Row("Accepted tokens:", s.accepted_tokens);
  if (!s.per_position_rates.empty()) {
    std::printf("Per-position acceptance (%%):\n");
    for (size_t p = 0; p < s.per_position_rates.size(); ++p) {
      Row("  Position " + std::to_string(p) + ":", 100.0 * s.per_position_rates[p]);
    }
  }
  // vLLM writes the fractions, and the key even when empty.
  result["spec_decode_per_position_acceptance_rates"] = s.per_position_rates;
  result["spec_decode_acceptance_rate"] = s.acceptance_rate;
  result["spec_decode_acceptance_length"] = s.acceptance_length;
  result["spec_decode_num_drafts"] = s.drafts;
  result["spec_decode_draft_tokens"] = s.draft_tokens;
  result["spec_decode_accepted_tokens"] = s.accepted_tokens;
}

// --save-result / --result-filename / --result-dir: vLLM's default file name.
bool SaveResult(const ServeBenchArgs& a, const Plan& plan, const std::string& model,
                const std::string& date, const Json& result, Failure* f) {
  std::string name = a.result_filename;
  if (name.empty()) {
    const size_t slash = model.find_last_of('/');
    const std::string base = model.substr(slash == std::string::npos ? 0 : slash + 1);
    name = (a.label.empty() ? plan.backend : a.label) + "-" + RateText(a.request_rate) + "qps" +
           (a.max_concurrency > 0 ? "-concurrency" + std::to_string(a.max_concurrency) : "") +
           "-" + base + "-" + date + ".json";
  }
  if (!a.result_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(a.result_dir, ec);
    name = (std::filesystem::path(a.result_dir) / name).string();
  }
  // --append-result: another line of the same file (vLLM appends its JSON so too).
  std::ofstream out(name, a.append_result ? std::ios::app : std::ios::trunc);
  out << Dump(result) << "\n";
  if (!out) {
    *f = {1, "cannot write " + name};
    return false;
  }
  std::printf("result written to %s\n", name.c_str());
  return true;
}

int RunServeBench(const ServeBenchArgs& a) {
  // A server that closes a connection mid-write (an https:// one refusing the handshake, a
  // shutdown) fails that request; OpenSSL writes with write(), whose SIGPIPE would end the run.
  signal(SIGPIPE, SIG_IGN);
  Failure f{0, ""};
  const std::optional<Plan> plan = CheckFlags(a, &f);
  if (!plan) return Fail(f);
  auto server = MakeServer(a, &f);
  if (!server) return Fail(f);
  auto model = ResolveModel(*server, a, &f);
  if (!model) return Fail(f);
  auto vocab = FindVocabulary(*server, a, model->id, &f);
  if (!vocab) return Fail(f);
  if (vocab->allowed.empty()) return Fail({1, "the vocabulary has no ordinary token"});

  benchserve::RandomDatasetOptions ro{a.num_prompts, a.input_len, a.output_len, a.range_ratio,
                                      a.seed, a.prefix_len};
  const std::vector<SampleRequest> requests = benchserve::SampleRandomRequests(ro, vocab->allowed);
  auto payloads = BuildPayloads(a, *plan, *server, model->name, *vocab, requests, &f);
  if (!payloads) return Fail(f);
  std::printf(
      "bench serve: %s%s, model %s, %lld prompts of %s%lld (±%.0f%%) random tokens from "
      "%zu ids (%s), %lld output tokens each\n",
      server->Url("").c_str(), plan->endpoint.c_str(), model->name.c_str(),
      static_cast<long long>(a.num_prompts),
      a.prefix_len > 0 ? (std::to_string(a.prefix_len) + " shared + ").c_str() : "",
      static_cast<long long>(a.input_len), 100 * a.range_ratio, vocab->allowed.size(),
      vocab->source.c_str(), static_cast<long long>(a.output_len));

  std::printf("Starting initial single prompt test run...\n");
  std::fflush(stdout);
  RequestOutput test = RunRequest(*server, plan->endpoint, plan->api, (*payloads)[0],
                                  static_cast<int64_t>(requests[0].prompt.size()));
  if (!test.success) {
    return Fail({1, "initial test run failed (check the flags against the server): " + test.error});
  }
  if (a.num_warmups > 0) {
    // Not timed: they warm the server's allocator and kernels, one at a time, each with the
    // first prompt as vLLM's (the test request's): the timed prompts' blocks stay out of the
    // prefix cache, which they would otherwise all hit.
    std::printf("Warming up with %lld requests...\n", static_cast<long long>(a.num_warmups));
    std::fflush(stdout);
    for (int64_t i = 0; i < a.num_warmups; ++i) {
      RunRequest(*server, plan->endpoint, plan->api, (*payloads)[0],
                 static_cast<int64_t>(requests[0].prompt.size()));
    }
    std::printf("Warmup run completed.\n");
  }
  std::printf("Initial test run completed. Starting main benchmark run...\n");
  std::printf("Traffic request rate: %s\n", RateText(a.request_rate).c_str());
  std::printf("Burstiness factor: %s (%s)\n", RateText(a.burstiness).c_str(),
              a.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
  std::printf("Maximum request concurrency: %s\n",
              a.max_concurrency > 0 ? std::to_string(a.max_concurrency).c_str() : "None");
  std::fflush(stdout);

  // The server's spec_decode counters around the run (vLLM's bench reads them the same way).
  const auto spec_counters = [&] {
    auto [status, body] = server->Get("/metrics");
    return benchserve::ReadSpecDecodeCounters(status == 200 ? body : "");
  };
  const benchserve::SpecDecodeCounters spec_before = spec_counters();
  std::vector<RequestOutput> outputs;
  const double duration = RunTraffic(a, *plan, *server, requests, *payloads, &outputs);
  const benchserve::SpecDecodeSummary spec = benchserve::Summarize(spec_before, spec_counters());
  auto fallback = [&](size_t i) -> int64_t {  // no usage from the server: count tokens
    if (vocab->tokenizer) {
      return static_cast<int64_t>(
          vocab->tokenizer->Encode(outputs[i].generated_text, false).size());
    }
    return outputs[i].chunks;
  };
  const BenchmarkMetrics m =
      benchserve::CalculateMetrics(outputs, duration, plan->percentiles, plan->slos, fallback);
  if (m.failed > 0) {  // vLLM's listing of the failures, ten at most
    std::printf("Failed requests during benchmark run detected (capping to 10):\n");
    int shown = 0;
    for (const RequestOutput& o : outputs) {
      if (o.success) continue;
      if (shown == 10) break;
      std::printf("Error %d: %s\n", shown++, o.error.c_str());
    }
  }

  PrintSummary(a, *plan, m, duration);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y%m%d-%H%M%S", std::localtime(&now));
  Json result = ResultJson(a, *plan, model->id, vocab->source, date, m, outputs, duration);
  for (const auto& [key, value] : plan->metadata) result[key] = value;
  ReportMetric(plan->metrics, "ttft", "TTFT", "Time to First Token", m.ttft, result);
  ReportMetric(plan->metrics, "tpot", "TPOT", "Time per Output Token (excl. 1st token)", m.tpot,
               result);
  ReportMetric(plan->metrics, "itl", "ITL", "Inter-token Latency", m.itl, result);
  ReportMetric(plan->metrics, "e2el", "E2EL", "End-to-end Latency", m.e2el, result);
  if (spec.drafts > 0) ReportSpecDecode(spec, result);
  std::printf("%s\n", std::string(50, '=').c_str());
  // vLLM writes the file for --save-result or --append-result (--result-filename only names it).
  if ((a.save_result || a.append_result) && !SaveResult(a, *plan, model->id, date, result, &f)) {
    return Fail(f);
  }
  // Failed requests are in the table (and the file) as vLLM reports them, and as there the
  // run itself succeeded: exit 0, so that a sweep under `set -e` goes on.
  return 0;
}

}  // namespace

void RegisterBenchServeCommand(CLI::App& bench, int* exit_code) {
  auto a = std::make_shared<ServeBenchArgs>();
  CLI::App* cmd = bench.add_subcommand(
      "serve",
      "serving benchmark against a running OpenAI-compatible server (as vllm bench "
      "serve): TTFT, TPOT, ITL, E2EL, request and token throughput");
  cmd->add_option("--base-url", a->base_url, "server base URL (instead of --host/--port)");
  cmd->add_option("--host", a->host)->capture_default_str();
  cmd->add_option("--port", a->port)->capture_default_str();
  CLI::Option* endpoint =
      cmd->add_option("--endpoint", a->endpoint, "/v1/completions or /v1/chat/completions")
          ->capture_default_str();
  cmd->add_option("--backend", a->backend,
                  "openai or vllm (the completions API), openai-chat (the chat API; --endpoint "
                  "then defaults to /v1/chat/completions)");
  cmd->add_option("--dataset-name", a->dataset_name, "random (the only dataset here)")
      ->capture_default_str();
  cmd->add_option("--model", a->model,
                  "the model (default: the first of /v1/models, its root for the tokenizer)");
  cmd->add_option("--served-model-name", a->served_model_name,
                  "the name requests send (default: --model, or the server's model id)");
  cmd->add_option("--tokenizer", a->tokenizer,
                  "local tokenizer directory for the vocabulary (default: the model id when it "
                  "is a local directory, else the server's /detokenize)");
  cmd->add_option("--api-key", a->api_key, "bearer token (default: $OPENAI_API_KEY)");
  cmd->add_option("--num-prompts", a->num_prompts)->capture_default_str();
  cmd->add_option("--max-concurrency", a->max_concurrency, "requests in flight at most");
  cmd->add_option("--request-rate", a->request_rate,
                  "requests per second (inf: all at once; else Poisson/gamma arrivals)")
      ->capture_default_str();
  cmd->add_option("--burstiness", a->burstiness, "gamma shape of the arrival gaps (1: Poisson)")
      ->capture_default_str();
  cmd->add_option("--random-input-len,--input-len", a->input_len)->capture_default_str();
  cmd->add_option("--random-output-len,--output-len", a->output_len)->capture_default_str();
  cmd->add_option("--random-prefix-len", a->prefix_len,
                  "random tokens every prompt starts with (a shared prefix), before its own")
      ->capture_default_str();
  cmd->add_option("--random-mm-base-items-per-request", a->mm_items,
                  "images per chat request (vLLM's random-mm): uniform noise, JPEG data URLs")
      ->capture_default_str();
  cmd->add_option("--random-mm-image-size", a->mm_image_size,
                  "their size HxW (vLLM: --random-mm-bucket-config '{(H, W, 1): 1.0}')")
      ->capture_default_str();
  cmd->add_option("--random-range-ratio", a->range_ratio, "lengths uniform in [L·(1−r), L·(1+r)]")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed)->capture_default_str();
  cmd->add_flag("--ignore-eos,!--no-ignore-eos", a->ignore_eos,
                "generate exactly the output length (default on, as vLLM's random dataset)");
  cmd->add_option("--temperature", a->temperature, "sampling temperature (0: greedy)")
      ->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "top_p of every request (default: not sent)");
  cmd->add_option("--top-k", a->top_k, "top_k of every request (default: not sent)");
  cmd->add_option("--min-p", a->min_p, "min_p of every request (default: not sent)");
  cmd->add_option("--frequency-penalty", a->frequency_penalty,
                  "frequency_penalty of every request (default: not sent)");
  cmd->add_option("--presence-penalty", a->presence_penalty,
                  "presence_penalty of every request (default: not sent)");
  cmd->add_option("--repetition-penalty", a->repetition_penalty,
                  "repetition_penalty of every request (default: not sent)");
  cmd->add_option("--logprobs", a->logprobs,
                  "log-probs per output token of every request (default: not sent)");
  cmd->add_option("--header", a->headers, "KEY=VALUE header sent with every request (repeatable)");
  cmd->add_option("--request-id-prefix", a->request_id_prefix,
                  "x-request-id of each request: the prefix and the request's index");
  cmd->add_option("--num-warmups", a->num_warmups, "untimed requests sent before the run")
      ->capture_default_str();
  cmd->add_option("--metadata", a->metadata, "KEY=VALUE pairs written into the result JSON");
  cmd->add_flag("--append-result", a->append_result, "append to the result file");
  cmd->add_flag("--insecure", a->insecure,
                "an https:// server's certificate is not checked (a self-signed one)");
  // vLLM flags that change nothing here: a progress bar, Python tokenizer loading.
  for (const char* flag : {"--disable-tqdm", "--trust-remote-code", "--skip-tokenizer-init"}) {
    cmd->add_flag(flag)->description("accepted for vllm bench serve's command lines; no effect");
  }
  cmd->add_option("--tokenizer-mode", "accepted for vllm bench serve's command lines; no effect");
  cmd->add_option("--extra-body", a->extra_body,
                  "JSON object merged into every request body (its keys win over the flags')");
  cmd->add_option("--percentile-metrics", a->percentile_metrics,
                  "metrics to report statistics of: ttft,tpot,itl,e2el")
      ->capture_default_str();
  cmd->add_option("--metric-percentiles", a->metric_percentiles, "e.g. 25,50,75,99")
      ->capture_default_str();
  cmd->add_option("--goodput", a->goodput, "SLOs as KEY:MS (ttft, tpot, e2el)");
  cmd->add_flag("--save-result", a->save_result, "write the result JSON");
  cmd->add_flag("--save-detailed", a->save_detailed,
                "include per-request lengths, TTFTs, ITLs, texts and errors in the JSON");
  cmd->add_option("--result-dir", a->result_dir);
  cmd->add_option(
      "--result-filename", a->result_filename,
      "result JSON file (default: {label}-{rate}qps[-concurrency{n}]-{model}-{date}.json)");
  cmd->add_option("--label", a->label, "result label (default: openai or openai-chat)");
  cmd->add_option("--ready-check-timeout-sec", a->ready_check_timeout,
                  "keep retrying while the server is not up yet, this long")
      ->capture_default_str();
  cmd->callback([a, exit_code, endpoint] {
    a->endpoint_given = endpoint->count() > 0;
    *exit_code = RunServeBench(*a);
  });
}

}  // namespace cpm
