// Error JSON in vLLM's shape, and Status -> HTTP status mapping.
#include "server/api_error.h"

#include <cctype>
#include <string_view>

namespace cpm {
namespace {

// Whether a 400's message is one that vLLM's request models raise while FastAPI parses the
// body (FastAPI's "N validation error(s):" for a field's type or a model validator, a JSON
// syntax error, a body that is not an object): FastAPI raises those as RequestValidationError,
// whose vLLM handler types them "Bad Request"; errors raised while serving are
// "BadRequestError", pydantic's own "1 validation error for <Model>" among them.
bool IsRequestValidationMessage(std::string_view m) {
  size_t digits = 0;
  while (digits < m.size() && std::isdigit(static_cast<unsigned char>(m[digits]))) ++digits;
  const std::string_view rest = m.substr(digits);
  if (digits > 0 && (rest.starts_with(" validation error:") ||
                     rest.starts_with(" validation errors:"))) {
    return true;
  }
  return m.starts_with("JSON decode error") ||
         m.starts_with("The request body must be a JSON object");
}

}  // namespace

ApiError ApiErrorFromStatus(const Status& status) {
  ApiError e;
  e.message = status.message();
  if (!status.param().empty()) e.param = status.param();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      e.status = 400;
      e.type = IsRequestValidationMessage(e.message) ? "Bad Request" : "BadRequestError";
      break;
    case StatusCode::kNotFound:
      e.status = 404;
      e.type = "NotFoundError";
      break;
    case StatusCode::kUnauthenticated:
      e.status = 401;
      e.type = "AuthenticationError";
      break;
    case StatusCode::kUnavailable:
    case StatusCode::kResourceExhausted:
      e.status = 503;
      e.type = "ServiceUnavailableError";
      break;
    case StatusCode::kUnimplemented:
      e.status = 501;
      e.type = "NotImplementedError";
      break;
    default:
      e.status = 500;
      e.type = "InternalServerError";
      break;
  }
  return e;
}

ApiError BadRequest(std::string message, std::optional<std::string> param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

nlohmann::ordered_json ErrorJson(const ApiError& error) {
  nlohmann::ordered_json inner;
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param ? nlohmann::ordered_json(*error.param) : nlohmann::ordered_json();
  inner["code"] = error.status;
  nlohmann::ordered_json out;
  out["error"] = std::move(inner);
  return out;
}

std::string DumpJson(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string ErrorBody(const ApiError& error) { return DumpJson(ErrorJson(error)); }

}  // namespace cpm
