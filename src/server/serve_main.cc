// Start-up, readiness and graceful shutdown of `cpmserve serve`.
#include "server/serve_main.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "base/cpu_topology.h"
#include "base/log.h"
#include "base/thread_pool.h"
#include "chat/chat_template.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "hub/model_source.h"
#include "kernels/amx.h"
#include "kernels/matmul.h"
#include "model/config_file.h"
#include "model/registry.h"
#include "server/engine_client.h"
#include "server/generation_defaults.h"
#include "server/handlers.h"
#include "server/http_server.h"
#include "server/memory_budget.h"
#include "server/metrics.h"
#include "server/reasoning_parser.h"
#include "server/server_context.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

namespace {

// A positive integer from vLLM's environment variable `name` (fetch timeouts in seconds,
// VLLM_MAX_N_SEQUENCES); `*value` kept when it is unset or empty.
Status PositiveIntFromEnv(const char* name, const char* what, int64_t* value) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return OkStatus();
  char* end = nullptr;
  errno = 0;
  const long long parsed = std::strtoll(v, &end, 10);
  if (*end != '\0' || parsed < 1 || errno == ERANGE) {
    return InvalidArgument(std::string(name) + ": '" + v + "' is not " + what);
  }
  *value = parsed;
  return OkStatus();
}

// A vLLM boolean environment flag: set when its value, stripped and lower-cased, is "1" or
// "true" (vllm/envs.py).
bool EnvFlagSet(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return false;
  std::string s(v);
  const auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!s.empty() && space(s.back())) s.pop_back();
  s.erase(s.begin(), std::find_if_not(s.begin(), s.end(), space));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s == "1" || s == "true";
}

// Sequences the engine runs at once (each needs a token of the step budget).
int64_t EngineSeqs(const ServeConfig& c) { return std::min(c.max_num_seqs, c.max_num_batched_tokens); }

int Fail(const std::string& message) {
  // One line on stderr, whatever the log level.
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  return 1;
}

// max_position_embeddings of config.json, read before loading (vLLM's derived length).
StatusOr<int64_t> DerivedMaxModelLen(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  auto text = ReadModelConfigText(model_dir);
  if (!text.ok()) return NotFound("model directory '" + model_dir + "': cannot read " + path);
  const auto j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not valid JSON");
  for (const char* key : {"max_position_embeddings", "max_sequence_length", "seq_length"}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_number_integer()) return it->get<int64_t>();
  }
  if (auto t = j.find("text_config"); t != j.end() && t->is_object()) {
    auto it = t->find("max_position_embeddings");
    if (it != t->end() && it->is_number_integer()) return it->get<int64_t>();
  }
  return int64_t{2048};  // vLLM's fallback when the config names no length
}

// SIGINT and SIGTERM: blocked in every thread of the server and taken synchronously.
sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

// The next of StopSignals(), or 0 once `done` is set (checked every 100 ms).
int WaitForStopSignal(const std::atomic<bool>& done) {
  const sigset_t set = StopSignals();
  const timespec tick{0, 100 * 1000 * 1000};
  while (!done.load()) {
    const int sig = sigtimedwait(&set, nullptr, &tick);
    if (sig == SIGINT || sig == SIGTERM) return sig;
  }
  return 0;
}

// The stop signals as the server's main thread sees them (SignalLoop counts them).
struct StopRequests {
  std::atomic<int> received{0};
  std::atomic<bool> loading{true};  // the model is loading: a signal ends the process at once
  std::atomic<bool> done{false};    // the server is down: SignalLoop returns
};

// Takes SIGINT/SIGTERM until `done`. While the model loads, the first ends the process at once
// (vLLM's SIGTERM handler raises out of its engine's start-up; a load can take minutes); after,
// each is counted: the first starts the shutdown, a later one cuts its waits short.
void SignalLoop(StopRequests* stop) {
  while (const int sig = WaitForStopSignal(stop->done)) {
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (stop->loading.load()) {
      CPM_LOG_INFO("Received {} while loading the model, exiting", name);
      spdlog::default_logger()->flush();
      std::_Exit(0);
    }
    const int n = ++stop->received;
    CPM_LOG_INFO("Received {}{}", name, n == 1 ? ", shutting down" : " again");
  }
}

// vLLM's --shutdown-timeout N: after the first signal (new requests answered 503) the
// requests in flight get up to N seconds to finish; the rest are then aborted (the caller
// shuts the engine down), as they are at once with 0. A second signal ends the wait (vLLM
// ignores it; here it is the way out of a long one). Returns the requests still in flight.
size_t Drain(HttpServer& server, int64_t timeout_s, const StopRequests& stop) {
  if (timeout_s <= 0) return server.RequestsInFlight();
  CPM_LOG_INFO("Waiting up to {} s for {} request(s) in flight to finish (--shutdown-timeout)",
               timeout_s, server.RequestsInFlight());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  while (server.RequestsInFlight() > 0 && stop.received.load() == 1 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return server.RequestsInFlight();
}

// Waits until `done()`; a signal after the `seen`-th ends the process instead (a client can
// hold a request open: a body sent a byte at a time), as a second Ctrl-C makes uvicorn quit.
void WaitOrForcedExit(const std::function<bool()>& done, const StopRequests& stop, int seen,
                      HttpServer& server) {
  while (!done()) {
    if (stop.received.load() > seen) {
      CPM_LOG_INFO("Exiting with {} request(s) still in flight", server.RequestsInFlight());
      spdlog::default_logger()->flush();
      std::_Exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// While the model is resolved (a hub download can take minutes, before anything is served): a
// SIGINT or SIGTERM ends the process at once, the partial file left for the next start to
// resume. The signals are blocked in every thread; this one takes them.
class DownloadSignalWatcher {
 public:
  DownloadSignalWatcher()
      : thread_([this] {
          if (const int sig = WaitForStopSignal(done_)) {
            std::fprintf(stderr, "error: received %s while resolving the model; exiting\n",
                         sig == SIGINT ? "SIGINT" : "SIGTERM");
            std::_Exit(1);
          }
        }) {}
  ~DownloadSignalWatcher() {
    done_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

void LogRoutes(const HttpServer& server) {
  for (const auto& [path, methods] : server.ServedRoutes()) {
    CPM_LOG_INFO("Route: {}, Methods: {}", path, methods);
  }
}

// vLLM's LoggingStatLogger line every VLLM_LOG_STATS_INTERVAL seconds (10 unless a positive
// number): at INFO unless this interval and the one before had no throughput (an idle server's
// lines are debug output), so a burst ends with one zero-throughput line; "Preemptions: N" when
// the interval had some; "MM cache hit rate" once an image was looked up.
class ThroughputLogger {
 public:
  ThroughputLogger() {
    if (const char* v = std::getenv("VLLM_LOG_STATS_INTERVAL"); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const double seconds = std::strtod(v, &end);
      if (*end == '\0' && seconds > 0) interval_s_ = seconds;
    }
  }

  void Maybe(const EngineStats& s, const EncoderCacheStats& mm) {
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - last_).count();
    if (dt < interval_s_) return;
    const double prompt_tp = (s.prompt_tokens_total - prompt_) / dt;
    const double gen_tp = (s.generation_tokens_total - gen_) / dt;
    const int64_t preemptions = s.num_preemptions - preemptions_;
    const bool idle = prompt_tp == 0 && gen_tp == 0 && last_prompt_tp_ == 0 && last_gen_tp_ == 0;
    const double hit =
        s.prefix_cache_queries ? 100.0 * s.prefix_cache_hits / s.prefix_cache_queries : 0.0;
    const std::string line = fmt::format(
        "Engine 000: Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} "
        "tokens/s, Running: {} reqs, Waiting: {} reqs, {}GPU KV cache usage: {:.1f}%, Prefix "
        "cache hit rate: {:.1f}%{}",
        prompt_tp, gen_tp, s.num_running, s.num_waiting,
        preemptions > 0 ? fmt::format("Preemptions: {}, ", preemptions) : "",
        100.0 * s.kv_cache_usage, hit,
        mm.queries > 0 ? fmt::format(", MM cache hit rate: {:.1f}%", 100.0 * mm.hits / mm.queries)
                       : "");
    if (idle) {
      CPM_LOG_DEBUG("{}", line);
    } else {
      CPM_LOG_INFO("{}", line);
    }
    LogSpecDecoding(s, dt);
    last_ = now;
    prompt_ = s.prompt_tokens_total;
    gen_ = s.generation_tokens_total;
    preemptions_ = s.num_preemptions;
    last_prompt_tp_ = prompt_tp;
    last_gen_tp_ = gen_tp;
  }

 private:
  double interval_s_ = 10.0;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
  int64_t prompt_ = 0;
  int64_t gen_ = 0;
  int64_t preemptions_ = 0;
  // vLLM's SpecDecodingLogging line after it, for an interval that verified drafts.
  void LogSpecDecoding(const EngineStats& s, double dt) {
    const int64_t drafts = s.spec_num_drafts - spec_drafts_;
    const int64_t drafted = s.spec_num_draft_tokens - spec_draft_tokens_;
    const int64_t accepted = s.spec_num_accepted_tokens - spec_accepted_;
    if (drafts > 0) {
      std::string rates;
      for (size_t p = 0; p < s.spec_num_accepted_per_pos.size(); ++p) {
        const int64_t before = p < spec_per_pos_.size() ? spec_per_pos_[p] : 0;
        rates += fmt::format("{}{:.3f}", p ? ", " : "",
                             static_cast<double>(s.spec_num_accepted_per_pos[p] - before) / drafts);
      }
      CPM_LOG_INFO(
          "SpecDecoding metrics: Mean acceptance length: {:.2f}, Accepted throughput: {:.2f} "
          "tokens/s, Drafted throughput: {:.2f} tokens/s, Accepted: {} tokens, Drafted: {} "
          "tokens, Per-position acceptance rate: {}, Avg Draft acceptance rate: {:.1f}%",
          1.0 + static_cast<double>(accepted) / drafts, accepted / dt, drafted / dt, accepted,
          drafted, rates, drafted > 0 ? 100.0 * accepted / drafted : 0.0);
    }
    spec_drafts_ = s.spec_num_drafts;
    spec_draft_tokens_ = s.spec_num_draft_tokens;
    spec_accepted_ = s.spec_num_accepted_tokens;
    spec_per_pos_ = s.spec_num_accepted_per_pos;
  }

  double last_prompt_tp_ = 0;
  double last_gen_tp_ = 0;
  int64_t spec_drafts_ = 0, spec_draft_tokens_ = 0, spec_accepted_ = 0;
  std::vector<int64_t> spec_per_pos_;
};

struct Loaded {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<EngineClient> client;
  std::unique_ptr<ServerMetrics> metrics;
  std::unique_ptr<ImageProcessor> images;
  ServerContext ctx;
};

// vllm:cache_config_info's labels: the vLLM CacheConfig fields that mean something here, as
// Python's str() prints them (PythonFloat; the KV blocks are "GPU" blocks in vLLM's words, as in
// its logs).
std::vector<std::pair<std::string, std::string>> CacheConfigInfo(const ServeConfig& c,
                                                                 const EngineStats& s) {
  return {{"block_size", std::to_string(c.block_size)},
          {"cache_dtype", c.kv_cache_dtype},
          {"enable_prefix_caching", s.prefix_caching_enabled ? "True" : "False"},
          {"gpu_memory_utilization", PythonFloat(c.gpu_memory_utilization)},
          {"num_cpu_blocks", "None"},
          {"num_gpu_blocks", std::to_string(s.num_total_blocks)}};
}

// Everything between "listening" and "ready". Errors name what failed.
Status LoadAll(ServeConfig c, ThreadPool& pool, const HostMemory& memory, Loaded* out) {
  CPM_ASSIGN_OR_RETURN(int64_t derived, DerivedMaxModelLen(c.model_dir));
  if (!c.enable_chunked_prefill && !c.max_num_batched_tokens_set) {
    // vLLM's default without chunking: room for a whole prompt of max_model_len tokens (the
    // config's length for "auto", which fits memory later and is no longer).
    c.max_num_batched_tokens =
        std::max<int64_t>(c.max_model_len > 0 ? c.max_model_len : derived, 256);
  }
  if (!c.max_num_batched_tokens_set && c.max_num_batched_tokens < c.max_num_seqs) {
    // A step must hold a token of every running sequence: the default budget (256, smaller
    // than vLLM's CPU 2048, see the README) grows to --max-num-seqs rather than refuse it.
    c.max_num_batched_tokens = c.max_num_seqs;
  }
  if (c.max_model_len > derived) {
    const std::string msg = fmt::format(
        "User-specified max_model_len ({}) is greater than the derived max_model_len "
        "(max_position_embeddings={} or model_max_length=None in model's config.json).",
        c.max_model_len, derived);
    const std::string warning =
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses "
        "relative position encoding (RoPE), positions exceeding derived_max_model_len lead to "
        "nan. If the model uses absolute position encoding, positions exceeding "
        "derived_max_model_len will cause a CUDA array out-of-bounds error.";
    if (!EnvFlagSet("VLLM_ALLOW_LONG_MAX_MODEL_LEN")) {
      return InvalidArgument(msg +
                             " To allow overriding this maximum, set the env var "
                             "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. " +
                             warning);
    }
    CPM_LOG_WARN("{} {}", msg, warning);
  }

  auto tokenizer = Tokenizer::Load(c.tokenizer.empty() ? c.model_dir : c.tokenizer);
  if (!tokenizer.ok()) return tokenizer.status().WithPrefix("tokenizer");
  out->tokenizer = std::move(*tokenizer);
  const Tokenizer& tok = *out->tokenizer;

  ServerContext& ctx = out->ctx;
  std::string template_source = tok.chat_template();
  if (!c.chat_template.empty()) {
    auto arg = LoadChatTemplateArg(c.chat_template);
    if (!arg.ok()) return arg.status().WithPrefix("--chat-template");
    template_source = *arg;
  }
  if (!template_source.empty()) {
    auto parsed = ChatTemplate::Parse(template_source);
    if (!parsed.ok()) {
      if (!c.chat_template.empty()) return parsed.status().WithPrefix("--chat-template");
      CPM_LOG_WARN("The model's chat template does not parse ({}); chat requests will fail",
                   parsed.status().message());
      ctx.chat_template_error = parsed.status().message();
    } else {
      ctx.chat_template = std::move(*parsed);
    }
  }
  ctx.trust_request_chat_template = c.trust_request_chat_template;
  if (c.enable_tokenizer_info_endpoint) {
    CPM_ASSIGN_OR_RETURN(ctx.tokenizer_info,
                         TokenizerInfo(c.tokenizer.empty() ? c.model_dir : c.tokenizer,
                                       c.chat_template.empty() ? std::string() : template_source));
  }
  if (!c.default_chat_template_kwargs_json.empty()) {
    ctx.default_chat_template_kwargs =
        nlohmann::ordered_json::parse(c.default_chat_template_kwargs_json, nullptr, false);
  }

  auto defaults = LoadGenerationDefaults(c.generation_config, c.model_dir);
  if (!defaults.ok()) return defaults.status();
  CPM_RETURN_IF_ERROR(ApplyGenerationOverrides(c.override_generation_config_json, &*defaults));
  ctx.generation_defaults = *defaults;
  if (!defaults->empty()) {
    CPM_LOG_WARN(
        "Default sampling parameters have been overridden by the model's Hugging Face "
        "generation config recommended from the model creator. If this is not intended, please "
        "relaunch vLLM instance with `--generation-config vllm`.");
    CPM_LOG_INFO("Using default chat sampling params from model: {}", defaults->ToPythonDict());
    CPM_LOG_INFO("Using default completion sampling params from model: {}",
                 defaults->ToPythonDict());
  }

  LoadOptions lo;
  lo.show_progress = true;
  lo.model_dir = c.model_dir;
  lo.max_model_len = c.max_model_len > 0 ? c.max_model_len : 0;
  lo.threads = c.threads;
  CPM_RETURN_IF_ERROR(ParseLoadChoices(c.load_format, c.dtype, c.quantization, &lo));
  const auto t0 = std::chrono::steady_clock::now();
  auto model = LoadModel(lo, pool);
  if (!model.ok()) return model.status();
  ModelInfo info = (*model)->info();
  CPM_RETURN_IF_ERROR(CheckKvCacheDtype(c.kv_cache_dtype, ToString(info.dtype)));
  CPM_ASSIGN_OR_RETURN(std::shared_ptr<VisionEncoder> vision, LoadVisionEncoder(lo, info, pool));
  if (vision) {
    MediaOptions media;
    media.allowed_local_media_path = c.allowed_local_media_path;
    for (const std::string& d : c.allowed_media_domains) {
      std::string lower = d;  // hosts compare case-insensitively, as URL hostnames are lowered
      for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      media.allowed_media_domains.push_back(std::move(lower));
    }
    CPM_RETURN_IF_ERROR(ApplyMediaIoKwargs(c.media_io_kwargs_json, &media));
    CPM_RETURN_IF_ERROR(PositiveIntFromEnv("VLLM_IMAGE_FETCH_TIMEOUT", "a number of seconds",
                                           &media.fetch_timeout_s));
    CPM_RETURN_IF_ERROR(PositiveIntFromEnv("VLLM_VIDEO_FETCH_TIMEOUT", "a number of seconds",
                                           &media.video_fetch_timeout_s));
    if (const char* v = std::getenv("VLLM_MEDIA_URL_ALLOW_REDIRECTS"); v != nullptr) {
      media.follow_redirects = EnvFlagSet("VLLM_MEDIA_URL_ALLOW_REDIRECTS");  // vLLM: "1"/"true"
    }
    CPM_ASSIGN_OR_RETURN(out->images,
                         ImageProcessor::Create(c.model_dir, vision, media, c.mm_processor_kwargs_json));
    CPM_RETURN_IF_ERROR(out->images->CheckTokenIds(c.model_dir, info.vocab_size));
    info.weight_bytes += vision->weight_bytes();
    // Host memory beside the KV share, as vLLM's processor cache is: it fills only as new
    // images come, ~256 KiB of rows per 448x448 slice.
    // (Any size past int64 is no bound at all: clamped before the conversion.)
    const auto cache_bytes =
        static_cast<int64_t>(std::min(c.mm_processor_cache_gb * (1ll << 30), 9e18));
    if (cache_bytes > 0) out->images->SetEncoderCache(std::make_shared<EncoderCache>(cache_bytes));
    const SliceConfig& sc = out->images->slice_config();
    CPM_LOG_INFO("Vision encoder: {:.4f} GiB of weights; images as a thumbnail plus up to {} slices "
                 "of about {}x{} pixels ({} image tokens per {}x{} slice), encoded on the engine "
                 "thread one encoder layer per step; {}", ToGiB(vision->weight_bytes()),
                 sc.slice_mode ? sc.max_slice_nums : 0, sc.scale_resolution, sc.scale_resolution,
                 SliceTokens({sc.scale_resolution, sc.scale_resolution}, sc), sc.scale_resolution,
                 sc.scale_resolution,
                 cache_bytes > 0 ? fmt::format("up to {:.2f} GiB of outputs kept for images sent "
                                               "again (--mm-processor-cache-gb)",
                                               ToGiB(cache_bytes))
                                 : std::string("no cache (--mm-processor-cache-gb 0)"));
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CPM_LOG_INFO("Model loading took {:.4f} GiB and {:.6f} seconds", ToGiB(info.weight_bytes),
               load_s);
  const CpuTopology& cpus = MachineCpuTopology();
  CPM_LOG_INFO("Compute: {} threads ({} physical cores in {} allowed CPUs); matmul {}",
               pool.num_threads(), cpus.core_cpus.size(), cpus.allowed.size(),
               kernels::MatMulDescription());

  KvBudgetInput in;
  in.memory = memory;
  in.utilization = c.gpu_memory_utilization;
  in.utilization_explicit = c.gpu_memory_utilization_set;
  in.kv_cache_memory_bytes = c.kv_cache_memory_bytes;
  in.weight_bytes = info.weight_bytes;
  // No profiling run on a CPU: a generous estimate of one full step's activations (hidden
  // states and MLP intermediates in f32 for the token budget) plus the sampled logits and a
  // step's prompt log-prob rows (kPromptLogprobsChunk at most).
  in.activation_bytes =
      c.max_num_batched_tokens * info.hidden_size * 4 * 16 +
      (std::min(c.max_num_seqs, c.max_num_batched_tokens) * 2 + kPromptLogprobsChunk) *
          info.vocab_size * 4;
  in.kv_bytes_per_block = KvCache::BytesPerBlock(info.kv, c.block_size, info.dtype);
  in.block_size = c.block_size;
  in.max_model_len = c.max_model_len;
  in.derived_max_model_len = derived;
  in.max_num_seqs = c.max_num_seqs;
  const int64_t num_state_slots = info.state_slot_bytes > 0 ? EngineSeqs(c) : 0;
  // Speculative decoding keeps copies of the drafting sequences' states (ngram_proposer.h).
  CPM_ASSIGN_OR_RETURN(const SpeculativeConfig spec, ParseSpeculativeConfig(c.speculative_config_json));
  const int64_t num_state_snapshots =
      num_state_slots > 0 ? SpeculativeStateSnapshots(spec, EngineSeqs(c)) : 0;
  in.state_bytes = (num_state_slots + num_state_snapshots) * info.state_slot_bytes;
  CPM_ASSIGN_OR_RETURN(KvBudget budget, PlanKvBudget(in));
  if (budget.fell_back_to_available) {
    CPM_LOG_WARN("Only {:.2f} GiB of {:.2f} GiB host memory is available; sizing for {:.2f} GiB "
                 "(pass --gpu-memory-utilization or --kv-cache-memory-bytes to choose)",
                 ToGiB(memory.available_bytes), ToGiB(memory.total_bytes),
                 ToGiB(budget.requested_bytes));
  }
  if (num_state_slots > 0) {
    CPM_LOG_INFO("Linear-attention state: {} slots of {:.2f} MiB ({:.2f} GiB), one per running "
                 "sequence{}", num_state_slots, info.state_slot_bytes / (1024.0 * 1024.0),
                 ToGiB(in.state_bytes),
                 num_state_snapshots > 0
                     ? fmt::format(", and {} for the states of drafting sequences before a "
                                   "speculative step", num_state_snapshots)
                     : "");
  }
  // vLLM's line: what the memory share leaves for the cache, before the cap below.
  CPM_LOG_INFO("Available KV cache memory: {:.2f} GiB", ToGiB(budget.available_kv_bytes));
  if (budget.capped) {
    CPM_LOG_INFO("KV cache capped at {} blocks ({:.2f} GiB): more than {} sequences of max model "
                 "len can use",
                 budget.num_blocks, ToGiB(budget.kv_bytes), c.max_num_seqs);
  }
  // vLLM's words, "GPU" included (its CPU backend prints them too): scripts grep them.
  CPM_LOG_INFO("GPU KV cache size: {} tokens", WithThousands(budget.num_tokens));
  CPM_LOG_INFO("Maximum concurrency for {} tokens per request: {:.2f}x",
               WithThousands(budget.max_model_len),
               static_cast<double>(budget.num_tokens) / budget.max_model_len);
  CPM_LOG_INFO("Using max model len {}", budget.max_model_len);
  if (!c.enable_chunked_prefill) {
    CPM_RETURN_IF_ERROR(CheckUnchunkedBudget(c.max_num_batched_tokens, budget.max_model_len));
  }
  if (c.max_num_batched_tokens < c.max_num_seqs) {  // vLLM's SchedulerConfig, after the above
    return InvalidArgument("max_num_batched_tokens (" + std::to_string(c.max_num_batched_tokens) +
                           ") must be greater than or equal to max_num_seqs (" +
                           std::to_string(c.max_num_seqs) + ").");
  }

  const bool priority_scheduling = c.scheduling_policy == "priority";
  EngineConfig ec;
  ec.max_num_seqs = EngineSeqs(c);
  ec.max_num_batched_tokens = c.max_num_batched_tokens;
  ec.enable_chunked_prefill = c.enable_chunked_prefill;
  ec.long_prefill_token_threshold = c.long_prefill_token_threshold;
  ec.priority_policy = priority_scheduling;
  ec.max_model_len = budget.max_model_len;
  ec.block_size = c.block_size;
  ec.num_kv_blocks = budget.num_blocks;
  ec.num_state_slots = num_state_slots;
  ec.enable_prefix_caching = c.enable_prefix_caching;
  ec.seed = c.seed;
  ec.speculative = spec;
  ec.warm_up = true;
  if (out->images && !c.skip_mm_profiling) {
    ec.warm_up_encoder = [images = out->images.get()](ThreadPool& p) -> Status {
      const auto start = std::chrono::steady_clock::now();
      CPM_ASSIGN_OR_RETURN(const PixelSize size, images->WarmUp(p));
      CPM_LOG_INFO("Warm-up: the vision encoder on one {}x{} slice in {:.2f} s", size.height,
                   size.width,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      return OkStatus();
    };
  }
  if (ec.speculative.enabled()) {
    CPM_LOG_INFO("Speculative decoding: ngram, num_speculative_tokens={}, prompt_lookup_min={}, "
                 "prompt_lookup_max={}",
                 ec.speculative.num_speculative_tokens, ec.speculative.prompt_lookup_min,
                 ec.speculative.prompt_lookup_max);
  }
  if (c.enable_chunked_prefill) {
    CPM_LOG_INFO("Chunked prefill is enabled with max_num_batched_tokens={}.",
                 ec.max_num_batched_tokens);
  } else {
    CPM_LOG_INFO("Chunked prefill is disabled: each prompt is prefilled in one step of at most "
                 "max_num_batched_tokens={}.", ec.max_num_batched_tokens);
  }
  if (!c.enable_prefix_caching) CPM_LOG_INFO("Prefix caching is disabled");
  auto engine = Engine::Create(std::move(*model), ec, &pool);
  if (!engine.ok()) return engine.status().WithPrefix("engine");
  out->engine = std::move(*engine);
  out->client = std::make_unique<EngineAdapter>(out->engine.get());

  const std::string& name = c.model_name.empty() ? c.model_dir : c.model_name;
  ctx.model_names = c.served_model_names.empty() ? std::vector<std::string>{name}
                                                 : c.served_model_names;
  ctx.model_root = name;
  ctx.max_model_len = budget.max_model_len;
  ctx.tokenizer = out->tokenizer.get();
  ctx.images = out->images.get();
  CPM_ASSIGN_OR_RETURN(ctx.image_limit, ParseMediaLimit(c.limit_mm_per_prompt_json, "image"));
  CPM_ASSIGN_OR_RETURN(ctx.video_limit, ParseMediaLimit(c.limit_mm_per_prompt_json, "video"));
  ctx.eos_ids = tok.eos_ids();
  for (int32_t id : info.eos_token_ids) {
    if (std::find(ctx.eos_ids.begin(), ctx.eos_ids.end(), id) == ctx.eos_ids.end()) {
      ctx.eos_ids.push_back(id);
    }
  }
  out->metrics = std::make_unique<ServerMetrics>(ctx.served_name(), budget.max_model_len);
  out->metrics->SetCacheConfigInfo(CacheConfigInfo(c, out->engine->Stats()));
  ctx.engine = out->client.get();
  ctx.metrics = out->metrics.get();
  // vLLM needs --reasoning-parser spelled out; MiniCPM-V-4.6 gets its parser by default here
  // ("--reasoning-parser none" turns it off), since its answers carry <think> blocks.
  if (c.enable_auto_tool_choice) {
    ctx.tool_call_parser = c.tool_call_parser;
    CPM_LOG_INFO("\"auto\" tool choice has been enabled: tool calls parsed as {}",
                 c.tool_call_parser);
  }
  if (c.chat_template_content_format == "string") {
    ctx.content_format = jinja::ContentFormat::kString;
  } else if (c.chat_template_content_format == "openai") {
    ctx.content_format = jinja::ContentFormat::kOpenAi;
  }
  if (ctx.chat_template) {
    const char* detected =
        ctx.chat_template->content_format() == jinja::ContentFormat::kOpenAi ? "openai" : "string";
    if (c.chat_template_content_format == "auto") {
      CPM_LOG_INFO("Detected the chat template content format to be '{}'. You can set "
                   "`--chat-template-content-format` to override this.",
                   detected);
    } else if (c.chat_template_content_format != detected) {
      CPM_LOG_WARN("You specified `--chat-template-content-format {}` which is different from "
                   "the detected format '{}'.",
                   c.chat_template_content_format, detected);
    }
  }
  ctx.reasoning_parser = c.reasoning_parser;
  if (ctx.reasoning_parser.empty()) ctx.reasoning_parser = DefaultReasoningParser(info.architecture);
  if (ctx.reasoning_parser == "none") ctx.reasoning_parser.clear();
  // --reasoning-config names thinking_token_budget's texts only; the reply's reasoning field
  // stays --reasoning-parser's, as in vLLM.
  CPM_ASSIGN_OR_RETURN(ctx.reasoning_config, ParseReasoningConfig(c.reasoning_config_json));
  if (!ctx.reasoning_parser.empty()) {
    CPM_LOG_INFO("Reasoning parser: {}{}", ctx.reasoning_parser,
                 c.reasoning_parser.empty() ? " (the model's default)" : "");
    const ReasoningMarkerIds ids = FindReasoningMarkerIds(ctx.reasoning_parser, *ctx.tokenizer);
    if (Status s = CheckReasoningMarkerIds(ctx.reasoning_parser, ids); !s.ok()) {
      CPM_LOG_WARN("{}: every chat request will be refused with it (as vLLM's are)", s.message());
    }
  }
  // Validated with the rest of the config.
  if (const auto so = ParseStructuredOutputsConfig(c.structured_outputs_config_json); so.ok()) {
    ctx.structured_in_reasoning = so->enable_in_reasoning;
    ctx.structured_compact_json = so->disable_any_whitespace;
  }
  ctx.return_tokens_as_token_ids = c.return_tokens_as_token_ids;
  ctx.exclude_tools_when_tool_choice_none = c.exclude_tools_when_tool_choice_none;
  ctx.enable_force_include_usage = c.enable_force_include_usage;
  ctx.max_logprobs = c.max_logprobs < 0 ? info.vocab_size : c.max_logprobs;
  CPM_RETURN_IF_ERROR(PositiveIntFromEnv("VLLM_MAX_N_SEQUENCES", "a positive integer",
                                         &ctx.max_n_sequences));
  CPM_RETURN_IF_ERROR(PositiveIntFromEnv("VLLM_MAX_COMPLETION_PROMPTS", "a positive integer",
                                         &ctx.max_completion_prompts));
  ctx.response_role = c.response_role;
  ctx.request_log = {c.enable_log_requests, c.max_log_len};
  ctx.enable_prompt_tokens_details = c.enable_prompt_tokens_details;
  ctx.priority_scheduling = priority_scheduling;
  ctx.created = std::chrono::duration_cast<std::chrono::seconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  ctx.id_salt = std::random_device{}() * 0x100000001ULL ^ static_cast<uint64_t>(ctx.created);
  return OkStatus();
}

// vLLM's model and tokenizer arguments: a folder, or a hub repository id downloaded into (or
// found in) the Hugging Face cache. Dummy weights need no *.safetensors.
Status ResolveModelFolders(ServeConfig* c) {
  c->model_name = c->model_dir;
  hub::HubOptions o;
  o.revision = c->revision;
  o.download_dir = c->download_dir;
  o.token = c->hf_token;
  o.need_weights = c->load_format != "dummy";
  CPM_ASSIGN_OR_RETURN(c->model_dir, hub::ResolveModelFolder(c->model_dir, o));
  // vLLM's tokenizer is the model unless given, at --tokenizer-revision else --revision.
  const bool own_revision = !c->tokenizer_revision.empty() && c->tokenizer_revision != c->revision;
  if (c->tokenizer.empty() && !own_revision) return OkStatus();
  const std::string tokenizer = c->tokenizer.empty() ? c->model_name : c->tokenizer;
  if (!c->tokenizer_revision.empty()) o.revision = c->tokenizer_revision;
  o.need_weights = false;
  o.need_config = false;  // a tokenizer repository may hold tokenizer files only
  CPM_ASSIGN_OR_RETURN(c->tokenizer, hub::ResolveModelFolder(tokenizer, o));
  return OkStatus();
}

}  // namespace

int RunServe(const ServeConfig& config) {
  ServeConfig c = config;
  if (Status s = ValidateServeConfig(c); !s.ok()) return Fail(s.message());
  if (Status s = SetHfOverrides(c.hf_overrides_json); !s.ok()) return Fail(s.message());
  if (!c.hf_overrides_json.empty()) {
    CPM_LOG_INFO("Overriding HF config with {}", c.hf_overrides_json);
  }
  // Before any other thread exists: every later thread inherits this mask, so only a
  // sigtimedwait (DownloadSignalWatcher's, then SignalLoop's) ever sees the signals. A vanished
  // SSE client must not kill the process.
  const sigset_t stop_signals = StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);
  {
    const DownloadSignalWatcher watcher;  // a hub download takes minutes: a signal ends it
    if (Status s = ResolveModelFolders(&c); !s.ok()) return Fail(s.message());
  }
  // Checked before the port opens, so that a missing or broken model fails at once (vLLM reads
  // the config before its engine starts, its port already bound).
  std::error_code ec;
  if (!std::filesystem::is_directory(c.model_dir, ec)) {
    return Fail("model directory '" + c.model_dir + "' does not exist or is not a directory");
  }
  if (!std::filesystem::exists(std::filesystem::path(c.model_dir) / "config.json", ec)) {
    return Fail("model directory '" + c.model_dir + "': cannot read " +
                (std::filesystem::path(c.model_dir) / "config.json").string());
  }
  if (Status s = CheckModelConfig(c.model_dir); !s.ok()) return Fail(s.message());

  if (!c.api_key_given) {
    if (const char* env = std::getenv("VLLM_API_KEY"); env && *env) c.api_keys = {env};
  }
  if (c.enforce_eager) CPM_LOG_INFO("--enforce-eager: the CPU backend always runs eagerly");
  if (c.trust_remote_code) CPM_LOG_INFO("--trust-remote-code: accepted (no remote code runs)");
  auto memory = ReadHostMemory();
  if (!memory.ok()) return Fail(memory.status().message());

  const int http_threads = c.http_threads > 0 ? c.http_threads : DefaultHttpThreads(c.max_num_seqs);
  if (const auto unused = TlsFlagsWithoutHttps(c.tls); !unused.empty()) {
    CPM_LOG_WARN("{}: ignored without --ssl-certfile (plain HTTP), as vLLM ignores them",
                 fmt::join(unused, ", "));
  }
  std::unique_ptr<httplib::Server> https;
  if (c.tls.enabled()) {
    auto made = MakeTlsServer(c.tls);
    if (!made.ok()) return Fail(made.status().message());
    https = std::move(*made);
  }
  const char* scheme = https ? "https" : "http";
  // An IPv6 address in brackets, as vLLM writes its listen address (http://[::]:8000).
  const std::string url_host = c.host.find(':') != std::string::npos ? "[" + c.host + "]" : c.host;
  HttpServer server(c.api_keys, http_threads, std::move(https));
  // uvicorn logs its access lines at INFO: a quieter --uvicorn-log-level drops them.
  const bool access_level = c.uvicorn_log_level == "info" || c.uvicorn_log_level == "debug" ||
                            c.uvicorn_log_level == "trace";
  if (!c.disable_access_log && access_level) server.EnableAccessLog();
  if (c.enable_request_id_headers) server.EnableRequestIdHeaders();
  server.SetRootPath(c.root_path);
  if (c.disable_fastapi_docs) server.DisableDocs();
  if (c.enable_tokenizer_info_endpoint) server.EnableTokenizerInfo();
  server.SetCors(*CorsFromConfig(c));  // validated with the rest of the config
  if (Status s = server.Bind(c.host, c.port); !s.ok()) return Fail(s.message());
  std::atomic<bool> http_done{false};
  std::thread http([&server, &http_done] {
    server.Run();
    http_done.store(true);
  });
  StopRequests stop;
  std::thread signals(SignalLoop, &stop);
  auto finish = [&](int code) {
    server.Stop();
    http.join();
    stop.done.store(true);
    signals.join();
    return code;
  };
  CPM_LOG_INFO("cpmserve {} listening on {}://{}:{} (loading {})", CPM_SERVER_VERSION, scheme,
               url_host, server.port(), c.model_dir);

  ThreadPool pool(
      ThreadPoolOptions{.num_threads = c.threads, .before_sleep = kernels::ReleaseTiles});
  Loaded loaded;
  const Status load = LoadAll(c, pool, *memory, &loaded);
  stop.loading.store(false);  // from here a signal is counted (a failed load keeps status 1)
  if (!load.ok()) {
    finish(1);
    return Fail(load.message());
  }
  if (stop.received.load() > 0) {
    loaded.engine->Shutdown();
    return finish(0);
  }
  server.SetReady(&loaded.ctx);
  CPM_LOG_INFO("Starting cpmserve API server on {}://{}:{}", scheme, url_host, server.port());
  LogRoutes(server);
  CPM_LOG_INFO("Application startup complete.");

  ThroughputLogger throughput;
  while (stop.received.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (c.disable_log_stats) continue;
    throughput.Maybe(loaded.engine->Stats(), loaded.images ? loaded.images->cache_stats()
                                                           : EncoderCacheStats{});
  }
  // New requests get 503 from here; those in flight run on (for --shutdown-timeout), then
  // end with "abort" and write their last chunk; only then does the listener close (a stream
  // whose handler returns after that would not be sent).
  server.BeginShutdown();
  const size_t left = Drain(server, c.shutdown_timeout, stop);
  const int seen = stop.received.load();
  loaded.engine->Shutdown();
  // Logged once the engine is down: a request whose body comes after this line is refused
  // (503), never queued to be aborted, which the lifecycle tests rely on.
  if (left > 0) CPM_LOG_INFO("Aborting the {} request(s) still in flight", left);
  WaitOrForcedExit([&] { return server.RequestsInFlight() == 0; }, stop, seen, server);
  server.Stop();
  WaitOrForcedExit([&] { return http_done.load(); }, stop, seen, server);
  http.join();
  stop.done.store(true);
  signals.join();
  CPM_LOG_INFO("Shutdown complete");
  return 0;
}

}  // namespace cpm
