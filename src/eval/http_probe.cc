// cpp-httplib client calls against 127.0.0.1, one connection per call.
#include "eval/http_probe.h"

#include <httplib.h>

#include <chrono>

namespace cpm {
namespace {

void Authorize(httplib::Client& c, const std::string& bearer) {
  if (!bearer.empty()) c.set_bearer_token_auth(bearer);
}

void SetTimeouts(httplib::Client& c, double seconds) {
  const auto ms = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  c.set_connection_timeout(ms);
  c.set_read_timeout(ms);
  c.set_write_timeout(std::chrono::seconds(10));
}

HttpReply FromResult(const httplib::Result& r, std::chrono::steady_clock::time_point t0) {
  HttpReply out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) {
    out.error = httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.body = r->body;
  return out;
}

}  // namespace

HttpReply HttpGet(int port, const std::string& path, double timeout_seconds,
                  const std::string& bearer) {
  httplib::Client c("127.0.0.1", port);
  SetTimeouts(c, timeout_seconds);
  Authorize(c, bearer);
  const auto t0 = std::chrono::steady_clock::now();
  return FromResult(c.Get(path), t0);
}

HttpReply HttpPostJson(int port, const std::string& path, const std::string& json_body,
                       double timeout_seconds, const std::string& bearer) {
  httplib::Client c("127.0.0.1", port);
  SetTimeouts(c, timeout_seconds);
  Authorize(c, bearer);
  const auto t0 = std::chrono::steady_clock::now();
  return FromResult(c.Post(path, json_body, "application/json"), t0);
}

}  // namespace cpm
