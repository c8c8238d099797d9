// OpenAI/vLLM error responses: {"error": {"message", "type", "param", "code"}} with `code` the
// HTTP status as an integer (vLLM's shape), and the mapping from Status codes to HTTP.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cpm {

struct ApiError {
  int status = 400;
  std::string type = "BadRequestError";
  std::string message;
  std::optional<std::string> param;
};

// vLLM's type for the 400s FastAPI raises while it parses a request's body (a JSON syntax
// error, a body that is not an object, pydantic's "N validation error(s):" for a field's type or
// a model validator's ValueError): its RequestValidationError handler's. Errors raised while
// serving are "BadRequestError", pydantic's own "1 validation error for <Model>" among them.
inline constexpr const char* kRequestValidationType = "Bad Request";

// A kInvalidArgument that reports as kRequestValidationType.
Status RequestValidationError(std::string message);

// kInvalidArgument -> 400 BadRequestError, kNotFound -> 404 NotFoundError, kUnauthenticated ->
// 401, kUnavailable / kResourceExhausted -> 503, kUnimplemented -> 501 NotImplementedError,
// everything else -> 500 InternalServerError; a Status's own type() replaces the code's.
ApiError ApiErrorFromStatus(const Status& status);
ApiError BadRequest(std::string message, std::optional<std::string> param = std::nullopt);

nlohmann::ordered_json ErrorJson(const ApiError& error);
// The serialized body (invalid UTF-8 in messages is replaced, never thrown on).
std::string ErrorBody(const ApiError& error);

// JSON -> text for every response: replaces invalid UTF-8 instead of throwing.
std::string DumpJson(const nlohmann::ordered_json& j);

}  // namespace cpm
