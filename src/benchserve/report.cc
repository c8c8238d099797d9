// Flag parsing, table rows and result-JSON keys of `cpmserve bench serve`'s report.
#include "benchserve/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace cpm::benchserve {

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (;;) {
    const size_t comma = s.find(',', begin);
    out.push_back(s.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin));
    if (comma == std::string::npos) return out;
    begin = comma + 1;
  }
}

std::optional<std::vector<double>> ParsePercentiles(const std::string& s) {
  std::vector<double> out;
  for (const std::string& item : SplitCommas(s)) {
    char* end = nullptr;
    const double p = std::strtod(item.c_str(), &end);
    if (item.empty() || *end != '\0' || !(p >= 0) || p > 100) return std::nullopt;
    out.push_back(p);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<std::vector<std::string>> ParseMetricNames(const std::string& s) {
  std::vector<std::string> out;
  for (const std::string& item : SplitCommas(s)) {
    if (item != "ttft" && item != "tpot" && item != "itl" && item != "e2el") return std::nullopt;
    out.push_back(item);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<GoodputSlos> ParseGoodput(const std::vector<std::string>& items) {
  GoodputSlos slos;
  for (const std::string& item : items) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) return std::nullopt;
    const std::string name = item.substr(0, colon), value = item.substr(colon + 1);
    char* end = nullptr;
    const double ms = std::strtod(value.c_str(), &end);
    if ((name != "ttft" && name != "tpot" && name != "e2el") || value.empty() || *end != '\0' ||
        ms < 0) {
      return std::nullopt;
    }
    slos[name] = ms;
  }
  return slos;
}

std::string Center(const std::string& s, char fill, size_t width) {
  // Width in characters: the headings are ASCII.
  if (s.size() >= width) return s;
  const size_t left = (width - s.size()) / 2;
  return std::string(left, fill) + s + std::string(width - s.size() - left, fill);
}

void Row(const std::string& name, int64_t v) {
  std::printf("%-40s %-10lld\n", name.c_str(), static_cast<long long>(v));
}
void Row(const std::string& name, double v) {
  std::printf("%-40s %-10.2f\n", name.c_str(), v);
}

std::string PercentileWord(double p) {
  if (p == std::floor(p)) return std::to_string(static_cast<int64_t>(p));
  std::ostringstream os;
  os << p;
  return os.str();
}

void ReportMetric(const std::vector<std::string>& selected, const std::string& key,
                  const std::string& name, const std::string& header, const MetricStats& m,
                  nlohmann::ordered_json& result) {
  if (std::find(selected.begin(), selected.end(), key) == selected.end()) return;
  std::printf("%s\n", Center(header, '-', 50).c_str());
  Row("Mean " + name + " (ms):", m.mean_ms);
  Row("Median " + name + " (ms):", m.median_ms);
  result["mean_" + key + "_ms"] = m.mean_ms;
  result["median_" + key + "_ms"] = m.median_ms;
  result["std_" + key + "_ms"] = m.std_ms;
  for (const auto& [p, v] : m.percentiles_ms) {
    Row("P" + PercentileWord(p) + " " + name + " (ms):", v);
    result["p" + PercentileWord(p) + "_" + key + "_ms"] = v;
  }
}

std::string RateText(double rate) {
  if (std::isinf(rate)) return "inf";
  std::ostringstream os;
  os << rate;
  std::string s = os.str();
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

}  // namespace cpm::benchserve
