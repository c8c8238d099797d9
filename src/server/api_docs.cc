#include "server/api_docs.h"

#include <cctype>

#include <nlohmann/json.hpp>

namespace cpm {
namespace {

// FastAPI's summary of a route: its function's name in title case ("/v1/chat/completions" →
// "Completions"); here the last path segment stands for it.
std::string Summary(const std::string& path) {
  std::string last = path.substr(path.find_last_of('/') + 1);
  if (last.empty() || last.front() == '{') last = "root";
  std::string out;
  bool upper = true;
  for (char c : last) {
    if (c == '_' || c == '-' || c == '.') {
      out += ' ';
      upper = true;
    } else if (c != '{' && c != '}' && c != ':') {
      out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
      upper = false;
    }
  }
  return out;
}

std::string OperationId(const std::string& path, const std::string& method) {
  std::string id;
  for (char c : path) id += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string m = method;
  for (char& c : m) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const size_t start = id.find_first_not_of('_');
  return (start == std::string::npos ? std::string("root") : id.substr(start)) + "_" + m;
}

// FastAPI's OpenAPI path: a path parameter without its converter ({model_id:path} → {model_id}).
std::string OpenApiPath(const std::string& path) {
  std::string out;
  bool in_param = false, in_converter = false;
  for (char c : path) {
    if (c == '{') in_param = true;
    if (c == '}') in_param = in_converter = false;
    if (in_param && c == ':') in_converter = true;
    if (!in_converter) out += c;
  }
  return out;
}

}  // namespace

std::string OpenApiJson(const std::vector<std::pair<std::string, std::string>>& routes,
                        const std::string& root_path) {
  using Json = nlohmann::ordered_json;
  Json paths = Json::object();
  for (const auto& [path, methods] : routes) {
    Json& ops = paths[OpenApiPath(path)];
    size_t start = 0;
    while (start < methods.size()) {
      size_t end = methods.find(',', start);
      if (end == std::string::npos) end = methods.size();
      std::string method = methods.substr(start, end - start);
      method.erase(0, method.find_first_not_of(' '));
      start = end + 1;
      std::string lower = method;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      ops[lower] = {{"summary", Summary(path)},
                    {"operationId", OperationId(path, method)},
                    {"responses",
                     {{"200",
                       {{"description", "Successful Response"},
                        {"content", {{"application/json", {{"schema", Json::object()}}}}}}}}}};
    }
  }
  Json doc = {{"openapi", "3.1.0"}, {"info", {{"title", "FastAPI"}, {"version", "0.1.0"}}}};
  if (!root_path.empty()) doc["servers"] = Json::array({{{"url", root_path}}});
  doc["paths"] = std::move(paths);
  return doc.dump();
}

std::string SwaggerUiHtml(const std::string& root_path) {
  return R"(<!DOCTYPE html>
<html>
<head>
<link type="text/css" rel="stylesheet" href="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css">
<title>FastAPI - Swagger UI</title>
</head>
<body>
<div id="swagger-ui"></div>
<script src="https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js"></script>
<script>
const ui = SwaggerUIBundle({url: ')" + root_path + R"(/openapi.json', dom_id: '#swagger-ui', deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset]});
</script>
</body>
</html>
)";
}

std::string RedocHtml(const std::string& root_path) {
  return R"(<!DOCTYPE html>
<html>
<head>
<title>FastAPI - ReDoc</title>
<meta charset="utf-8"/>
<meta name="viewport" content="width=device-width, initial-scale=1">
</head>
<body>
<redoc spec-url=")" + root_path + R"(/openapi.json"></redoc>
<script src="https://cdn.jsdelivr.net/npm/redoc@2/bundles/redoc.standalone.js"></script>
</body>
</html>
)";
}

}  // namespace cpm
