// The flags that pick `cpmserve bench serve`'s statistics and the shape of its report, as
// `vllm bench serve` has them: --percentile-metrics / --metric-percentiles / --goodput parsing,
// the result table's rows ("{:<40} {:<10.2f}"), centred section headings and the result-JSON
// keys of each metric (mean_/median_/std_/p<N>_<metric>_ms).
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "benchserve/serve_metrics.h"

namespace cpm::benchserve {

// "a,,b" → {"a", "", "b"} (empty items kept, so they can be refused).
std::vector<std::string> SplitCommas(const std::string& s);

// "25,50,99" → {25, 50, 99}; nullopt unless every item is a number in [0, 100].
std::optional<std::vector<double>> ParsePercentiles(const std::string& s);

// "ttft,tpot,itl,e2el" or a subset; nullopt on an unknown name.
std::optional<std::vector<std::string>> ParseMetricNames(const std::string& s);

// {"ttft:500", "tpot:50"} → SLOs in ms; nullopt unless each is KEY:MS with KEY one of ttft, tpot,
// e2el and MS a non-negative number.
std::optional<GoodputSlos> ParseGoodput(const std::vector<std::string>& items);

// Python's "{:^50}"-style centring with `fill`.
std::string Center(const std::string& s, char fill, size_t width);

// One row of the result table: "{:<40} {:<10}" for counts, "{:<40} {:<10.2f}" for figures.
void Row(const std::string& name, int64_t v);
void Row(const std::string& name, double v);

// 99 → "99", 99.9 → "99.9" (as vLLM names the P rows and keys).
std::string PercentileWord(double p);

// Prints one metric's block and adds its figures to `result` (vLLM's names and order).
void ReportMetric(const std::vector<std::string>& selected, const std::string& key,
                  const std::string& name, const std::string& header, const MetricStats& m,
                  nlohmann::ordered_json& result);

// A request rate as Python prints a float: inf, 2.0, 0.5.
std::string RateText(double rate);

}  // namespace cpm::benchserve
