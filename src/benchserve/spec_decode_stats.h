// The speculative-decoding section of `cpmserve bench serve`'s report, as `vllm bench serve`
// prints it: the server's spec_decode counters (Prometheus text from GET /metrics) read before
// and after the run, and their differences as acceptance rate and length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cpm::benchserve {

struct SpecDecodeCounters {
  double drafts = 0;           // vllm:spec_decode_num_drafts_total
  double draft_tokens = 0;     // vllm:spec_decode_num_draft_tokens_total
  double accepted_tokens = 0;  // vllm:spec_decode_num_accepted_tokens_total
  // vllm:spec_decode_num_accepted_tokens_per_pos_total by its position label (summed over the
  // other labels); empty when the server has none.
  std::vector<double> accepted_per_pos;
};

// Sum over label sets of the samples of counter `name` ("<name>{labels} value" or
// "<name> value"); 0 when the text has none.
double PrometheusSum(const std::string& text, const std::string& name);

SpecDecodeCounters ReadSpecDecodeCounters(const std::string& metrics_text);

struct SpecDecodeSummary {
  int64_t drafts = 0, draft_tokens = 0, accepted_tokens = 0;
  double acceptance_rate = 0;    // accepted / draft tokens, in percent
  double acceptance_length = 0;  // 1 + accepted / drafts: tokens a verification step yields
  // The fraction (not percent: vLLM's result file keeps fractions) of drafts whose token there
  // stood.
  std::vector<double> per_position_rates;
};

// after − before; drafts == 0 when the server drafted nothing (or has no such counters).
SpecDecodeSummary Summarize(const SpecDecodeCounters& before, const SpecDecodeCounters& after);

}  // namespace cpm::benchserve
