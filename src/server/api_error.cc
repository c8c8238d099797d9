// Error JSON in vLLM's shape, and Status -> HTTP status mapping.
#include "server/api_error.h"

#include <utility>

namespace cpm {

Status RequestValidationError(std::string message) {
  return InvalidArgument(std::move(message)).WithType(kRequestValidationType);
}

ApiError ApiErrorFromStatus(const Status& status) {
  ApiError e;
  e.message = status.message();
  if (!status.param().empty()) e.param = status.param();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      e.status = 400;
      e.type = "BadRequestError";
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
  if (!status.type().empty()) e.type = status.type();
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
