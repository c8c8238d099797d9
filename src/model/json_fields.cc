#include "model/json_fields.h"

#include <cstdint>

namespace cpm {

StatusOr<nlohmann::json> ParseJsonConfig(const std::string& text, const std::string& path) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(path + ": not a JSON object");
  return j;
}

Status JsonFields::Error(const std::string& key, const std::string& what) const {
  return InvalidArgument(where_ + ": field '" + key + "' " + what);
}

bool JsonFields::Has(const std::string& key) const {
  return obj_.is_object() && obj_.contains(key) && !obj_[key].is_null();
}

Status JsonFields::Int(const std::string& key, int64_t* out) const {
  if (!Has(key)) return Error(key, "is missing");
  const auto& v = obj_[key];
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return OkStatus();
  }
  if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))) {
    *out = static_cast<int64_t>(v.get<double>());
    return OkStatus();
  }
  return Error(key, "must be an integer, got " + v.dump());
}

Status JsonFields::Float(const std::string& key, double* out) const {
  if (!Has(key)) return Error(key, "is missing");
  const auto& v = obj_[key];
  if (!v.is_number()) return Error(key, "must be a number, got " + v.dump());
  *out = v.get<double>();
  return OkStatus();
}

Status JsonFields::String(const std::string& key, std::string* out) const {
  if (!Has(key)) return Error(key, "is missing");
  const auto& v = obj_[key];
  if (!v.is_string()) return Error(key, "must be a string, got " + v.dump());
  *out = v.get<std::string>();
  return OkStatus();
}

Status JsonFields::OptInt(const std::string& key, int64_t* out) const {
  return Has(key) ? Int(key, out) : OkStatus();
}
Status JsonFields::OptFloat(const std::string& key, double* out) const {
  return Has(key) ? Float(key, out) : OkStatus();
}
Status JsonFields::OptString(const std::string& key, std::string* out) const {
  return Has(key) ? String(key, out) : OkStatus();
}
Status JsonFields::OptBool(const std::string& key, bool* out) const {
  if (!Has(key)) return OkStatus();
  const auto& v = obj_[key];
  if (!v.is_boolean()) return Error(key, "must be true or false, got " + v.dump());
  *out = v.get<bool>();
  return OkStatus();
}

Status JsonFields::FloatList(const std::string& key, std::vector<double>* out) const {
  if (!Has(key)) return Error(key, "is missing");
  const auto& v = obj_[key];
  if (!v.is_array()) return Error(key, "must be a list of numbers");
  out->clear();
  for (const auto& e : v) {
    if (!e.is_number()) return Error(key, "must be a list of numbers, found " + e.dump());
    out->push_back(e.get<double>());
  }
  return OkStatus();
}

Status JsonFields::IntOrIntList(const std::string& key, std::vector<int32_t>* out) const {
  out->clear();
  if (!Has(key)) return OkStatus();
  const auto& v = obj_[key];
  if (v.is_number_integer()) {
    out->push_back(v.get<int32_t>());
    return OkStatus();
  }
  if (!v.is_array()) return Error(key, "must be an integer or a list of integers");
  for (const auto& e : v) {
    if (!e.is_number_integer()) return Error(key, "must be a list of integers");
    out->push_back(e.get<int32_t>());
  }
  return OkStatus();
}

StatusOr<JsonFields> JsonFields::Object(const std::string& key) const {
  if (!Has(key)) return Error(key, "is missing");
  if (!obj_[key].is_object()) return Error(key, "must be an object");
  return JsonFields(obj_[key], where_ + ": " + key);
}

Status CheckConfigSizes(const std::string& where, std::initializer_list<ConfigSize> sizes) {
  for (const ConfigSize& s : sizes) {
    const std::string field = where + ": field '" + s.name + "'";
    if (s.value <= 0) return InvalidArgument(field + " must be > 0");
    if (s.value > s.max) {
      return InvalidArgument(field + " = " + std::to_string(s.value) + " is beyond " +
                             std::to_string(s.max) + ", more than any checkpoint has");
    }
  }
  return OkStatus();
}

}  // namespace cpm
