// The client-side serving metrics of `cpmserve bench serve`, defined as vLLM's `vllm bench serve`
// defines them (vllm/benchmarks/serve.py, calculate_metrics), from per-request timings:
//   TTFT  send → first streamed chunk that carries a choice;
//   TPOT  per request with more than one output token: (E2EL − TTFT) / (output tokens − 1);
//   ITL   every gap between consecutive streamed chunks, pooled over requests (a chunk may hold
//         more than one token);
//   E2EL  send → last streamed chunk;
//   throughputs over the whole benchmark duration (completed requests, output tokens, input +
//   output tokens); goodput = requests meeting every given SLO, per second.
// Statistics as numpy computes them: mean, median, population std, linear-interpolated
// percentiles; an empty sample gives 0 everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace cpm::benchserve {

// What one request produced, times in seconds.
struct RequestOutput {
  bool success = false;
  std::string error;
  int64_t prompt_len = 0;     // input tokens sent
  int64_t output_tokens = 0;  // usage.completion_tokens (0: the server sent no usage)
  double start_time = 0;      // when the request was sent (any common clock)
  double ttft = 0;
  double latency = 0;       // E2EL
  std::vector<double> itl;  // gaps between consecutive chunks after the first
  std::string generated_text;
  int64_t chunks = 0;  // streamed chunks that carried a choice
};

// mean / median / std / chosen percentiles of one metric, in milliseconds.
struct MetricStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0;
  std::vector<std::pair<double, double>> percentiles_ms;  // (p, value)
};

struct BenchmarkMetrics {
  int64_t completed = 0;
  int64_t failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  double request_throughput = 0;      // completed / duration
  double request_goodput = 0;         // requests meeting all SLOs / duration
  double output_throughput = 0;       // output tokens / duration
  double total_token_throughput = 0;  // (input + output tokens) / duration
  MetricStats ttft, tpot, itl, e2el;
  double max_output_tokens_per_s = 0;   // busiest one-second bucket of streamed chunks
  int64_t max_concurrent_requests = 0;  // most requests in flight at the same time
  std::vector<int64_t> output_lens;     // per request (0 for failed ones)
};

// Arithmetic mean.
double Mean(const std::vector<double>& x);

// Population standard deviation (numpy's default ddof = 0).
double Std(const std::vector<double>& x);

// numpy.percentile with linear interpolation: rank p/100 · (n − 1) between the sorted values.
double Percentile(std::vector<double> x, double p);

// Mean, median, std and the `pcts` percentiles of `seconds`, in milliseconds.
MetricStats StatsMs(const std::vector<double>& seconds, const std::vector<double>& pcts);

// SLOs in milliseconds by metric name: "ttft", "tpot", "e2el".
using GoodputSlos = std::map<std::string, double>;

// `output_lens_fallback(i)` gives the output token count of a successful request whose server
// sent no usage (vLLM re-tokenizes the generated text); it may be null (then: streamed chunks).
template <typename Fallback>
BenchmarkMetrics CalculateMetrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                  const std::vector<double>& percentiles, const GoodputSlos& slos,
                                  Fallback&& output_lens_fallback) {
  BenchmarkMetrics m;
  std::vector<double> ttfts, tpots, all_tpots, itls, e2els;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RequestOutput& o = outputs[i];
    if (!o.success) {
      m.output_lens.push_back(0);
      ++m.failed;
      continue;
    }
    int64_t out_len = o.output_tokens;
    if (out_len <= 0) out_len = output_lens_fallback(i);
    m.output_lens.push_back(out_len);
    m.total_input += o.prompt_len;
    double tpot = 0;  // requests with at most one token count as 0 for goodput
    if (out_len > 1) {
      tpot = (o.latency - o.ttft) / static_cast<double>(out_len - 1);
      tpots.push_back(tpot);
    }
    all_tpots.push_back(tpot);
    itls.insert(itls.end(), o.itl.begin(), o.itl.end());
    ttfts.push_back(o.ttft);
    e2els.push_back(o.latency);
    ++m.completed;
  }
  for (int64_t n : m.output_lens) m.total_output += n;

  if (!slos.empty()) {
    int64_t good = 0;
    for (size_t r = 0; r < ttfts.size(); ++r) {
      bool ok = true;
      if (auto it = slos.find("ttft"); it != slos.end()) ok = ok && ttfts[r] <= it->second / 1000;
      if (auto it = slos.find("tpot"); it != slos.end())
        ok = ok && all_tpots[r] <= it->second / 1000;
      if (auto it = slos.find("e2el"); it != slos.end()) ok = ok && e2els[r] <= it->second / 1000;
      good += ok ? 1 : 0;
    }
    m.request_goodput = static_cast<double>(good) / duration_s;
  }

  // Busiest second: chunks (first at start + TTFT, then one per ITL gap) bucketed by whole
  // seconds since the earliest successful start; most requests in flight at once: a sweep over
  // the [start, start + latency) intervals (an end before a start at the same time), as vLLM's.
  double t0 = 1e300, t1 = -1e300;
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    t0 = std::min(t0, o.start_time);
    t1 = std::max(t1, o.start_time + o.latency);
  }
  if (m.completed > 0) {
    const int64_t buckets = static_cast<int64_t>(std::ceil(t1 - t0)) + 1;
    std::vector<double> tokens(buckets, 0.0);
    std::vector<std::pair<double, int>> events;
    for (const RequestOutput& o : outputs) {
      if (!o.success) continue;
      double t = o.start_time + o.ttft;
      auto add = [&](double when) {
        const int64_t b = static_cast<int64_t>(when - t0);
        if (b >= 0 && b < buckets) tokens[b] += 1;
      };
      add(t);
      for (double gap : o.itl) add(t += gap);
      events.emplace_back(o.start_time, 1);
      events.emplace_back(o.start_time + o.latency, -1);
    }
    m.max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
    std::sort(events.begin(), events.end());
    int64_t running = 0;
    for (const auto& [when, delta] : events) {
      running += delta;
      m.max_concurrent_requests = std::max(m.max_concurrent_requests, running);
    }
  }

  m.request_throughput = static_cast<double>(m.completed) / duration_s;
  m.output_throughput = static_cast<double>(m.total_output) / duration_s;
  m.total_token_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  m.ttft = StatsMs(ttfts, percentiles);
  m.tpot = StatsMs(tpots, percentiles);
  m.itl = StatsMs(itls, percentiles);
  m.e2el = StatsMs(e2els, percentiles);
  return m;
}

// The same with the streamed chunk count as the fallback.
BenchmarkMetrics CalculateMetrics(const std::vector<RequestOutput>& outputs, double duration_s,
                                  const std::vector<double>& percentiles,
                                  const GoodputSlos& slos = {});

}  // namespace cpm::benchserve
