#include "server/cors.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace cpm {
namespace {

bool Contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

bool AllowsAllOrigins(const CorsOptions& o) { return Contains(o.allowed_origins, "*"); }

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// "a, B ,c" -> {"a", "b", "c"}: a header list as Starlette splits and lowercases it.
std::vector<std::string> SplitHeaders(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    std::string item = list.substr(start, end - start);
    const size_t b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    if (b != std::string::npos) out.push_back(Lower(item.substr(b, e - b + 1)));
    start = end + 1;
  }
  return out;
}

bool OriginAllowed(const CorsOptions& o, const std::string& origin) {
  return AllowsAllOrigins(o) || Contains(o.allowed_origins, origin);
}

// Access-Control-Allow-Origin (and Vary where it depends on the request), as Starlette sets them.
void AddOrigin(const CorsOptions& o, const std::string& origin, HeaderList* h) {
  if (AllowsAllOrigins(o) && !o.allow_credentials) {
    h->push_back({"Access-Control-Allow-Origin", "*"});
  } else {
    h->push_back({"Access-Control-Allow-Origin", origin});
    h->push_back({"Vary", "Origin"});
  }
  if (o.allow_credentials) h->push_back({"Access-Control-Allow-Credentials", "true"});
}

}  // namespace

StatusOr<std::vector<std::string>> ParseCorsList(const std::string& flag,
                                                 const std::string& json) {
  if (json.empty()) return std::vector<std::string>{"*"};
  const auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return InvalidArgument(flag + ": not a JSON list of strings: " + json);
  }
  std::vector<std::string> out;
  for (const auto& item : j) {
    if (!item.is_string()) return InvalidArgument(flag + ": not a JSON list of strings: " + json);
    out.push_back(item.get<std::string>());
  }
  return out;
}

HeaderList CorsResponseHeaders(const CorsOptions& o, const std::string& origin) {
  HeaderList h;
  if (!origin.empty() && OriginAllowed(o, origin)) AddOrigin(o, origin, &h);
  return h;
}

PreflightReply CorsPreflight(const CorsOptions& o, const std::string& origin,
                             const std::string& request_method,
                             const std::string& request_headers) {
  PreflightReply r;
  const bool all_methods = Contains(o.allowed_methods, "*");
  const std::vector<std::string> every_method = {"DELETE", "GET",  "HEAD", "OPTIONS",
                                                 "PATCH",  "POST", "PUT"};
  const std::string methods =
      fmt::format("{}", fmt::join(all_methods ? every_method : o.allowed_methods, ", "));
  std::vector<std::string> failures;
  if (OriginAllowed(o, origin)) {
    AddOrigin(o, origin, &r.headers);
  } else {
    failures.push_back("origin");
  }
  r.headers.push_back({"Access-Control-Allow-Methods", methods});
  r.headers.push_back({"Access-Control-Max-Age", "600"});
  if (!all_methods && !Contains(o.allowed_methods, request_method)) failures.push_back("method");
  if (Contains(o.allowed_headers, "*")) {
    if (!request_headers.empty()) {
      r.headers.push_back({"Access-Control-Allow-Headers", request_headers});
    }
  } else {
    // The CORS-safelisted request headers are always allowed.
    std::vector<std::string> allowed = {"accept", "accept-language", "content-language",
                                        "content-type"};
    for (const std::string& h : o.allowed_headers) allowed.push_back(Lower(h));
    std::sort(allowed.begin(), allowed.end());
    allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
    r.headers.push_back(
        {"Access-Control-Allow-Headers", fmt::format("{}", fmt::join(allowed, ", "))});
    for (const std::string& h : SplitHeaders(request_headers)) {
      if (!Contains(allowed, h)) {
        failures.push_back("headers");
        break;
      }
    }
  }
  if (failures.empty()) {
    r.body = "OK";
    return r;
  }
  r.status = 400;
  r.body = fmt::format("Disallowed CORS {}", fmt::join(failures, ", "));
  return r;
}

}  // namespace cpm
