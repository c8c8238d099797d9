// The streamed, timed OpenAI requests of `cpmserve bench serve` (cpp-httplib's client).
#include "benchserve/stream_client.h"

#include <chrono>

#include "benchserve/sse_reader.h"

namespace cpm::benchserve {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::unique_ptr<httplib::Client> Server::Client(double read_timeout_s) const {
  auto c = std::make_unique<httplib::Client>(origin_);
  // A request's body, written after its headers, goes out at once rather than after the
  // server's delayed ACK (Nagle's algorithm: ~40 ms on a connection past its first exchange).
  c->set_tcp_nodelay(true);
  c->enable_server_certificate_verification(verify_tls_);
  c->set_connection_timeout(std::chrono::seconds(10));
  c->set_read_timeout(std::chrono::milliseconds(static_cast<int64_t>(read_timeout_s * 1000)));
  c->set_write_timeout(std::chrono::seconds(60));
  return c;
}

httplib::Headers Server::Headers() const {
  httplib::Headers h = headers_;
  if (!api_key_.empty()) h.emplace("Authorization", "Bearer " + api_key_);
  return h;
}

std::pair<int, std::string> Server::Get(const std::string& path) const {
  auto r = Client(60)->Get(prefix_ + path, Headers());
  if (!r) return {0, httplib::to_string(r.error())};
  return {r->status, r->body};
}

std::pair<int, std::string> Server::Post(const std::string& path, const std::string& body) const {
  auto r = Client(600)->Post(prefix_ + path, Headers(), body, "application/json");
  if (!r) return {0, httplib::to_string(r.error())};
  return {r->status, r->body};
}

std::string StringField(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return "";
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string ErrorText(int status, const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  std::string msg = StringField(j.is_object() && j.contains("error") ? j["error"] : j, "message");
  if (msg.empty()) msg = StringField(j, "message");
  if (msg.empty()) msg = body.substr(0, 300);
  return "HTTP " + std::to_string(status) + ": " + msg;
}

RequestOutput RunRequest(const Server& s, const std::string& endpoint, Api api,
                         const std::string& payload, int64_t prompt_len,
                         const std::string& request_id) {
  RequestOutput out;
  out.prompt_len = prompt_len;
  auto client = s.Client(6 * 3600);
  httplib::Request req;
  req.method = "POST";
  req.path = s.prefix() + endpoint;
  req.headers = s.Headers();
  req.set_header("Content-Type", "application/json");
  if (!request_id.empty()) req.set_header("x-request-id", request_id);
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
    const bool has_usage = j.contains("usage") && j["usage"].is_object();
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
    } else if (has_usage && api == Api::kChat) {
      last = now;  // chat's E2EL ends at its usage event
    }
    // OpenAI and vLLM send usage in an event of its own (no choices); llama.cpp's server puts
    // it on its last choice event. vLLM's client reads the first kind only and would count
    // llama.cpp's tokens by re-tokenising the text, which random token ids do not survive.
    if (has_usage) {
      const auto& n = j["usage"]["completion_tokens"];
      if (n.is_number_integer()) out.output_tokens = n.get<int64_t>();
      // The prompt as the server counted it (a chat's template included; vLLM's client reads
      // it so too), else the length sent.
      const auto& p = j["usage"]["prompt_tokens"];
      if (p.is_number_integer()) out.prompt_len = p.get<int64_t>();
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
