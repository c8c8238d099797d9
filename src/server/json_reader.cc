// Non-throwing typed JSON field access for request parsing.
#include "server/json_reader.h"

#include <cctype>
#include <charconv>
#include <string_view>
#include <cmath>
#include <cstdlib>

#include "server/api_error.h"
#include "server/json_parse.h"

namespace cpm::protocol {

using Json = nlohmann::ordered_json;

Status TypeError(const std::string& field, const char* expected) {
  return RequestValidationError("1 validation error: field '" + field + "': Input should be " +
                                expected);
}

Status ModelValidatorError(const std::string& what) {
  return RequestValidationError("1 validation error: Value error, " + what);
}

StatusOr<Json> ParseJsonObject(std::string_view body) {
  std::string error;
  Json j = ParseOrderedJson(body, &error);
  if (j.is_discarded()) return RequestValidationError("JSON decode error: the request body " + error);
  if (!j.is_object()) return RequestValidationError("The request body must be a JSON object");
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

namespace {

// `s` without the blanks around it (pydantic strips them before parsing a number).
std::string_view Trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\n\r\f\v");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\n\r\f\v") - b + 1);
}

// A boolean as pydantic's lax mode reads one.
bool ToBool(const Json& v, bool* out) {
  if (v.is_boolean()) {
    *out = v.get<bool>();
    return true;
  }
  if (v.is_number()) {
    const double d = v.get<double>();
    if (d != 0 && d != 1) return false;
    *out = d == 1;
    return true;
  }
  if (!v.is_string()) return false;
  std::string s(Trimmed(v.get_ref<const std::string&>()));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const char* const kTrue[] = {"1", "on", "t", "true", "y", "yes"};
  static const char* const kFalse[] = {"0", "off", "f", "false", "n", "no"};
  for (const char* t : kTrue) {
    if (s == t) return *out = true, true;
  }
  for (const char* f : kFalse) {
    if (s == f) return *out = false, true;
  }
  return false;
}

// An integer as pydantic's lax mode reads one: 3, 3.0, true, "3"; never 3.5 or "3.5". Empty
// when it is none, with pydantic's reason.
std::optional<int64_t> ToInt(const Json& v, JsonReader::IntForm form, const char** why) {
  *why = "a valid integer";
  if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
  // Python's integers have no bounds, so an integer beyond a 64-bit long is refused here with
  // the bound vLLM's seed declares (ge / le of a torch long), reported as pydantic reports it;
  // vLLM's other integer fields take such a number and refuse it later in their own words.
  constexpr const char* kAboveLong = "less than or equal to 9223372036854775807";
  constexpr const char* kBelowLong = "greater than or equal to -9223372036854775808";
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      *why = kAboveLong;
      return std::nullopt;
    }
    return v.get<int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d != std::floor(d)) {
      *why = "a valid integer, got a number with a fractional part";
    }
    if (!std::isfinite(d) || d != std::floor(d)) return std::nullopt;
    // An integer beyond int64: the JSON parser holds -9223372036854775809 as the double
    // -2^63, so that double counts as beyond (a float -2^63 from a client is no seed anyone
    // sends; the integer -9223372036854775808 stays an integer and passes).
    if (d >= 0x1p63 || d <= -0x1p63) {
      *why = d > 0 ? kAboveLong : kBelowLong;
      return std::nullopt;
    }
    return static_cast<int64_t>(d);
  }
  if (v.is_string() && form == JsonReader::IntForm::kLax) {
    *why = "a valid integer, unable to parse string as an integer";
    const std::string_view s = Trimmed(v.get_ref<const std::string&>());
    int64_t x = 0;
    const bool plus = !s.empty() && s[0] == '+';
    const char* begin = s.data() + plus;
    if (plus && (s.size() < 2 || s[1] == '-')) return std::nullopt;  // "+", "+-5"
    const auto [end, ec] = std::from_chars(begin, s.data() + s.size(), x);
    if (ec == std::errc::result_out_of_range && end == s.data() + s.size()) {
      *why = s[0] == '-' ? kBelowLong : kAboveLong;
      return std::nullopt;
    }
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
    return x;
  }
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> LaxInt(const Json& v) {
  const char* why = nullptr;
  return ToInt(v, JsonReader::IntForm::kLax, &why);
}

Status JsonReader::OptBool(const char* name, std::optional<bool>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  bool b = false;
  if (!ToBool(*v, &b)) return TypeError(name, "a valid boolean, unable to interpret input");
  *out = b;
  return OkStatus();
}

Status JsonReader::Int(const char* name, int64_t* out) {
  std::optional<int64_t> v;
  if (Status s = OptInt(name, &v); !s.ok()) return s;
  if (v) *out = *v;
  return OkStatus();
}

Status JsonReader::OptInt(const char* name, std::optional<int64_t>* out, IntForm form) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  const char* why = nullptr;
  const std::optional<int64_t> x = ToInt(*v, form, &why);
  if (!x) return TypeError(name, why);
  *out = x;
  return OkStatus();
}

Status JsonReader::OptNumber(const char* name, std::optional<double>* out) {
  const Json* v = Find(name);
  if (!v) return OkStatus();
  double d = 0;
  if (v->is_number()) {
    d = v->get<double>();
  } else if (v->is_boolean()) {
    d = v->get<bool>() ? 1 : 0;
  } else if (v->is_string()) {
    // Decimal text only (std::from_chars' general form: no hex, unlike strtod).
    std::string_view s = Trimmed(v->get_ref<const std::string&>());
    if (!s.empty() && s[0] == '+' && (s.size() < 2 || s[1] != '-')) s.remove_prefix(1);
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), d);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size()) {
      return TypeError(name, "a valid number, unable to parse string as a number");
    }
  } else {
    return TypeError(name, "a valid number");
  }
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
    const char* why = nullptr;
    const std::optional<int64_t> x = ToInt(e, IntForm::kLax, &why);
    if (!x) return TypeError(name, "a valid list of integers");
    out->push_back(*x);
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
