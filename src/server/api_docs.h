// FastAPI's documentation routes, which vLLM's server keeps unless --disable-fastapi-docs:
// /openapi.json (the OpenAPI document of the routes), /docs (Swagger UI) and /redoc (ReDoc),
// the two pages loading their scripts from the jsDelivr CDN, as FastAPI's do.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cpm {

// An OpenAPI 3.1 document listing `routes` (path, comma-separated methods) under FastAPI's
// default title and version; each operation names its route and answers 200.
std::string OpenApiJson(const std::vector<std::pair<std::string, std::string>>& routes);

// The HTML pages; both read /openapi.json.
std::string SwaggerUiHtml();
std::string RedocHtml();

}  // namespace cpm
