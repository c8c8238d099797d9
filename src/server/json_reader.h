// Typed, non-throwing access to the fields of a JSON request object. Every getter leaves the
// output untouched when the field is absent or null, and returns a 400-style Status naming the
// field when the type is wrong. Records which fields were read, so the rest can be reported as
// ignored.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cpm::protocol {

// Scalars are read as pydantic's lax mode reads vLLM's request models: an integer also from an
// integral float, a boolean or a string of digits ("3"); a number also from a boolean or a
// numeric string; a boolean also from 0 / 1 and pydantic's words ("true", "no", "on", ...).
// Strings stay strings (3 is not "3").
class JsonReader {
 public:
  explicit JsonReader(const nlohmann::ordered_json& object) : obj_(object) {}

  // kNoStrings: an integer field that vLLM checks before pydantic converts it (its logprobs
  // validators compare the raw value), where a string is refused.
  enum class IntForm { kLax, kNoStrings };

  Status Bool(const char* name, bool* out);
  Status OptBool(const char* name, std::optional<bool>* out);
  Status Int(const char* name, int64_t* out);
  Status OptInt(const char* name, std::optional<int64_t>* out, IntForm form = IntForm::kLax);
  Status OptNumber(const char* name, std::optional<double>* out);
  Status String(const char* name, std::string* out);
  Status OptString(const char* name, std::optional<std::string>* out);
  // A string or a list of strings (OpenAI's `stop`).
  Status StringOrList(const char* name, std::vector<std::string>* out);
  Status StringList(const char* name, std::vector<std::string>* out);
  Status IntList(const char* name, std::vector<int64_t>* out);
  Status Object(const char* name, nlohmann::ordered_json* out);
  // Any JSON value but null.
  Status Any(const char* name, std::optional<nlohmann::ordered_json>* out);
  // Marks a field as known without reading it.
  void Known(const char* name) { seen_.insert(name); }
  bool Has(const char* name) const;

  std::vector<std::string> Unknown() const;

 private:
  const nlohmann::ordered_json* Find(const char* name);

  const nlohmann::ordered_json& obj_;
  std::set<std::string> seen_;
};

// An integer as pydantic's lax mode reads one (3, 3.0, true, "3"); empty for anything else.
std::optional<int64_t> LaxInt(const nlohmann::ordered_json& v);

// The errors below are 400s FastAPI raises while it parses the body, so they report as
// RequestValidationError's (api_error.h).

// Parses a request body into an object; malformed JSON or a non-object is a 400.
StatusOr<nlohmann::ordered_json> ParseJsonObject(std::string_view body);

// vLLM/pydantic-like wording for a type error on `field`.
Status TypeError(const std::string& field, const char* expected);
// An error one of vLLM's request models raises in a model validator (a ValueError while pydantic
// reads the body): FastAPI's "1 validation error: Value error, <what>".
Status ModelValidatorError(const std::string& what);

}  // namespace cpm::protocol
