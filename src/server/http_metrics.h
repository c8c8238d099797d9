// The HTTP series vLLM's /metrics carries beside its own: prometheus-fastapi-instrumentator's
// defaults, which vLLM installs for every route but /metrics, /health, /load, /ping, /version
// and /server_info. http_requests_total{handler,method,status} (status grouped: "2xx"),
// http_request_size_bytes and http_response_size_bytes summaries per handler,
// http_request_duration_highr_seconds (no labels, fine buckets) and
// http_request_duration_seconds{handler,method} (0.1, 0.5, 1 s). `handler` is the route's
// template ("/v1/models/{model_id}"), "none" for a path no route serves. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "server/metrics.h"

namespace cpm {

class HttpMetrics {
 public:
  // One answered request; requests to the routes vLLM leaves out are not counted.
  void Observe(const std::string& handler, const std::string& method, int status,
               double seconds, uint64_t request_bytes, uint64_t response_bytes);
  std::string Render() const;

 private:
  struct Summary {
    uint64_t count = 0;
    double sum = 0;
  };
  mutable std::mutex mu_;
  std::map<std::tuple<std::string, std::string, std::string>, uint64_t> requests_;
  std::map<std::string, Summary> request_size_, response_size_;  // per handler
  std::map<std::pair<std::string, std::string>, Histogram> duration_;  // handler, method
  Histogram duration_highr_{{0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0,
                             2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0}};
};

}  // namespace cpm
