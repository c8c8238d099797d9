#include "benchserve/spec_decode_stats.h"

#include <cstdlib>
#include <sstream>

namespace cpm::benchserve {

double PrometheusSum(const std::string& text, const std::string& name) {
  double sum = 0;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, name.size(), name) != 0 || line.size() == name.size()) continue;
    const char next = line[name.size()];
    if (next != '{' && next != ' ') continue;  // another metric with this prefix
    const size_t space = line.rfind(' ');
    sum += std::strtod(line.c_str() + space + 1, nullptr);
  }
  return sum;
}

namespace {

// The samples of `name` by the value of their position="k" label.
std::vector<double> ByPosition(const std::string& text, const std::string& name) {
  std::vector<double> out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.compare(0, name.size() + 1, name + "{") != 0) continue;
    const size_t at = line.find("position=\"", name.size());
    if (at == std::string::npos) continue;
    const size_t pos = std::strtoul(line.c_str() + at + 10, nullptr, 10);
    if (pos >= 64) continue;  // not a draft position
    if (out.size() <= pos) out.resize(pos + 1, 0.0);
    out[pos] += std::strtod(line.c_str() + line.rfind(' ') + 1, nullptr);
  }
  return out;
}

}  // namespace

SpecDecodeCounters ReadSpecDecodeCounters(const std::string& metrics_text) {
  return {PrometheusSum(metrics_text, "vllm:spec_decode_num_drafts_total"),
          PrometheusSum(metrics_text, "vllm:spec_decode_num_draft_tokens_total"),
          PrometheusSum(metrics_text, "vllm:spec_decode_num_accepted_tokens_total"),
          ByPosition(metrics_text, "vllm:spec_decode_num_accepted_tokens_per_pos_total")};
}

SpecDecodeSummary Summarize(const SpecDecodeCounters& before, const SpecDecodeCounters& after) {
  SpecDecodeSummary s;
  s.drafts = static_cast<int64_t>(after.drafts - before.drafts);
  s.draft_tokens = static_cast<int64_t>(after.draft_tokens - before.draft_tokens);
  s.accepted_tokens = static_cast<int64_t>(after.accepted_tokens - before.accepted_tokens);
  if (s.draft_tokens > 0) s.acceptance_rate = 100.0 * s.accepted_tokens / s.draft_tokens;
  if (s.drafts > 0) s.acceptance_length = 1.0 + static_cast<double>(s.accepted_tokens) / s.drafts;
  for (size_t p = 0; s.drafts > 0 && p < after.accepted_per_pos.size(); ++p) {
    const double before_p = p < before.accepted_per_pos.size() ? before.accepted_per_pos[p] : 0;
    s.per_position_rates.push_back((after.accepted_per_pos[p] - before_p) / s.drafts);
  }
  return s;
}

}  // namespace cpm::benchserve
