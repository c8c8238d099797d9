#include "model/config_file.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "io/mmap_file.h"

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

Json& Overrides() {
  static Json overrides;  // null: none
  return overrides;
}

// `over`'s keys into `base`: objects merged key by key, anything else replaced.
void MergeInto(Json& base, const Json& over) {
  for (auto it = over.begin(); it != over.end(); ++it) {
    Json& slot = base[it.key()];
    if (it->is_object() && slot.is_object()) {
      MergeInto(slot, *it);
    } else {
      slot = *it;
    }
  }
}

}  // namespace

Status SetHfOverrides(const std::string& json) {
  if (json.empty()) {
    Overrides() = Json();
    return OkStatus();
  }
  Json j = Json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("--hf-overrides: not a JSON object: " + json);
  }
  Overrides() = std::move(j);
  return OkStatus();
}

StatusOr<std::string> ReadModelConfigText(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
  if (Overrides().is_null()) return text;
  Json j = Json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return text;  // its readers say what is wrong
  MergeInto(j, Overrides());
  return j.dump(2);
}

}  // namespace cpm
