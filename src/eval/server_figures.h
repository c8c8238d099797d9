// The figures the real-weight gate reports: memory lines of the server's start-up log (as vLLM
// prints them) and samples from its Prometheus /metrics text.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace cpm {

struct StartupFigures {
  std::optional<double> model_gib;        // "Model loading took X GiB and Y seconds"
  std::optional<double> load_seconds;
  std::optional<double> kv_cache_gib;     // "Available KV cache memory: X GiB"
  std::optional<long long> kv_cache_tokens;  // "KV cache size: 1,234 tokens"
  std::optional<double> max_concurrency;  // "Maximum concurrency for N tokens per request: Cx"
  std::optional<long long> max_model_len;    // "Using max model len N"
  std::vector<std::string> lines;         // the matching log lines, verbatim (without prefix)
};

StartupFigures ParseStartupLog(const std::string& log);

// Prometheus text exposition -> sample name (labels dropped) -> value summed over label sets.
// Comment lines and unparsable lines are skipped.
std::map<std::string, double> ParsePrometheus(const std::string& text);

}  // namespace cpm
