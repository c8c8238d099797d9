// FastAPI's documentation routes, which vLLM's server keeps unless --disable-fastapi-docs:
// /openapi.json (the OpenAPI document of the routes), /docs (Swagger UI) and /redoc (ReDoc),
// the two pages loading their scripts from the jsDelivr CDN, as FastAPI's do.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cpm {

// An OpenAPI 3.1 document listing `routes` (path, comma-separated methods) under FastAPI's
// default title and version; each operation names its route and answers 200. A `root_path`
// (--root-path) is its one server, as FastAPI lists it.
std::string OpenApiJson(const std::vector<std::pair<std::string, std::string>>& routes,
                        const std::string& root_path = "");

// The HTML pages; both read the document at `root_path` + /openapi.json, as FastAPI's do.
std::string SwaggerUiHtml(const std::string& root_path = "");
std::string RedocHtml(const std::string& root_path = "");

}  // namespace cpm
