// Cross-origin requests as vLLM answers them: Starlette's CORSMiddleware under --allowed-origins,
// --allowed-methods, --allowed-headers and --allow-credentials (every origin, method and header
// and no credentials by default), so that browser clients work against cpmserve as against vLLM.
// Pure functions of the options and the request's headers; HttpServer applies them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace cpm {

struct CorsOptions {
  std::vector<std::string> allowed_origins = {"*"};
  std::vector<std::string> allowed_methods = {"*"};
  std::vector<std::string> allowed_headers = {"*"};
  bool allow_credentials = false;
};

using HeaderList = std::vector<std::pair<std::string, std::string>>;

// A flag's JSON list of strings (vLLM parses them with json.loads; empty: the flag's default,
// ["*"]); errors name the flag.
StatusOr<std::vector<std::string>> ParseCorsList(const std::string& flag, const std::string& json);

// The headers a response to a request from `origin` gets: none unless the origin is allowed.
HeaderList CorsResponseHeaders(const CorsOptions& o, const std::string& origin);

// The answer to a preflight (OPTIONS with Origin and Access-Control-Request-Method): 200 "OK",
// or 400 "Disallowed CORS origin, method, headers" naming what failed, with Starlette's headers.
struct PreflightReply {
  int status = 200;
  std::string body;
  HeaderList headers;
};
PreflightReply CorsPreflight(const CorsOptions& o, const std::string& origin,
                             const std::string& request_method,
                             const std::string& request_headers);

}  // namespace cpm
