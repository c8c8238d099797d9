// One streamed OpenAI request of `cpmserve bench serve`, timed as vLLM's benchmark request
// functions time it (vllm/benchmarks/lib/endpoint_request_func.py): the clock starts when the
// request is sent; TTFT at the first streamed event that carries a choice, an ITL for each later
// one; E2EL at the last such event for /v1/completions, at the last event of any kind (the
// usage event included) for /v1/chat/completions; output tokens from the usage
// (stream_options.include_usage), in an event of its own or, as llama.cpp's server sends it, on
// the last choice event. cpp-httplib's client, one connection per request.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "benchserve/serve_metrics.h"

namespace cpm::benchserve {

// Seconds on the steady clock (the clock of RequestOutput::start_time).
double Now();

// The server: scheme://host:port plus an optional path prefix, and its auth header.
class Server {
 public:
  // `headers`: sent with every request (--header), after the auth header. `verify_tls`: an
  // https:// server's certificate is checked against the system's CAs (off: --insecure).
  Server(std::string origin, std::string prefix, std::string api_key, httplib::Headers headers = {},
         bool verify_tls = true)
      : origin_(std::move(origin)),
        prefix_(std::move(prefix)),
        api_key_(std::move(api_key)),
        headers_(std::move(headers)),
        verify_tls_(verify_tls) {}

  std::string Url(const std::string& path) const { return origin_ + prefix_ + path; }
  std::unique_ptr<httplib::Client> Client(double read_timeout_s) const;
  httplib::Headers Headers() const;
  const std::string& prefix() const { return prefix_; }

  // Plain calls: status (0 when the server did not answer) and body or error text.
  std::pair<int, std::string> Get(const std::string& path) const;
  std::pair<int, std::string> Post(const std::string& path, const std::string& body) const;

 private:
  std::string origin_, prefix_, api_key_;
  httplib::Headers headers_;
  bool verify_tls_;
};

// j[key] when it is a string, else "".
std::string StringField(const nlohmann::json& j, const char* key);

// An error body's message (OpenAI {"error": {"message": ...}} or vLLM's {"message": ...}).
std::string ErrorText(int status, const std::string& body);

enum class Api { kCompletions, kChat };

// Sends one streamed request and times its chunks as vLLM's request functions do: TTFT at the
// first event with a choice, an ITL for each later one, E2EL at the last such event
// (completions) or the last event of any kind (chat, which also counts the usage event).
// `request_id` (when not empty) goes out as the x-request-id header (--request-id-prefix).
RequestOutput RunRequest(const Server& s, const std::string& endpoint, Api api,
                         const std::string& payload, int64_t prompt_len,
                         const std::string& request_id = "");

}  // namespace cpm::benchserve
