// cpp-httplib wiring: routes, auth, loading state, SSE via chunked content providers.
#include "server/http_server.h"

#include <algorithm>
#include <httplib.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "base/log.h"
#include "server/api_docs.h"
#include "server/auth.h"
#include "server/client_probe.h"
#include "server/socket_scan.h"
#include "server/handlers.h"
#include "server/json_media_type.h"
#include "server/json_parse.h"
#include "server/process_metrics.h"
#include "server/responses.h"

namespace cpm {

namespace {

// Where vLLM's Prometheus app is mounted (any method, any path under it).
constexpr const char* kMetricsPattern = "/metrics.*";

// The largest request body read (images and videos arrive base64-encoded in it): room for the
// base64 of the largest medium an http(s) URL may fetch (64 MiB, 85.4 MiB as base64).
constexpr size_t kMaxBodyBytes = size_t{128} << 20;

using Writer = std::function<void(const std::function<bool(const std::string&)>&)>;

void Apply(HttpReply reply, httplib::Response& res) {
  res.status = reply.status;
  if (!reply.stream) {
    res.set_content(reply.body, reply.content_type.c_str());
    return;
  }
  res.set_header("Cache-Control", "no-cache");
  auto producer = std::make_shared<Writer>(std::move(reply.stream));
  res.set_chunked_content_provider(
      reply.content_type.c_str(), [producer](size_t, httplib::DataSink& sink) {
        // The stream runs after its handler returned, past httplib's exception handler: a bug
        // that throws here ends this stream, not the process.
        bool written = true;
        try {
          (*producer)([&sink, &written](const std::string& chunk) {
            written = written && sink.is_writable() && sink.write(chunk.data(), chunk.size());
            return written;
          });
        } catch (const std::exception& ex) {
          CPM_LOG_ERROR("stream: internal error: {}", ex.what());
          written = false;  // cut short: the client must not see a complete stream
        }
        // A write that failed (the client gone, or not reading for the write timeout) or a
        // producer that threw leaves the body without its last chunk, so the client sees a cut
        // stream, not a complete one.
        if (!written) return false;
        sink.done();
        return true;
      });
}

// A route that reads a JSON body: vLLM's validate_json_request runs before the handler.
httplib::Server::Handler JsonBody(httplib::Server::Handler handler) {
  return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    if (auto e = JsonMediaTypeError(req.get_header_value("Content-Type"))) {
      return Apply(HttpReply::Error(*e), res);
    }
    handler(req, res);
  };
}

// The client-gone check of a generation request, streamed or not.
ClientGoneFn ProbeFor(const httplib::Request& req) {
  auto probe = std::make_shared<ClientProbe>(req.remote_addr, req.remote_port, req.local_addr,
                                             req.local_port);
  return [probe] { return probe->Gone(); };
}

// cpp-httplib 0.11 listens with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG is compiled into
// Debian's library): a burst of clients (a benchmark's 48 concurrent streams) overflows it and
// some connections fail before any handler runs. Linux lets listen() on the listening socket
// raise the backlog (capped by net.core.somaxconn).
void RaiseListenBacklog(int port) {
  const int fd = FindOwnSocket([port](int fd) {
    int listening = 0;
    socklen_t len = sizeof(listening);
    std::string addr;
    int p = 0;
    return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening != 0 &&
           SocketEnd(fd, /*peer=*/false, &addr, &p) && p == port;
  });
  if (fd < 0 || listen(fd, SOMAXCONN) != 0) {
    CPM_LOG_WARN("could not raise the listen backlog of port {}; bursts of connections may fail",
                 port);
  }
}

// A 503 ServiceUnavailableError with `message` (the model loading, the server shutting down).
HttpReply Unavailable503(const std::string& message) {
  return HttpReply::Error(ApiErrorFromStatus(Unavailable(message)));
}

HttpReply Loading() { return Unavailable503("Loading model"); }

// The reason phrase uvicorn's access log prints after a status code.
const char* ReasonPhrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Request Entity Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "";
  }
}

// Whether `path` is under vLLM's Prometheus mount.
bool IsMetricsPath(const std::string& path) {
  static const std::regex metrics_path(kMetricsPattern);
  return std::regex_match(path, metrics_path);
}

// uvicorn sends every body as the app wrote it, and vLLM's app compresses nothing but /metrics
// (prometheus_client's app: gzip when the scraper accepts it). Debian's cpp-httplib, built with
// zlib and brotli, would compress any text reply the client accepts compressed, and an SSE
// stream then reached the client in one burst when it ended (the compressor flushes at the end):
// the OpenAI SDKs send Accept-Encoding. So the header is dropped before cpp-httplib reads it as
// it writes the reply (`req` is its own, non-const Request), or narrowed to gzip for /metrics.
void KeepRepliesUncompressed(httplib::Request& req) {
  const bool gzip = req.get_header_value("Accept-Encoding").find("gzip") != std::string::npos;
  req.headers.erase("Accept-Encoding");
  if (gzip && IsMetricsPath(req.path)) req.set_header("Accept-Encoding", "gzip");
}

}  // namespace

std::string RoutePath(const std::string& root_path, const std::string& path) {
  if (root_path.empty() || !path.starts_with(root_path)) return path;
  if (path.size() == root_path.size()) return "";
  return path[root_path.size()] == '/' ? path.substr(root_path.size()) : path;
}

std::string HttpServer::DocsRoot() const {
  std::string root = root_path_;
  while (!root.empty() && root.back() == '/') root.pop_back();
  return root;
}

std::string AccessLogLine(const std::string& remote_addr, int remote_port,
                          const std::string& method, const std::string& target,
                          const std::string& version, int status) {
  return fmt::format("{}:{} - \"{} {} {}\" {} {}", remote_addr, remote_port, method, target,
                     version, status, ReasonPhrase(status));
}

void HttpServer::EnableAccessLog() { access_log_ = true; }

namespace {

// When this thread began reading its current request (set in pre-routing; cpp-httplib serves
// each request on one thread from routing to its logger).
thread_local Clock::time_point request_start;
// The --root-path prefix this thread's current request came under ("" when it came bare), for
// a redirect's Location.
thread_local std::string request_root;

// A connection's address pair (unique among open connections), as a request and its socket
// both spell it.
std::string ConnectionKey(const std::string& remote_addr, int remote_port,
                          const std::string& local_addr, int local_port) {
  return fmt::format("{} {} {} {}", remote_addr, remote_port, local_addr, local_port);
}

// The routes with a path parameter: how FastAPI matches them, their template (vLLM's route
// path) and their methods.
struct TemplatedRoute {
  std::regex pattern;
  const char* path;
  const char* methods;
};
const std::vector<TemplatedRoute>& TemplatedRoutes() {
  static const std::vector<TemplatedRoute> routes = {
      {std::regex(R"(/v1/models/.+)"), "/v1/models/{model_id:path}", "GET"},
      {std::regex(R"(/v1/responses/[^/]+)"), "/v1/responses/{response_id}", "GET"},
      {std::regex(R"(/v1/responses/[^/]+/cancel)"), "/v1/responses/{response_id}/cancel",
       "POST"}};
  return routes;
}

// The route template a path matched, as the instrumentator labels it ("none": no route).
std::string HandlerLabel(const HttpServer::RouteList& routes, const std::string& path) {
  for (const auto& [route, methods] : routes) {
    if (route == path) return route;
  }
  for (const TemplatedRoute& route : TemplatedRoutes()) {
    if (std::regex_match(path, route.pattern)) return route.path;
  }
  return "none";
}

}  // namespace

void HttpServer::Logged(const httplib::Request& req, const httplib::Response& res) {
  {
    std::lock_guard<std::mutex> lock(busy_mu_);
    busy_.erase(ConnectionKey(req.remote_addr, req.remote_port, req.local_addr, req.local_port));
  }
  if (access_log_) {
    CPM_LOG_INFO("{}", AccessLogLine(req.remote_addr, req.remote_port, req.method, req.target,
                                     req.version, res.status));
  }
  const double seconds =
      request_start == Clock::time_point{}
          ? 0.0
          : std::chrono::duration<double>(Clock::now() - request_start).count();
  uint64_t request_bytes = 0;
  const std::string length = req.get_header_value("Content-Length");
  std::from_chars(length.data(), length.data() + length.size(), request_bytes);
  http_metrics_.Observe(HandlerLabel(routes_, req.path), req.method, res.status, seconds,
                        request_bytes, res.body.size());
  request_start = {};
}

HttpServer::HttpServer(std::vector<std::string> api_keys, int num_threads,
                       std::unique_ptr<httplib::Server> server)
    : svr_(server ? std::move(server) : std::make_unique<httplib::Server>()),
      api_keys_(std::move(api_keys)) {
  const int n = num_threads > 0 ? num_threads : 8;
  svr_->new_task_queue = [n] { return new httplib::ThreadPool(static_cast<size_t>(n)); };
  svr_->set_payload_max_length(kMaxBodyBytes);
  // httplib's default also sets SO_REUSEPORT, which lets a second server bind a port that is
  // in use; we want vLLM's "address already in use" instead. SO_REUSEADDR alone only allows
  // a restart over sockets in TIME_WAIT.
  svr_->set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });
  svr_->set_keep_alive_max_count(1000);
  // Writes go out at once (uvicorn's sockets are TCP_NODELAY too). With Nagle's algorithm a
  // reply's body, written after its headers, waited for the client's delayed ACK of them: ~40 ms
  // on every small reply of a keep-alive connection, and between streamed chunks.
  svr_->set_tcp_nodelay(true);
  svr_->set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    Logged(req, res);
  });
  UpdateRoutes();
  InstallRoutes();
}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Bind(const std::string& host, int port) {
  errno = 0;
  if (port == 0) {
    port_ = svr_->bind_to_any_port(host);
  } else if (svr_->bind_to_port(host, port)) {
    port_ = port;
  }
  if (port_ > 0) {
    RaiseListenBacklog(port_);
    return OkStatus();
  }
  const int err = errno;
  // A host name that does not resolve leaves errno as it was: say so, as uvicorn does
  // ("Name or service not known").
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int resolved = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (found != nullptr) freeaddrinfo(found);
  return Unavailable("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                     (resolved != 0       ? std::string(gai_strerror(resolved))
                      : err == EADDRINUSE ? std::string("address already in use")
                      : err != 0          ? std::string(std::strerror(err))
                                          : std::string("bind failed")));
}

void HttpServer::Run() {
  running_.store(true);
  if (!stop_requested_.load()) svr_->listen_after_bind();
  running_.store(false);
}

void HttpServer::BeginShutdown() {
  shutting_down_.store(true);
  CloseIdleConnections();
}

void HttpServer::Stop() {
  stop_requested_.store(true);
  // Wait for listening to have begun (or Run() to have seen the flag), then close the socket.
  // Does not wait for in-flight handlers: the caller ends those (engine shutdown) and joins.
  while (running_.load() && !svr_->is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  svr_->stop();
  CloseIdleConnections();
}

size_t HttpServer::RequestsInFlight() {
  std::lock_guard<std::mutex> lock(busy_mu_);
  return busy_.size();
}

void HttpServer::CloseIdleConnections() {
  if (port_ <= 0) return;
  std::lock_guard<std::mutex> lock(busy_mu_);
  // Every accepted connection of this server: a connected socket whose local port is ours (a
  // client socket of this process never has it: the port is taken by the listener).
  FindOwnSocket([this](int fd) {
    std::string remote_addr, local_addr;
    int remote_port = 0, local_port = 0;
    if (SocketEnd(fd, /*peer=*/false, &local_addr, &local_port) && local_port == port_ &&
        SocketEnd(fd, /*peer=*/true, &remote_addr, &remote_port) &&
        !busy_.contains(ConnectionKey(remote_addr, remote_port, local_addr, local_port))) {
      // Its worker waits for the next request in poll(): a read shutdown wakes it with an end
      // of stream, and it closes the connection (after stop() it takes no further request).
      shutdown(fd, SHUT_RD);
    }
    return false;  // look at every descriptor
  });
}

namespace {

// FastAPI's 404 (a route vLLM registers only when a flag asks for it, asked for while off, too).
void RouteOff(httplib::Response& res) {
  res.status = 404;
  res.set_content(R"({"detail":"Not Found"})", "application/json");
}

// FastAPI's (vLLM's) answers for a request no route took: a path known with a trailing slash
// too many or too few is a 307 to the route (Starlette's redirect_slashes), a known path with
// another method a 405 naming its methods, else a 404. (/metrics is a mount: no redirect.)
void NotRouted(const HttpServer::RouteList& routes, const httplib::Request& req,
               httplib::Response& res) {
  const std::string& path = req.path;
  const std::string other =
      !path.empty() && path.back() == '/' ? path.substr(0, path.size() - 1) : path + "/";
  const char* allowed = nullptr;
  for (const auto& [route, methods] : routes) {
    if (route == path) allowed = methods.c_str();
  }
  for (const TemplatedRoute& route : TemplatedRoutes()) {
    if (allowed == nullptr && std::regex_match(path, route.pattern)) allowed = route.methods;
  }
  if (allowed != nullptr) {
    res.status = 405;
    res.set_header("Allow", allowed);
    res.set_content(R"({"detail":"Method Not Allowed"})", "application/json");
    return;
  }
  for (const auto& [route, methods] : routes) {
    if (route != other) continue;
    std::string location = request_root + route;
    if (const size_t q = req.target.find('?'); q != std::string::npos) {
      location += req.target.substr(q);
    }
    res.status = 307;
    res.set_header("Location", location);
    res.body.clear();
    return;
  }
  RouteOff(res);
}

}  // namespace

void HttpServer::ServeMetrics(const httplib::Request& req, httplib::Response& res) {
  const ServerContext* ctx = ctx_.load();
  if (!ctx) return Apply(Loading(), res);
  // The process collector's series first, as a Prometheus Python client (vLLM's) has them.
  const EncoderCacheStats mm = ctx->images ? ctx->images->cache_stats() : EncoderCacheStats{};
  res.set_content(ProcessMetricsText() + ctx->metrics->Render(ctx->engine->Stats(), mm) +
                      http_metrics_.Render(),
                  "text/plain; version=0.0.4; charset=utf-8");
}

namespace {

// Every fixed-path route vLLM registers, those behind a flag included (UpdateRoutes leaves out
// those off); the routes with a path parameter are TemplatedRoutes().
// FastAPI's documentation routes (off with --disable-fastapi-docs; not in their own document).
bool IsDocsRoute(const std::string& path) {
  return path == "/openapi.json" || path == "/docs" || path == "/redoc";
}

HttpServer::RouteList FixedRoutes() {
  return {{"/health", "GET"},          {"/ping", "GET, POST"},
          {"/version", "GET"},         {"/metrics", "GET"},
          {"/load", "GET"},            {"/tokenizer_info", "GET"},
          {"/openapi.json", "GET"},    {"/docs", "GET"},
          {"/redoc", "GET"},
          {"/tokenize", "POST"},       {"/detokenize", "POST"},
          {"/v1/models", "GET"},       {"/v1/chat/completions", "POST"},
          {"/v1/completions", "POST"}, {"/v1/responses", "POST"},
          {"/invocations", "POST"}};
}

}  // namespace

HttpServer::RouteList HttpServer::ServedRoutes() const {
  RouteList routes = routes_;
  for (const TemplatedRoute& route : TemplatedRoutes()) {
    routes.emplace_back(route.path, route.methods);
  }
  return routes;
}

void HttpServer::DisableDocs() {
  docs_ = false;
  UpdateRoutes();
}

void HttpServer::EnableTokenizerInfo() {
  tokenizer_info_ = true;
  UpdateRoutes();
}

// A route vLLM does not register is unknown to its router (404 for any method, not a 405; left
// out of the OpenAPI document and the start-up log), so the list holds only the routes served.
void HttpServer::UpdateRoutes() {
  routes_.clear();
  for (auto& route : FixedRoutes()) {
    if ((IsDocsRoute(route.first) && !docs_) ||
        (route.first == "/tokenizer_info" && !tokenizer_info_)) {
      continue;
    }
    routes_.push_back(std::move(route));
  }
}

void HttpServer::Post(const std::string& pattern, RouteHandler handler) {
  svr_->Post(pattern, handler);
  post_routes_.push_back({std::regex(pattern), std::move(handler)});
}

void HttpServer::InstallRoutes() {
  httplib::Server& s = *svr_;
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    request_start = Clock::now();
    // `req` is cpp-httplib's own, non-const Request; it routes by `path` after this handler.
    auto& mutable_req = const_cast<httplib::Request&>(req);
    request_root.clear();
    if (!root_path_.empty()) {
      std::string routed = RoutePath(root_path_, req.path);
      if (routed.size() != req.path.size()) request_root = root_path_;
      mutable_req.path = std::move(routed);
    }
    KeepRepliesUncompressed(mutable_req);
    {
      std::lock_guard<std::mutex> lock(busy_mu_);
      busy_.insert(ConnectionKey(req.remote_addr, req.remote_port, req.local_addr, req.local_port));
    }
    // uvicorn's HTTP parser (httptools) refuses a header with control characters (an escape
    // sequence meant for a log, a bare CR) before any route sees it, and closes the connection.
    const auto has_control = [](const std::string& s) {
      return std::any_of(s.begin(), s.end(), [](char ch) {
        const auto c = static_cast<unsigned char>(ch);
        return (c < 0x20 && c != '\t') || c == 0x7f;
      });
    };
    if (shutting_down_.load()) {
      Apply(Unavailable503("The server is shutting down"), res);
      res.set_header("Connection", "close");
      return httplib::Server::HandlerResponse::Handled;
    }
    for (const auto& [name, value] : req.headers) {
      if (has_control(name) || has_control(value)) {
        res.status = 400;
        res.set_header("Connection", "close");
        res.set_content("Invalid HTTP request received.", "text/plain; charset=utf-8");
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    const std::string origin = req.get_header_value("Origin");
    if (req.method == "OPTIONS" && !origin.empty() &&
        req.has_header("Access-Control-Request-Method")) {
      // A browser's preflight, answered before authentication as vLLM's middleware does.
      const PreflightReply p =
          CorsPreflight(cors_, origin, req.get_header_value("Access-Control-Request-Method"),
                        req.get_header_value("Access-Control-Request-Headers"));
      res.status = p.status;
      for (const auto& [name, value] : p.headers) res.set_header(name, value);
      res.set_content(p.body, "text/plain; charset=utf-8");
      return httplib::Server::HandlerResponse::Handled;
    }
    // vLLM's AuthenticationMiddleware lets every OPTIONS request through (to the router's 405).
    if (req.method == "OPTIONS" ||
        IsAuthorized(api_keys_, req.path, req.get_header_value("Authorization"))) {
      if (IsMetricsPath(req.path) &&
          !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
        ServeMetrics(req, res);  // any method, HEAD too (its body dropped by cpp-httplib)
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.method == "HEAD") {  // FastAPI's routes take no HEAD (cpp-httplib adds it)
        NotRouted(routes_, req, res);
        return httplib::Server::HandlerResponse::Handled;
      }
      if (req.has_header("Content-Encoding")) {
        // The body is read as sent, never inflated, as vLLM's server reads it (a compressed JSON
        // body then fails to parse: its 400). cpp-httplib would inflate gzip and deflate bodies
        // without bound (1 MB of gzip can be 1 GiB), and it reads the body after this handler,
        // from this header; `req` is its own, non-const Request.
        const_cast<httplib::Request&>(req).headers.erase("Content-Encoding");
      }
      if (req.method == "POST" && !req.has_header("Content-Length") &&
          !req.has_header("Transfer-Encoding")) {
        httplib::Request bodiless = req;  // its `matches` are the routes' own
        for (const PostRoute& route : post_routes_) {
          if (std::regex_match(bodiless.path, bodiless.matches, route.pattern)) {
            route.handler(bodiless, res);
            return httplib::Server::HandlerResponse::Handled;
          }
        }
        NotRouted(routes_, req, res);  // no POST route: 307, 405 or 404, without reading a body
        return httplib::Server::HandlerResponse::Handled;
      }
      // cpp-httplib reads the other bodied methods' bodies "until close" when they declare no
      // length, holding the client for its read timeout; no route takes them, so they get
      // uvicorn's empty body and the router's 405 or 404 at once.
      if ((req.method == "PUT" || req.method == "PATCH" || req.method == "DELETE") &&
          !req.has_header("Content-Length") && !req.has_header("Transfer-Encoding")) {
        NotRouted(routes_, req, res);
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    }
    for (const auto& [name, value] : CorsResponseHeaders(cors_, origin)) res.set_header(name, value);
    res.status = 401;
    res.set_content(UnauthorizedBody(), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  // After every request: the CORS headers for its origin, unless the pre-routing handler's
  // answer (a preflight, a 401) has them already (cpp-httplib runs this after it too, and
  // set_header appends: a browser refuses an Access-Control-Allow-Origin sent twice), and
  // X-Request-Id if enabled.
  s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.has_header("Access-Control-Allow-Origin")) {
      for (const auto& [name, value] :
           CorsResponseHeaders(cors_, req.get_header_value("Origin"))) {
        res.set_header(name, value);
      }
    }
    if (!request_id_headers_) return;
    std::string id = req.get_header_value("X-Request-Id");
    if (id.empty()) {
      thread_local std::mt19937_64 rng{std::random_device{}()};
      id = fmt::format("{:016x}{:016x}", rng(), rng());
    }
    res.set_header("X-Request-Id", id);
  });
  // Handlers return errors as values; this only guards against a bug turning into a crash.
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& ex) {
      CPM_LOG_ERROR("{} {}: internal error: {}", req.method, req.path, ex.what());
    } catch (...) {
      CPM_LOG_ERROR("{} {}: internal error", req.method, req.path);
    }
    ApiError e;
    e.status = 500;
    e.type = "InternalServerError";
    e.message = "internal error";
    Apply(HttpReply::Error(e), res);
  });
  // FastAPI's (vLLM's) bodies: an unknown path is a 404, a known one with another method a 405
  // that names the methods it takes.
  s.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status != 404) {
      // httplib's own refusals (a body over the 64 MiB limit: 413; one it could not read: 400)
      // carry no body: the OpenAI error object, as every other refusal.
      ApiError e;
      e.status = res.status;
      e.type = res.status == 413 ? "RequestEntityTooLarge" : "BadRequestError";
      e.message = res.status == 413 ? fmt::format("request body too large (the limit is {} MiB)",
                                                  kMaxBodyBytes >> 20)
                                    : fmt::format("the request could not be read (HTTP {})",
                                                  res.status);
      Apply(HttpReply::Error(e), res);
      return;
    }
    NotRouted(routes_, req, res);
  });
  auto health = [this](const httplib::Request&, httplib::Response& res) {
    // 200 with an empty body when ready (vLLM); 503 while the model loads (llama.cpp).
    if (!ctx_.load()) {
      Apply(Loading(), res);
      return;
    }
    res.status = 200;
  };
  s.Get("/health", health);
  s.Get("/ping", health);
  Post("/ping", health);
  s.Get("/version", [](const httplib::Request&, httplib::Response& res) {
    Apply(HandleVersion(), res);
  });
  // vLLM mounts the Prometheus app at ^/metrics(.*)$, which answers any method on any path
  // under it (/metrics/ included, without the redirect a route would give).
  const auto metrics = [this](const httplib::Request& req, httplib::Response& res) {
    ServeMetrics(req, res);
  };
  s.Get(kMetricsPattern, metrics);
  Post(kMetricsPattern, metrics);
  s.Put(kMetricsPattern, metrics);
  s.Patch(kMetricsPattern, metrics);
  s.Delete(kMetricsPattern, metrics);
  // FastAPI's documentation, unless --disable-fastapi-docs (then its 404). Its own routes are
  // not in the document.
  s.Get("/openapi.json", [this](const httplib::Request&, httplib::Response& res) {
    if (!docs_) return RouteOff(res);
    RouteList routes;
    for (const auto& route : ServedRoutes()) {
      if (!IsDocsRoute(route.first)) routes.push_back(route);
    }
    res.set_content(OpenApiJson(routes, DocsRoot()), "application/json");
  });
  s.Get("/docs", [this](const httplib::Request&, httplib::Response& res) {
    if (!docs_) return RouteOff(res);
    res.set_content(SwaggerUiHtml(DocsRoot()), "text/html; charset=utf-8");
  });
  s.Get("/redoc", [this](const httplib::Request&, httplib::Response& res) {
    if (!docs_) return RouteOff(res);
    res.set_content(RedocHtml(DocsRoot()), "text/html; charset=utf-8");
  });
  s.Get("/tokenizer_info", [this](const httplib::Request&, httplib::Response& res) {
    if (!tokenizer_info_) return RouteOff(res);
    const ServerContext* ctx = ctx_.load();
    if (!ctx) return Apply(Loading(), res);
    Apply(HandleTokenizerInfo(*ctx), res);
  });
  // vLLM's /load, which load balancers poll: {"server_load": N}. vLLM counts its generation
  // routes' requests in flight (0 unless --enable-server-load-tracking); here the engine's
  // sequences running and waiting, always.
  s.Get("/load", [this](const httplib::Request&, httplib::Response& res) {
    const ServerContext* ctx = ctx_.load();
    if (!ctx) return Apply(Loading(), res);
    const EngineStats st = ctx->engine->Stats();
    res.set_content(nlohmann::json{{"server_load", st.num_running + st.num_waiting}}.dump(),
                    "application/json");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const ServerContext* ctx = ctx_.load();
    Apply(ctx ? HandleModels(*ctx) : Loading(), res);
  });
  s.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    const ServerContext* ctx = ctx_.load();
    Apply(ctx ? HandleModel(*ctx, req.matches[1].str()) : Loading(), res);
  });
  auto chat = [this](const httplib::Request& req, httplib::Response& res) {
    const auto arrival = Clock::now();
    const ServerContext* ctx = ctx_.load();
    Apply(ctx ? HandleChatCompletions(*ctx, req.body, arrival, ProbeFor(req),
                                      req.get_header_value("X-Request-Id"))
              : Loading(),
          res);
  };
  Post("/v1/chat/completions", JsonBody(chat));
  Post("/v1/completions", JsonBody([this](const httplib::Request& req, httplib::Response& res) {
    const auto arrival = Clock::now();
    const ServerContext* ctx = ctx_.load();
    Apply(ctx ? HandleCompletions(*ctx, req.body, arrival, ProbeFor(req),
                                  req.get_header_value("X-Request-Id"))
              : Loading(),
          res);
  }));
  // SageMaker's endpoint (vLLM's /invocations): the body goes to the first of chat and
  // completions whose request it reads as, as vLLM tries each request model in turn.
  Post("/invocations", JsonBody([this](const httplib::Request& req, httplib::Response& res) {
    const auto arrival = Clock::now();
    const ServerContext* ctx = ctx_.load();
    if (!ctx) return Apply(Loading(), res);
    const std::string x_request_id = req.get_header_value("X-Request-Id");
    // Not JSON at all: the decode error, as vLLM reads the body before any model.
    if (protocol::ParseChatCompletionRequest(req.body, nullptr).ok() ||
        protocol::ParseOrderedJson(req.body).is_discarded()) {
      return Apply(HandleChatCompletions(*ctx, req.body, arrival, ProbeFor(req), x_request_id),
                   res);
    }
    if (protocol::ParseCompletionRequest(req.body, nullptr).ok()) {
      return Apply(HandleCompletions(*ctx, req.body, arrival, ProbeFor(req), x_request_id), res);
    }
    Apply(HttpReply::Error(BadRequest(
              "Cannot find suitable handler for request. Expected one of: "
              "['ChatCompletionRequest', 'CompletionRequest']")),
          res);
  }));
  Post("/v1/responses", JsonBody([this](const httplib::Request& req, httplib::Response& res) {
    const auto arrival = Clock::now();
    const ServerContext* ctx = ctx_.load();
    Apply(ctx ? HandleResponses(*ctx, req.body, arrival, ProbeFor(req)) : Loading(), res);
  }));
  // cpmserve stores no responses (store is taken as false): retrieving or cancelling one is
  // vLLM's answer for an id it does not hold.
  auto no_such_response = [](const httplib::Request& req, httplib::Response& res) {
    ApiError e;
    e.status = 404;
    e.type = "invalid_request_error";
    e.message = "Response with id '" + req.matches[1].str() + "' not found.";
    e.param = "response_id";
    Apply(HttpReply::Error(e), res);
  };
  s.Get(R"(/v1/responses/([^/]+))", no_such_response);
  Post(R"(/v1/responses/([^/]+)/cancel)", no_such_response);
  Post("/tokenize", JsonBody([this](const httplib::Request& req, httplib::Response& res) {
    const ServerContext* ctx = ctx_.load();
    Apply(ctx ? HandleTokenize(*ctx, req.body) : Loading(), res);
  }));
  Post("/detokenize", JsonBody([this](const httplib::Request& req, httplib::Response& res) {
    const ServerContext* ctx = ctx_.load();
    Apply(ctx ? HandleDetokenize(*ctx, req.body) : Loading(), res);
  }));
}

}  // namespace cpm
