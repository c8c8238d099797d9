// Non-throwing typed JSON field access for request parsing.
#include "server/json_reader.h"

#include <cmath>

#include "server/json_parse.h"

namespace cpm::protocol {

using Json = nlohmann::ordered_json;

Status TypeError(const std::string& field, const char* expected) {
  return InvalidArgument("1 validation error: field '" + field + "': Input should be " +
                         expected);
}

StatusOr<Json> ParseJsonObject(std::string_view body) {
  std::string error;
  Json j = ParseOrderedJson(body, &error);
  if (j.is_discarded()) return InvalidArgument("JSON decode error: the request body " + error);
  if (!j.is_object()) return InvalidArgument("The request body must be a JSON object");
  return j;
}

const Json* JsonReader::Find(const char* name) {
  seen_.insert(name);
  auto it = obj_.find(name);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonReader::Has(const char* name) const {
  auto it = obj_.find(name);
  return it != obj_.end() && !it->is_null();
}

Status JsonReader::Bool(const char* name, bool* out) {
  std::optional<bool> v;
  if (Status s = OptBool(name, &v); !s.ok()) return s;
  if (v) *out = *v;
  return OkStatus();
}

Status JsonReader::OptBool(const char* name, std::optional<bool>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  if (!v->is_boolean()) return TypeError(name, "a valid boolean");
  *out = v->get<bool>();
  return OkStatus();
}

// Integers may come as 3 or 3.0 (pydantic's lax mode), never as 3.5 or "3".
static bool ToInt(const Json& v, int64_t* out) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      return false;
    }
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9.0e18) return false;
    *out = static_cast<int64_t>(d);
    return true;
  }
  return false;
}

Status JsonReader::Int(const char* name, int64_t* out) {
  std::optional<int64_t> v;
  if (Status s = OptInt(name, &v); !s.ok()) return s;
  if (v) *out = *v;
  return OkStatus();
}

Status JsonReader::OptInt(const char* name, std::optional<int64_t>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  int64_t x = 0;
  if (v->is_boolean() || !ToInt(*v, &x)) return TypeError(name, "a valid integer");
  *out = x;
  return OkStatus();
}

Status JsonReader::OptNumber(const char* name, std::optional<double>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  if (!v->is_number()) return TypeError(name, "a valid number");
  const double d = v->get<double>();
  if (!std::isfinite(d)) return TypeError(name, "a finite number");
  *out = d;
  return OkStatus();
}

Status JsonReader::String(const char* name, std::string* out) {
  std::optional<std::string> v;
  if (Status s = OptString(name, &v); !s.ok()) return s;
  if (v) *out = *v;
  return OkStatus();
}

Status JsonReader::OptString(const char* name, std::optional<std::string>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  if (!v->is_string()) return TypeError(name, "a valid string");
  *out = v->get<std::string>();
  return OkStatus();
}

namespace {

// `v`'s strings if it is an array of strings only.
bool StringsOf(const Json& v, std::vector<std::string>* out) {
  if (!v.is_array()) return false;
  std::vector<std::string> strings;
  for (const Json& e : v) {
    if (!e.is_string()) return false;
    strings.push_back(e.get<std::string>());
  }
  *out = std::move(strings);
  return true;
}

}  // namespace

Status JsonReader::StringOrList(const char* name, std::vector<std::string>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  if (v->is_string()) {
    out->assign(1, v->get<std::string>());
    return OkStatus();
  }
  if (!StringsOf(*v, out)) return TypeError(name, "a valid string or a list of strings");
  return OkStatus();
}

Status JsonReader::StringList(const char* name, std::vector<std::string>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  if (!StringsOf(*v, out)) return TypeError(name, "a valid list of strings");
  return OkStatus();
}

Status JsonReader::IntList(const char* name, std::vector<int64_t>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  if (!v->is_array()) return TypeError(name, "a valid list of integers");
  out->clear();
  for (const Json& e : *v) {
    int64_t x = 0;
    if (e.is_boolean() || !ToInt(e, &x)) return TypeError(name, "a valid list of integers");
    out->push_back(x);
  }
  return OkStatus();
}

Status JsonReader::Object(const char* name, Json* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  if (!v->is_object()) return TypeError(name, "a valid dictionary");
  *out = *v;
  return OkStatus();
}

Status JsonReader::Any(const char* name, std::optional<Json>* out) {
  const Json* v = Find(name);
  if (v) *out = *v;
  return OkStatus();
}

std::vector<std::string> JsonReader::Unknown() const {
  std::vector<std::string> out;
  for (auto it = obj_.begin(); it != obj_.end(); ++it) {
    if (!seen_.count(it.key())) out.push_back(it.key());
  }
  return out;
}

}  // namespace cpm::protocol
