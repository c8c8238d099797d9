#include "base/status.h"

namespace cpm {

const char* ToString(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kUnauthenticated: return "UNAUTHENTICATED";
    case StatusCode::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case StatusCode::kCancelled: return "CANCELLED";
    case StatusCode::kUnavailable: return "UNAVAILABLE";
    case StatusCode::kDataLoss: return "DATA_LOSS";
    case StatusCode::kInternal: return "INTERNAL";
    case StatusCode::kUnimplemented: return "UNIMPLEMENTED";
    case StatusCode::kCount: break;
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(cpm::ToString(code_)) + ": " + message_;
}

Status Status::WithPrefix(std::string_view prefix) const {
  if (ok()) return *this;
  Status s = *this;  // code, param and type kept
  s.message_ = std::string(prefix) + ": " + message_;
  return s;
}

}  // namespace cpm
