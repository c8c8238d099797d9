// prometheus-fastapi-instrumentator's default HTTP series (see http_metrics.h).
#include "server/http_metrics.h"

#include <fmt/format.h>

namespace cpm {
namespace {

bool Excluded(const std::string& handler) {
  for (const char* h : {"/metrics", "/health", "/load", "/ping", "/version", "/server_info"}) {
    if (handler == h) return true;
  }
  return false;
}

}  // namespace

void HttpMetrics::Observe(const std::string& handler, const std::string& method, int status,
                          double seconds, uint64_t request_bytes, uint64_t response_bytes) {
  if (Excluded(handler)) return;
  const std::string group = std::to_string(status / 100) + "xx";
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_[{handler, method, group}];
  Summary& in = request_size_[handler];
  ++in.count;
  in.sum += static_cast<double>(request_bytes);
  Summary& out = response_size_[handler];
  ++out.count;
  out.sum += static_cast<double>(response_bytes);
  duration_.try_emplace({handler, method}, std::vector<double>{0.1, 0.5, 1.0})
      .first->second.Observe(seconds);
  duration_highr_.Observe(seconds);
}

std::string HttpMetrics::Render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  const auto header = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  const auto histogram = [&](const char* name, const std::string& labels, const Histogram& h) {
    uint64_t cum = 0;
    const std::string sep = labels.empty() ? "" : ",";
    for (size_t i = 0; i <= h.bounds().size(); ++i) {
      cum += h.counts()[i];
      const std::string le = i < h.bounds().size() ? PythonFloat(h.bounds()[i]) : "+Inf";
      out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, le,
                         PythonFloat(static_cast<double>(cum)));
    }
    const std::string braces = labels.empty() ? "" : "{" + labels + "}";
    out += fmt::format("{}_count{} {}\n", name, braces, PythonFloat(static_cast<double>(h.count())));
    out += fmt::format("{}_sum{} {}\n", name, braces, PythonFloat(h.sum()));
  };
  header("http_requests_total", "counter", "Total number of requests by method, status and handler.");
  for (const auto& [key, n] : requests_) {
    const auto& [handler, method, status] = key;
    out += fmt::format("http_requests_total{{handler=\"{}\",method=\"{}\",status=\"{}\"}} {}\n",
                       EscapeLabel(handler), method, status, PythonFloat(static_cast<double>(n)));
  }
  const auto summary = [&](const char* name, const char* help,
                           const std::map<std::string, Summary>& by_handler) {
    header(name, "summary", help);
    for (const auto& [handler, s] : by_handler) {
      out += fmt::format("{}_count{{handler=\"{}\"}} {}\n", name, EscapeLabel(handler),
                         PythonFloat(static_cast<double>(s.count)));
      out += fmt::format("{}_sum{{handler=\"{}\"}} {}\n", name, EscapeLabel(handler),
                         PythonFloat(s.sum));
    }
  };
  summary("http_request_size_bytes",
          "Content length of incoming requests by handler. Only value of header is respected. "
          "Otherwise ignored. No percentile calculated. ",
          request_size_);
  summary("http_response_size_bytes",
          "Content length of outgoing responses by handler. Only value of header is respected. "
          "Otherwise ignored. No percentile calculated. ",
          response_size_);
  header("http_request_duration_highr_seconds", "histogram",
         "Latency with many buckets but no API specific labels. Made for more accurate "
         "percentile calculations. ");
  histogram("http_request_duration_highr_seconds", "", duration_highr_);
  header("http_request_duration_seconds", "histogram",
         "Latency with only few buckets by handler. Made to be only used if aggregation by "
         "handler is important. ");
  for (const auto& [key, h] : duration_) {
    histogram("http_request_duration_seconds",
              fmt::format("handler=\"{}\",method=\"{}\"", EscapeLabel(key.first), key.second), h);
  }
  return out;
}

}  // namespace cpm
