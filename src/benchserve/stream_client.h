// One streamed OpenAI request of `cpmserve bench serve`, timed as vLLM's benchmark request
// functions time it (vllm/benchmarks/lib/endpoint_request_func.py): the clock starts when the
// request is sent; TTFT at the first streamed event that carries a choice, an ITL for each later
// one; E2EL at the last such event for /v1/completions, at the last event of any kind (the
// usage event included) for /v1/chat/completions; output tokens from the usage event
// (stream_options.include_usage). cpp-httplib's client, one connection per request.
// Header-only (inline), included by tools/cmd_bench_serve.cc alone.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "benchserve/serve_metrics.h"
#include "benchserve/sse_reader.h"

namespace cpm::benchserve {

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The server: scheme://host:port plus an optional path prefix, and its auth header.
class Server {
 public:
  Server(std::string origin, std::string prefix, std::string api_key)
      : origin_(std::move(origin)), prefix_(std::move(prefix)), api_key_(std::move(api_key)) {}

  std::string Url(const std::string& path) const { return origin_ + prefix_ + path; }
  std::unique_ptr<httplib::Client> Client(double read_timeout_s) const {
    auto c = std::make_unique<httplib::Client>(origin_);
    c->set_connection_timeout(std::chrono::seconds(10));
    c->set_read_timeout(std::chrono::milliseconds(static_cast<int64_t>(read_timeout_s * 1000)));
    c->set_write_timeout(std::chrono::seconds(60));
    return c;
  }
  httplib::Headers Headers() const {
    if (api_key_.empty()) return {};
    return {{"Authorization", "Bearer " + api_key_}};
  }
  const std::string& prefix() const { return prefix_; }

  // Plain calls: status (0 when the server did not answer) and body or error text.
  std::pair<int, std::string> Get(const std::string& path) const {
    auto r = Client(60)->Get(prefix_ + path, Headers());
    if (!r) return {0, httplib::to_string(r.error())};
    return {r->status, r->body};
  }
  std::pair<int, std::string> Post(const std::string& path, const std::string& body) const {
    auto r = Client(600)->Post(prefix_ + path, Headers(), body, "application/json");
    if (!r) return {0, httplib::to_string(r.error())};
    return {r->status, r->body};
  }

 private:
  std::string origin_, prefix_, api_key_;
};

// j[key] when it is a string, else "".
inline std::string StringField(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// An error body's message (OpenAI {"error": {"message": ...}} or vLLM's {"message": ...}).
inline std::string ErrorText(int status, const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  std::string msg = StringField(j.is_object() && j.contains("error") ? j["error"] : j, "message");
  if (msg.empty()) msg = StringField(j, "message");
  if (msg.empty()) msg = body.substr(0, 300);
  return "HTTP " + std::to_string(status) + ": " + msg;
}

enum class Api { kCompletions, kChat };

// Sends one streamed request and times its chunks as vLLM's request functions do: TTFT at the
// first event with a choice, an ITL for each later one, E2EL at the last such event
// (completions) or the last event of any kind (chat, which also counts the usage event).
inline RequestOutput RunRequest(const Server& s, const std::string& endpoint, Api api,
                                const std::string& payload, int64_t prompt_len) {
  RequestOutput out;
  out.prompt_len = prompt_len;
  auto client = s.Client(6 * 3600);
  httplib::Request req;
  req.method = "POST";
  req.path = s.prefix() + endpoint;
  req.headers = s.Headers();
  req.set_header("Content-Type", "application/json");
  req.body = payload;
  int status = 0;
  std::string error_body;
  SseReader sse;
  double last = 0;
  bool first = true;
  auto on_event = [&](const std::string& data, double now) {
    if (data == "[DONE]") return;
    nlohmann::json j = nlohmann::json::parse(data, nullptr, false);
    if (!j.is_object()) {
      out.error = "a streamed event is not JSON: " + data.substr(0, 200);
      return;
    }
    if (j.contains("error")) {
      const std::string msg = StringField(j["error"], "message");
      out.error = "error event: " + (msg.empty() ? j["error"].dump() : msg);
      return;
    }
    const bool has_choice =
        j.contains("choices") && j["choices"].is_array() && !j["choices"].empty();
    if (has_choice) {
      const nlohmann::json& c = j["choices"][0];
      if (first) {
        out.ttft = now - out.start_time;
        first = false;
      } else {
        out.itl.push_back(now - last);
      }
      ++out.chunks;
      const nlohmann::json* text = nullptr;
      if (api == Api::kCompletions && c.contains("text")) text = &c["text"];
      if (api == Api::kChat && c.contains("delta") && c["delta"].contains("content")) {
        text = &c["delta"]["content"];
      }
      if (text && text->is_string()) out.generated_text += text->get<std::string>();
      last = now;
    } else if (j.contains("usage") && j["usage"].is_object()) {
      const auto& n = j["usage"]["completion_tokens"];
      out.output_tokens = n.is_number_integer() ? n.get<int64_t>() : 0;
      if (api == Api::kChat) last = now;
    }
  };
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    const double now = Now();
    if (status != 200) {
      error_body.append(d, n);
      return true;
    }
    for (const std::string& e : sse.Feed(std::string_view(d, n))) on_event(e, now);
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  out.start_time = Now();
  last = out.start_time;
  const bool sent = client->send(req, res, err);
  if (status == 200) {
    for (const std::string& e : sse.Finish()) on_event(e, Now());
  }
  if (!sent && status == 0) {
    out.error = "no answer: " + httplib::to_string(err);
  } else if (!sent && status == 200 && out.error.empty()) {
    out.error = "the stream broke off: " + httplib::to_string(err);
  } else if (status != 200) {
    out.error = ErrorText(status, error_body.empty() ? res.body : error_body);
  } else if (out.error.empty() && first) {
    out.error = "the stream ended without a chunk to time (no TTFT)";
  }
  out.success = out.error.empty();
  out.latency = last - out.start_time;
  return out;
}

}  // namespace cpm::benchserve
