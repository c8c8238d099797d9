#include "model/config_file.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "io/mmap_file.h"

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

Json& Overrides() {
  static Json overrides;  // null: none
  return overrides;
}

// The keys of these models' configs that hold a sub-config (a PretrainedConfig in
// transformers), into which vLLM's _apply_dict_overrides recurses; any other value, a dict such
// as rope_scaling included, it replaces whole.
bool IsSubConfig(const std::string& key) { return key == "text_config" || key == "vision_config"; }

// `over`'s keys into `base`, as vLLM applies --hf-overrides.
void MergeInto(Json& base, const Json& over) {
  for (auto it = over.begin(); it != over.end(); ++it) {
    Json& slot = base[it.key()];
    if (IsSubConfig(it.key()) && it->is_object() && slot.is_object()) {
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
  if (j.is_discarded() || !j.is_object()) {
    CPM_LOG_WARN("{}: not a JSON object, so --hf-overrides cannot apply", path);
    return text;  // its readers say what is wrong
  }
  MergeInto(j, Overrides());
  return j.dump(2);
}

}  // namespace cpm
