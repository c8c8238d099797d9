#include "model/dims_of_checkpoint.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "io/mmap_file.h"
#include "model/minicpm_config.h"
#include "model/qwen35_config.h"
#include "model/tiny_minicpmv46.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;

bool IsWeightFile(const std::string& name) {
  return name.find(".safetensors") != std::string::npos || name.ends_with(".bin") ||
         name.ends_with(".pt") || name.ends_with(".pth") || name.ends_with(".gguf");
}

// Every regular file of `from` but the weights, into `to` (writable, whatever the source's mode:
// a shared or cached folder is often read-only).
Status CopyModelFiles(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_directories(to, ec);
  if (ec) return InvalidArgument(to.string() + ": cannot create: " + ec.message());
  for (const auto& e : fs::directory_iterator(from, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || IsWeightFile(name)) continue;
    fs::copy_file(e.path(), to / name, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::permissions(to / name, fs::perms::owner_write, fs::perm_options::add, ec);
    if (ec) return InvalidArgument(e.path().string() + ": cannot copy: " + ec.message());
  }
  if (ec) return InvalidArgument(from.string() + ": cannot list: " + ec.message());
  return OkStatus();
}

}  // namespace

Status WriteCheckpointWithDimsOf(const std::string& model_dir, const TinyCheckpointOptions& o) {
  const std::string path = (fs::path(model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  const auto json = nlohmann::json::parse(text, nullptr, false);
  const auto arch = json.is_object() ? json.find("architectures") : json.end();
  const std::string name = arch != json.end() && arch->is_array() && !arch->empty() &&
                                   (*arch)[0].is_string()
                               ? (*arch)[0].get<std::string>()
                               : "";
  if (name == "MiniCPMForCausalLM") {
    CPM_ASSIGN_OR_RETURN(const MiniCpmConfig c, ParseMiniCpmConfig(text, path));
    CPM_RETURN_IF_ERROR(CopyModelFiles(model_dir, o.out_dir));
    return WriteMiniCpmWeightsOf(c, o);
  }
  if (name == "MiniCPMV4_6ForConditionalGeneration") {
    CPM_ASSIGN_OR_RETURN(const Qwen35Config c, ParseQwen35Config(text, path));
    CPM_ASSIGN_OR_RETURN(const MiniCpmV46VisionConfig v, ParseMiniCpmV46VisionConfig(text, path));
    if (o.ternary_group > 0) {
      return InvalidArgument("ternary weights are BitCPM4's (MiniCPMForCausalLM), not " +
                             name + "'s");
    }
    CPM_RETURN_IF_ERROR(CopyModelFiles(model_dir, o.out_dir));
    return WriteMiniCpmV46WeightsOf(c, v, o);
  }
  return InvalidArgument(path + ": field 'architectures' must be [\"MiniCPMForCausalLM\"] or "
                         "[\"MiniCPMV4_6ForConditionalGeneration\"] for make-tiny --dims-of");
}

}  // namespace cpm
