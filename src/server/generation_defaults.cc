// Reads generation_config.json into server default sampling parameters (vLLM's
// --generation-config auto|vllm|folder).
#include "server/generation_defaults.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/log.h"

namespace cpm {

namespace {
// Python's repr of a float: shortest round-trip form, always with a dot or exponent.
std::string PyFloat(double v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
}  // namespace

std::string GenerationDefaults::ToPythonDict() const {
  std::vector<std::string> items;
  if (repetition_penalty) items.push_back("'repetition_penalty': " + PyFloat(*repetition_penalty));
  if (temperature) items.push_back("'temperature': " + PyFloat(*temperature));
  if (top_k) items.push_back("'top_k': " + std::to_string(*top_k));
  if (top_p) items.push_back("'top_p': " + PyFloat(*top_p));
  if (min_p) items.push_back("'min_p': " + PyFloat(*min_p));
  if (max_tokens) items.push_back("'max_tokens': " + std::to_string(*max_tokens));
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out + "}";
}

namespace {

// The sampling fields of a generation config object `j` that it sets; `where` names it in errors.
Status MergeGenerationFields(const nlohmann::json& j, const std::string& where,
                             GenerationDefaults* d) {
  auto number = [&](const char* key, std::optional<double>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return OkStatus();
    if (!it->is_number()) return InvalidArgument(where + ": '" + key + "' is not a number");
    *out = it->get<double>();
    return OkStatus();
  };
  auto integer = [&](const char* key, std::optional<int64_t>* out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return OkStatus();
    if (!it->is_number_integer()) {
      return InvalidArgument(where + ": '" + key + "' is not an integer");
    }
    *out = it->get<int64_t>();
    return OkStatus();
  };
  CPM_RETURN_IF_ERROR(number("temperature", &d->temperature));
  CPM_RETURN_IF_ERROR(number("top_p", &d->top_p));
  CPM_RETURN_IF_ERROR(integer("top_k", &d->top_k));
  CPM_RETURN_IF_ERROR(number("min_p", &d->min_p));
  CPM_RETURN_IF_ERROR(number("repetition_penalty", &d->repetition_penalty));
  CPM_RETURN_IF_ERROR(integer("max_new_tokens", &d->max_tokens));
  return OkStatus();
}

}  // namespace

Status ApplyGenerationOverrides(const std::string& json, GenerationDefaults* d) {
  if (json.empty()) return OkStatus();
  const auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument("--override-generation-config: not a JSON object: " + json);
  }
  return MergeGenerationFields(j, "--override-generation-config", d);
}

StatusOr<GenerationDefaults> LoadGenerationDefaults(const std::string& choice,
                                                    const std::string& model_dir) {
  GenerationDefaults d;
  if (choice == "vllm") return d;
  const std::string dir = choice == "auto" ? model_dir : choice;
  const std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    // vLLM's try_get_generation_config gives None for a folder without one: no defaults.
    if (choice != "auto") {
      CPM_LOG_WARN("--generation-config: {} does not exist; no sampling defaults from it",
                   path.string());
    }
    return d;
  }
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  const auto j = nlohmann::json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(path.string() + ": not a JSON object");
  }
  CPM_RETURN_IF_ERROR(MergeGenerationFields(j, path.string(), &d));
  return d;
}

}  // namespace cpm
