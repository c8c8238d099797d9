// Prometheus metrics with vLLM's names (`vllm:*`, labels engine and model_name): request-level
// histograms and counters observed by the HTTP handlers, plus the engine's gauges and counters
// read from an EngineStats snapshot when /metrics is scraped. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "multimodal/encoder_cache.h"

namespace cpm {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  // A histogram counted elsewhere: `counts` per bucket (not cumulative, the last +Inf).
  Histogram(std::vector<double> upper_bounds, std::vector<uint64_t> counts, double sum);
  void Observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, not cumulative
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // bounds_.size() + 1 (the last is +Inf)
  uint64_t count_ = 0;
  double sum_ = 0;
};

// One finished engine request (one choice), as the handler saw it (vLLM's
// FinishedRequestStats). Requests their clients abandoned are none, as
// in vLLM, whose output processor drops an aborted request's state without them; their first
// token and inter-token latencies were observed as they came.
struct RequestObservation {
  std::string finish_reason;  // stop | length | error
  double e2e_s = 0;           // arrival -> finish
  double queue_s = 0;         // engine arrival -> first scheduled
  // The engine's phases (engine.h RequestTimes); < 0: the request produced no token.
  double prefill_s = -1;    // first scheduled -> first token
  double decode_s = -1;     // first token -> last token
  double inference_s = -1;  // first scheduled -> last token (RUNNING)
  // The mean gap between its tokens after the first (0 for one token or none, as vLLM's
  // mean_time_per_output_token).
  double time_per_output_token_s = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int64_t max_tokens = 0;
};

class ServerMetrics {
 public:
  ServerMetrics(std::string model_name, int64_t max_model_len);

  // As vLLM's IterationStats observe them: a request's first token when it comes (arrival ->
  // first token), and each later token event's gap from the one before.
  void ObserveFirstToken(double ttft_s);
  void ObserveInterTokenLatency(double seconds);
  void Observe(const RequestObservation& obs);
  // A prompt whose n choices have all finished (vLLM's parent request): n and the most tokens
  // one of them generated.
  void ObservePrompt(int64_t n, int64_t max_generation_tokens);
  // vllm:cache_config_info's labels (vLLM's CacheConfig fields, as Python prints them).
  void SetCacheConfigInfo(std::vector<std::pair<std::string, std::string>> labels);
  // The exposition text, with the engine's gauges/counters from `stats` and the multimodal
  // cache's counters from `mm` (0 without one).
  std::string Render(const EngineStats& stats, const EncoderCacheStats& mm = {}) const;

 private:
  std::string Labels(const std::string& extra = "") const;

  std::string model_name_;
  mutable std::mutex mu_;
  std::map<std::string, uint64_t> success_;  // finished_reason -> count
  Histogram ttft_;
  Histogram itl_;
  Histogram tpot_;
  Histogram e2e_;
  Histogram queue_;
  Histogram prefill_;
  Histogram decode_;
  Histogram inference_;
  Histogram prompt_tokens_;
  Histogram generation_tokens_;
  Histogram max_tokens_;
  Histogram params_n_;
  Histogram max_generation_tokens_;
  std::vector<std::pair<std::string, std::string>> cache_config_;
};

// Prometheus label value escaping (\, ", newline).
std::string EscapeLabel(const std::string& v);
// A float as Python's str() (and so the Prometheus client) prints it: integers keep a ".0".
std::string PythonFloat(double v);
// 1, 2, 5, 10, 20, 50, ... up to `max` (vLLM's build_1_2_5_buckets).
std::vector<double> Buckets125(int64_t max);

}  // namespace cpm
