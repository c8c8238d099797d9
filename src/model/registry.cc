#include "model/registry.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <functional>
#include <map>

#include "base/log.h"
#include "io/mmap_file.h"
#include "model/config_file.h"
#include "model/minicpm.h"
#include "model/minicpm_config.h"
#include "model/minicpmv46_vision.h"
#include "model/qwen35.h"
#include "model/qwen35_config.h"

namespace cpm {
namespace {

using Loader = std::function<StatusOr<std::unique_ptr<Model>>(
    const LoadOptions&, const std::string& config_text, const std::string& config_path,
    ThreadPool&)>;

const std::map<std::string, Loader>& Loaders() {
  static const std::map<std::string, Loader> loaders = {
      {"MiniCPMForCausalLM", &LoadMiniCpm},
      {"MiniCPMV4_6ForConditionalGeneration", &LoadQwen35},
      {"Qwen3_5ForCausalLM", &LoadQwen35},
  };
  return loaders;
}

// config.json's architectures[0], one LoadModel knows; errors name the file and the field.
StatusOr<std::string> Architecture(const std::string& text, const std::string& path) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  if (!j.is_object()) return InvalidArgument(path + ": not a JSON object");
  if (!j.contains("architectures") || !j["architectures"].is_array() ||
      j["architectures"].empty() || !j["architectures"][0].is_string()) {
    return InvalidArgument(path + ": field 'architectures' must be a non-empty list of names");
  }
  const std::string arch = j["architectures"][0].get<std::string>();
  if (Loaders().count(arch) == 0) {
    std::string known;
    for (const auto& [name, loader] : Loaders()) known += (known.empty() ? "" : ", ") + name;
    return InvalidArgument(path + ": field 'architectures': '" + arch +
                           "' is not supported (supported: " + known + ")");
  }
  return arch;
}

}  // namespace

std::vector<std::string> SupportedArchitectures() {
  std::vector<std::string> names;
  for (const auto& [name, loader] : Loaders()) names.push_back(name);
  return names;
}

StatusOr<int64_t> ConfigVocabSize(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(std::string text, ReadModelConfigText(model_dir));
  CPM_ASSIGN_OR_RETURN(const std::string arch, Architecture(text, path));
  if (arch == "MiniCPMForCausalLM") {
    CPM_ASSIGN_OR_RETURN(MiniCpmConfig c, ParseMiniCpmConfig(text, path));
    return c.vocab_size;
  }
  CPM_ASSIGN_OR_RETURN(Qwen35Config c, ParseQwen35Config(text, path));
  return c.vocab_size;
}

Status CheckModelConfig(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(std::string text, ReadModelConfigText(model_dir));
  CPM_ASSIGN_OR_RETURN(const std::string arch, Architecture(text, path));
  if (arch == "MiniCPMForCausalLM") return ParseMiniCpmConfig(text, path).status();
  CPM_RETURN_IF_ERROR(ParseQwen35Config(text, path).status());
  if (arch == "MiniCPMV4_6ForConditionalGeneration") {
    return ParseMiniCpmV46VisionConfig(text, path).status();
  }
  return OkStatus();
}

StatusOr<std::unique_ptr<Model>> LoadModel(const LoadOptions& options, ThreadPool& pool) {
  if (options.float16_requested) {
    CPM_LOG_WARN("--dtype float16: cpmserve computes in bfloat16 or float32, not float16; "
                 "running as bfloat16 (16-bit weights as asked, with float32's exponent range)");
  }
  const std::string path = (std::filesystem::path(options.model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(std::string text, ReadModelConfigText(options.model_dir));
  CPM_ASSIGN_OR_RETURN(const std::string arch, Architecture(text, path));
  return Loaders().at(arch)(options, text, path, pool);
}

StatusOr<std::unique_ptr<VisionEncoder>> LoadVisionEncoder(const LoadOptions& options,
                                                           const ModelInfo& info, ThreadPool& pool) {
  if (info.architecture != "MiniCPMV4_6ForConditionalGeneration") return std::unique_ptr<VisionEncoder>();
  const std::string path = (std::filesystem::path(options.model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(std::string text, ReadModelConfigText(options.model_dir));
  CPM_ASSIGN_OR_RETURN(MiniCpmV46VisionConfig vision, ParseMiniCpmV46VisionConfig(text, path));
  return LoadMiniCpmV46Vision(options, vision, info.hidden_size, info.dtype, pool);
}

}  // namespace cpm
