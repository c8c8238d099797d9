// The HTTP transport: cpp-httplib routes -> handlers, API-key check, SSE through chunked
// responses (a failed write means the client left, and the handler cancels its requests), a
// bounded HTTP thread pool, and the loading state (listening before the model is ready: /health
// answers 503 until SetReady).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "server/cors.h"
#include "server/http_metrics.h"
#include "server/server_context.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}

namespace cpm {

// uvicorn's access log line: `127.0.0.1:53042 - "POST /v1/completions HTTP/1.1" 200 OK`.
std::string AccessLogLine(const std::string& remote_addr, int remote_port,
                          const std::string& method, const std::string& target,
                          const std::string& version, int status);

class HttpServer {
 public:
  HttpServer(std::vector<std::string> api_keys, int num_threads);
  ~HttpServer();

  // Binds the socket; "address already in use" and friends come back as errors naming it.
  Status Bind(const std::string& host, int port);
  int port() const { return port_; }
  // Serves until Stop(); call on its own thread after Bind.
  void Run();
  // Stops accepting (without waiting for in-flight handlers); Run() returns once they are
  // done. Safe before, during or after Run() starts (httplib's own stop() is a no-op until
  // listening has begun).
  void Stop();
  // One line per answered request, as uvicorn's access log (vLLM's default; off with
  // --disable-uvicorn-access-log). Call before Run().
  void EnableAccessLog();
  // vLLM's --enable-request-id-headers: every response carries X-Request-Id, the request's own
  // or 32 random hex digits. Call before Run().
  void EnableRequestIdHeaders() { request_id_headers_ = true; }
  void DisableDocs() { docs_ = false; }  // --disable-fastapi-docs
  // Cross-origin requests answered as vLLM's CORS middleware does (cors.h; its defaults allow
  // every origin). Call before Run().
  void SetCors(CorsOptions cors) { cors_ = std::move(cors); }
  // From now on requests are served with `ctx` (which must outlive the server).
  void SetReady(const ServerContext* ctx) { ctx_.store(ctx); }

  // (path, methods) of every route, for the start-up log.
  static const std::vector<std::pair<std::string, std::string>>& Routes();

 private:
  void InstallRoutes();
  // After each answered request: the access log line (if enabled) and the HTTP metrics.
  void Logged(const httplib::Request& req, const httplib::Response& res);
  // The Prometheus text of /metrics (or the loading reply before the model is up).
  void ServeMetrics(const httplib::Request& req, httplib::Response& res);
  // Registers a POST route with cpp-httplib and in post_routes_.
  using RouteHandler = std::function<void(const httplib::Request&, httplib::Response&)>;
  void Post(const std::string& pattern, RouteHandler handler);
  // A POST without Content-Length or Transfer-Encoding has an empty body (RFC 9112 6.3), but
  // cpp-httplib would read until its read timeout (5 s) before routing it: such requests are
  // answered from pre-routing, with these routes.
  struct PostRoute {
    std::regex pattern;
    RouteHandler handler;
  };
  std::vector<PostRoute> post_routes_;

  std::unique_ptr<httplib::Server> svr_;
  std::vector<std::string> api_keys_;
  std::atomic<const ServerContext*> ctx_{nullptr};
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> running_{false};
  bool request_id_headers_ = false;
  bool docs_ = true;  // /openapi.json, /docs, /redoc
  bool access_log_ = false;
  HttpMetrics http_metrics_;  // the instrumentator's series, on /metrics after vLLM's
  CorsOptions cors_;
  int port_ = 0;
};

}  // namespace cpm
