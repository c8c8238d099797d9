// Typed reads of config.json fields with errors that name the file and the field.
// nlohmann::json throws; these never do.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace cpm {

// Config sizes (widths, counts of heads or layers) are positive and no larger than any checkpoint
// has, so that nothing is sized by 10^12 layers or channels before a tensor is looked at:
// kMaxConfigSize, kMaxConfigLayers for layer counts (per-layer tensor lists are built first).
constexpr int64_t kMaxConfigSize = int64_t{1} << 24;
constexpr int64_t kMaxConfigLayers = 4096;
struct ConfigSize {
  const char* name;
  int64_t value;
  int64_t max = kMaxConfigSize;
};
// The first size not in [1, max] as an error naming `where` and the field.
Status CheckConfigSizes(const std::string& where, std::initializer_list<ConfigSize> sizes);

// The JSON object in `text` (a config file's contents), or an error naming `path`.
StatusOr<nlohmann::json> ParseJsonConfig(const std::string& text, const std::string& path);

class JsonFields {
 public:
  JsonFields(const nlohmann::json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  bool Has(const std::string& key) const;
  Status Int(const std::string& key, int64_t* out) const;       // required
  Status Float(const std::string& key, double* out) const;      // required (int or float)
  Status String(const std::string& key, std::string* out) const;
  // Optional forms keep `*out` when the key is absent or null.
  Status OptInt(const std::string& key, int64_t* out) const;
  Status OptFloat(const std::string& key, double* out) const;
  Status OptBool(const std::string& key, bool* out) const;
  Status OptString(const std::string& key, std::string* out) const;
  Status FloatList(const std::string& key, std::vector<double>* out) const;
  // An int or a list of ints (eos_token_id); absent -> empty.
  Status IntOrIntList(const std::string& key, std::vector<int32_t>* out) const;
  // A nested object; error if absent or not an object.
  StatusOr<JsonFields> Object(const std::string& key) const;
  const nlohmann::json& json() const { return obj_; }
  const std::string& where() const { return where_; }

 private:
  Status Error(const std::string& key, const std::string& what) const;
  const nlohmann::json& obj_;
  std::string where_;
};

}  // namespace cpm
