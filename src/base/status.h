// Status / StatusOr: the error type for everything that can fail at run time (bad files, bad
// requests). Exceptions never cross a module or thread boundary; code that can throw converts
// to Status at the point of use. Depends on nothing but the standard library.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace cpm {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // client mistake -> HTTP 400
  kNotFound,           // -> 404
  kUnauthenticated,    // -> 401
  kResourceExhausted,  // overloaded -> 503 (context too long is kInvalidArgument)
  kCancelled,
  kUnavailable,  // -> 503
  kDataLoss,     // corrupt or truncated file
  kInternal,     // -> 500
  kUnimplemented,
  kCount,
};

const char* ToString(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" style, for logs.
  std::string ToString() const;
  // Returns a copy whose message is `prefix + ": " + message`, keeping the code.
  Status WithPrefix(std::string_view prefix) const;
  // The input the error is about (a request parameter such as "temperature"), if named:
  // OpenAI's error `param`.
  const std::string& param() const { return param_; }
  Status WithParam(std::string param) const {
    Status s = *this;
    s.param_ = std::move(param);
    return s;
  }
  // The error's type as the API reports it (OpenAI's error `type`) where the code's usual one
  // does not say enough: vLLM types a 400 "Bad Request" or "BadRequestError" by where it arose.
  const std::string& type() const { return type_; }
  Status WithType(std::string type) const {
    Status s = *this;
    s.type_ = std::move(type);
    return s;
  }

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string param_;
  std::string type_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace cpm

#define CPM_STATUS_CONCAT_INNER(a, b) a##b
#define CPM_STATUS_CONCAT(a, b) CPM_STATUS_CONCAT_INNER(a, b)

#define CPM_RETURN_IF_ERROR(expr)              \
  do {                                         \
    ::cpm::Status cpm_status_ = (expr);        \
    if (!cpm_status_.ok()) return cpm_status_; \
  } while (0)

#define CPM_ASSIGN_OR_RETURN(lhs, expr) \
  CPM_ASSIGN_OR_RETURN_IMPL(CPM_STATUS_CONCAT(cpm_statusor_, __LINE__), lhs, expr)
#define CPM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
