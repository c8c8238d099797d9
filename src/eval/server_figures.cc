// Tolerant parsing: a server whose log changes wording loses a figure, never the gate.
#include "eval/server_figures.h"

#include <cctype>
#include <cstdlib>
#include <sstream>

namespace cpm {
namespace {

// The number that starts at `pos` (digits, '.', ',' as thousands separator); nullopt if none.
std::optional<double> NumberAt(const std::string& s, size_t pos) {
  std::string digits;
  while (pos < s.size() && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '.' ||
                            s[pos] == ',' || (digits.empty() && s[pos] == '-'))) {
    if (s[pos] != ',') digits += s[pos];
    ++pos;
  }
  if (digits.empty() || digits == "-") return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(digits.c_str(), &end);
  if (end == digits.c_str()) return std::nullopt;
  return v;
}

// The number right after `key` in `line`, if the line holds the key.
std::optional<double> After(const std::string& line, const std::string& key) {
  const size_t p = line.find(key);
  if (p == std::string::npos) return std::nullopt;
  return NumberAt(line, p + key.size());
}

}  // namespace

StartupFigures ParseStartupLog(const std::string& log) {
  StartupFigures f;
  std::istringstream in(log);
  std::string line;
  while (std::getline(in, line)) {
    bool hit = false;
    if (auto v = After(line, "Model loading took ")) {
      f.model_gib = v;
      f.load_seconds = After(line, " GiB and ");
      hit = true;
    }
    if (auto v = After(line, "Available KV cache memory: ")) f.kv_cache_gib = v, hit = true;
    if (auto v = After(line, "KV cache size: ")) f.kv_cache_tokens = static_cast<long long>(*v), hit = true;
    if (line.find("Maximum concurrency for ") != std::string::npos) {
      f.max_concurrency = After(line, "per request: ");
      hit = true;
    }
    if (auto v = After(line, "Using max model len ")) f.max_model_len = static_cast<long long>(*v), hit = true;
    if (hit) {
      // Drop the "I 11-30 12:00:00.123 " log prefix: keep the line from its message on.
      std::string text = line;
      for (const char* key : {"Model loading", "Available KV", "KV cache size", "Maximum concurrency", "Using max model"}) {
        const size_t k = line.find(key);
        if (k != std::string::npos) {
          text = line.substr(k);
          break;
        }
      }
      f.lines.push_back(text);
    }
  }
  return f;
}

std::map<std::string, double> ParsePrometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t name_end = line.find_first_of("{ ");
    if (name_end == std::string::npos) continue;
    const std::string name = line.substr(0, name_end);
    size_t value_start = name_end;
    if (line[name_end] == '{') {
      const size_t close = line.find('}', name_end);
      if (close == std::string::npos) continue;
      value_start = close + 1;
    }
    const char* begin = line.c_str() + value_start;
    char* end = nullptr;
    const double v = std::strtod(begin, &end);
    if (end == begin) continue;
    out[name] += v;
  }
  return out;
}

}  // namespace cpm
