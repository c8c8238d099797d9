// The HTTP transport: cpp-httplib routes -> handlers, API-key check, SSE through chunked
// responses (a failed write means the client left, and the handler cancels its requests), a
// bounded HTTP thread pool, and the loading state (listening before the model is ready: /health
// answers 503 until SetReady).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <regex>
#include <set>
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

// The path a request is routed by under FastAPI's root_path (Starlette's get_route_path): `path`
// less `root_path` when it starts with it and a '/' follows ("" for the prefix alone), else
// `path` as it is.
std::string RoutePath(const std::string& root_path, const std::string& path);

// uvicorn's access log line: `127.0.0.1:53042 - "POST /v1/completions HTTP/1.1" 200 OK`.
std::string AccessLogLine(const std::string& remote_addr, int remote_port,
                          const std::string& method, const std::string& target,
                          const std::string& version, int status);

class HttpServer {
 public:
  // `server`: cpp-httplib's server to serve with (an HTTPS one from MakeTlsServer); null for
  // plain HTTP.
  HttpServer(std::vector<std::string> api_keys, int num_threads,
             std::unique_ptr<httplib::Server> server = nullptr);
  ~HttpServer();

  // Binds the socket; "address already in use" and friends come back as errors naming it.
  Status Bind(const std::string& host, int port);
  int port() const { return port_; }
  // Serves until Stop(); call on its own thread after Bind.
  void Run();
  // The shutdown's first step: from now on every new request is answered 503 ("the server is
  // shutting down", Connection: close) and the idle keep-alive connections are closed, while
  // the requests in flight go on to their end (streams included: cpp-httplib would not start
  // a stream whose handler returns after Stop()). Stop() once they are done.
  void BeginShutdown();
  // Stops accepting and closes the idle keep-alive connections (without waiting for in-flight
  // handlers; their connections close after their reply); Run() returns once they are done.
  // Safe before, during or after Run() starts (httplib's own stop() is a no-op until
  // listening has begun).
  void Stop();
  // One line per answered request, as uvicorn's access log (vLLM's default; off with
  // --disable-uvicorn-access-log). Call before Run().
  void EnableAccessLog();
  // vLLM's --enable-request-id-headers: every response carries X-Request-Id, the request's own
  // or 32 random hex digits. Call before Run().
  void EnableRequestIdHeaders() { request_id_headers_ = true; }
  // vLLM's --root-path (FastAPI's root_path): a path under it is routed, authorized and counted
  // without it (RoutePath), the bare paths still served. Call before Run().
  void SetRootPath(std::string root_path) { root_path_ = std::move(root_path); }
  void DisableDocs();          // --disable-fastapi-docs: /openapi.json, /docs, /redoc 404
  void EnableTokenizerInfo();  // --enable-tokenizer-info-endpoint: GET /tokenizer_info
  // Cross-origin requests answered as vLLM's CORS middleware does (cors.h; its defaults allow
  // every origin). Call before Run().
  void SetCors(CorsOptions cors) { cors_ = std::move(cors); }
  // From now on requests are served with `ctx` (which must outlive the server).
  void SetReady(const ServerContext* ctx) { ctx_.store(ctx); }

  // Requests being answered now (read, and their reply not yet written).
  size_t RequestsInFlight();

  // (path, methods) of every route served, those off by a flag left out: the fixed paths (what
  // a request's path is matched against), and with them the templated ones (path parameters
  // in braces, as FastAPI writes them), for the start-up log and the OpenAPI document.
  using RouteList = std::vector<std::pair<std::string, std::string>>;
  const RouteList& Routes() const { return routes_; }
  RouteList ServedRoutes() const;

 private:
  void InstallRoutes();
  // The root path as FastAPI's documentation routes write it (no trailing '/').
  std::string DocsRoot() const;
  void UpdateRoutes();  // routes_ from the flags
  // Ends the keep-alive wait of every connection with no request in flight, as uvicorn does
  // when it stops: otherwise an idle client (an OpenAI client's connection pool) holds the
  // shutdown for cpp-httplib's keep-alive timeout (5 s).
  void CloseIdleConnections();
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
  // The connections with a request in flight (from pre-routing to the access log, which
  // cpp-httplib calls once the reply is written), by their address pair: CloseIdleConnections
  // leaves these alone.
  std::mutex busy_mu_;
  std::set<std::string> busy_;

  std::unique_ptr<httplib::Server> svr_;
  std::vector<std::string> api_keys_;
  std::atomic<const ServerContext*> ctx_{nullptr};
  std::atomic<bool> stop_requested_{false};
  std::atomic<bool> running_{false};
  std::atomic<bool> shutting_down_{false};
  bool request_id_headers_ = false;
  std::string root_path_;
  bool docs_ = true;  // /openapi.json, /docs, /redoc
  bool tokenizer_info_ = false;
  RouteList routes_;
  bool access_log_ = false;
  HttpMetrics http_metrics_;  // the instrumentator's series, on /metrics after vLLM's
  CorsOptions cors_;
  int port_ = 0;
};

}  // namespace cpm
