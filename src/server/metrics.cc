// Prometheus text exposition of vLLM-named metrics.
#include "server/metrics.h"

#include <fmt/format.h>

#include <algorithm>

namespace cpm {

namespace {
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                          0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                          20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
const std::vector<double> kTokenLatencyBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                  0.3,  0.4,   0.5,  0.75,  1.0, 2.5,  5.0,
                                                  7.5,  10.0,  20.0, 40.0,  80.0};
const std::vector<double> kRequestLatencyBuckets = {0.3,  0.5,  0.8,   1.0,   1.5,   2.0,  2.5,
                                                    5.0,  10.0, 15.0,  20.0,  30.0,  40.0, 50.0,
                                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0,
                                                    7680.0};
const char* const kFinishReasons[] = {"stop", "length", "abort", "error"};

}  // namespace

std::string PythonFloat(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEni") == std::string::npos) s += ".0";
  return s;
}

std::vector<double> Buckets125(int64_t max) {
  std::vector<double> out;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      const int64_t v = m * scale;
      if (v > max) return out;
      out.push_back(static_cast<double>(v));
    }
    if (scale > INT64_MAX / 100) return out;
  }
}

std::string EscapeLabel(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

Histogram::Histogram(std::vector<double> upper_bounds, std::vector<uint64_t> counts, double sum)
    : bounds_(std::move(upper_bounds)), counts_(std::move(counts)), sum_(sum) {
  counts_.resize(bounds_.size() + 1, 0);
  for (uint64_t c : counts_) count_ += c;
}

void Histogram::Observe(double v) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  ++counts_[i];
  ++count_;
  sum_ += v;
}

ServerMetrics::ServerMetrics(std::string model_name, int64_t max_model_len)
    : model_name_(std::move(model_name)),
      ttft_(kTtftBuckets),
      itl_(kTokenLatencyBuckets),
      tpot_(kTokenLatencyBuckets),
      e2e_(kRequestLatencyBuckets),
      queue_(kRequestLatencyBuckets),
      prefill_(kRequestLatencyBuckets),
      decode_(kRequestLatencyBuckets),
      inference_(kRequestLatencyBuckets),
      prompt_tokens_(Buckets125(max_model_len)),
      generation_tokens_(Buckets125(max_model_len)),
      max_tokens_(Buckets125(max_model_len)),
      params_n_({1, 2, 5, 10, 20}),
      max_generation_tokens_(Buckets125(max_model_len)) {
  for (const char* r : kFinishReasons) success_[r] = 0;
}

void ServerMetrics::ObserveFirstToken(double ttft_s) {
  std::lock_guard<std::mutex> lock(mu_);
  ttft_.Observe(ttft_s);
}

void ServerMetrics::ObserveInterTokenLatency(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  itl_.Observe(seconds);
}

void ServerMetrics::Observe(const RequestObservation& o) {
  std::lock_guard<std::mutex> lock(mu_);
  ++success_[o.finish_reason];
  tpot_.Observe(o.time_per_output_token_s);
  e2e_.Observe(o.e2e_s);
  queue_.Observe(o.queue_s);
  if (o.prefill_s >= 0) prefill_.Observe(o.prefill_s);
  if (o.decode_s >= 0) decode_.Observe(o.decode_s);
  if (o.inference_s >= 0) inference_.Observe(o.inference_s);
  prompt_tokens_.Observe(static_cast<double>(o.prompt_tokens));
  generation_tokens_.Observe(static_cast<double>(o.generation_tokens));
  max_tokens_.Observe(static_cast<double>(o.max_tokens));
}

void ServerMetrics::ObservePrompt(int64_t n, int64_t max_generation_tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  params_n_.Observe(static_cast<double>(n));
  max_generation_tokens_.Observe(static_cast<double>(max_generation_tokens));
}

void ServerMetrics::SetCacheConfigInfo(std::vector<std::pair<std::string, std::string>> labels) {
  std::lock_guard<std::mutex> lock(mu_);
  cache_config_ = std::move(labels);
}

std::string ServerMetrics::Labels(const std::string& extra) const {
  std::string l = "engine=\"0\"";
  if (!extra.empty()) l += "," + extra;
  return "{" + l + ",model_name=\"" + EscapeLabel(model_name_) + "\"}";
}

std::string ServerMetrics::Render(const EngineStats& s, const EncoderCacheStats& mm) const {
  std::string out;
  auto header = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    header(name, "gauge", help);
    out += fmt::format("{}{} {}\n", name, Labels(), PythonFloat(v));
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(name, "counter", help);
    out += fmt::format("{}_total{} {}\n", name, Labels(), PythonFloat(v));
  };
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i <= h.bounds().size(); ++i) {
      cum += h.counts()[i];
      const std::string le = i < h.bounds().size() ? PythonFloat(h.bounds()[i]) : "+Inf";
      out += fmt::format("{}_bucket{} {}\n", name, Labels("le=\"" + le + "\""), PythonFloat(cum));
    }
    out += fmt::format("{}_count{} {}\n", name, Labels(), PythonFloat(h.count()));
    out += fmt::format("{}_sum{} {}\n", name, Labels(), PythonFloat(h.sum()));
  };

  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        s.num_running);
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        s.num_waiting);
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
        s.kv_cache_usage);
  counter("vllm:prefix_cache_queries",
          "Prefix cache queries, in terms of number of queried tokens.", s.prefix_cache_queries);
  counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
          s.prefix_cache_hits);
  // vLLM registers these for every engine: no KV connector shares blocks across instances here
  // (0); the multimodal cache's count media items (0 without a vision tower or with
  // --mm-processor-cache-gb 0).
  counter("vllm:external_prefix_cache_queries",
          "External prefix cache queries from KV connector cross-instance cache sharing, in "
          "terms of number of queried tokens.",
          0);
  counter("vllm:external_prefix_cache_hits",
          "External prefix cache hits from KV connector cross-instance cache sharing, in terms "
          "of number of cached tokens.",
          0);
  counter("vllm:mm_cache_queries",
          "Multi-modal cache queries, in terms of number of queried items.", mm.queries);
  counter("vllm:mm_cache_hits", "Multi-modal cache hits, in terms of number of cached items.",
          mm.hits);
  counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
          s.num_preemptions);
  counter("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total);
  counter("vllm:generation_tokens", "Number of generation tokens processed.",
          s.generation_tokens_total);
  // vLLM's SpecDecodingProm exports nothing without a speculative config, and every position's
  // counter from the start; position is its last label (after model_name).
  if (s.spec_decode_enabled) {
    counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", s.spec_num_drafts);
    counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.",
            s.spec_num_draft_tokens);
    counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.",
            s.spec_num_accepted_tokens);
    header("vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
           "Accepted tokens per draft position.");
    for (size_t p = 0; p < s.spec_num_accepted_per_pos.size(); ++p) {
      std::string labels = Labels();
      labels.insert(labels.size() - 1, ",position=\"" + std::to_string(p) + "\"");
      out += fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{} {}\n", labels,
                         PythonFloat(static_cast<double>(s.spec_num_accepted_per_pos[p])));
    }
  }

  {
    const auto& it = s.iteration_tokens;
    histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
              Histogram(std::vector<double>(it.kBounds.begin(), it.kBounds.end()),
                        std::vector<uint64_t>(it.counts.begin(), it.counts.end()),
                        static_cast<double>(it.sum)));
  }

  std::lock_guard<std::mutex> lock(mu_);
  if (!cache_config_.empty()) {
    // An info metric: a gauge fixed at 1 whose labels carry the configuration (vLLM's).
    header("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
    std::string labels;
    for (const auto& [key, value] : cache_config_) {
      labels += fmt::format("{}=\"{}\",", key, EscapeLabel(value));
    }
    out += fmt::format("vllm:cache_config_info{{{}engine=\"0\"}} 1.0\n", labels);
  }
  header("vllm:request_success", "counter", "Count of successfully processed requests.");
  for (const auto& [reason, count] : success_) {
    out += fmt::format("vllm:request_success_total{} {}\n",
                       Labels("finished_reason=\"" + EscapeLabel(reason) + "\""), PythonFloat(count));
  }
  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
            ttft_);
  histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
            itl_);
  histogram("vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds (deprecated name of the inter-token "
            "latency).",
            itl_);
  histogram("vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.", tpot_);
  histogram("vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.", e2e_);
  histogram("vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.", queue_);
  histogram("vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.", inference_);
  histogram("vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.", prefill_);
  histogram("vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.", decode_);
  histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
            prompt_tokens_);
  histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
            generation_tokens_);
  histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
            max_tokens_);
  histogram("vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            max_generation_tokens_);
  histogram("vllm:request_params_n", "Histogram of the n request parameter.", params_n_);
  return out;
}

}  // namespace cpm
