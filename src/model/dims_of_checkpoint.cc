#include "model/dims_of_checkpoint.h"

#include <nlohmann/json.hpp>

#include <filesystem>

#include "io/mmap_file.h"
#include "model/minicpm_config.h"
#include "model/qwen35_config.h"
#include "model/tiny_minicpmv46.h"
#include "tensor/dtype.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;

// Weights and their indexes, in any of the formats a model folder may carry: never copied.
bool IsWeightFile(const std::string& name) {
  for (const char* suffix : {".bin", ".bin.index.json", ".pt", ".pth", ".gguf", ".msgpack", ".h5",
                             ".onnx", ".ckpt"}) {
    if (name.ends_with(suffix)) return true;
  }
  return name.find(".safetensors") != std::string::npos;
}

// Every regular file of `from` but the weights, into `to` (writable, whatever the source's mode:
// a shared or cached folder is often read-only).
Status CopyModelFiles(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  // A new folder only: files left there (another checkpoint's shards and index, a tokenizer the
  // source lacks) would be read beside the new ones.
  if (fs::exists(to, ec) && !fs::is_empty(to, ec)) {
    return InvalidArgument(to.string() + ": exists and is not empty (make-tiny --dims-of writes "
                           "a new folder)");
  }
  fs::create_directories(to, ec);
  if (ec) return InvalidArgument(to.string() + ": cannot create: " + ec.message());
  for (const auto& e : fs::directory_iterator(from, ec)) {
    const std::string name = e.path().filename().string();
    if (!e.is_regular_file() || IsWeightFile(name)) continue;
    fs::copy_file(e.path(), to / name, ec);
    if (!ec) fs::permissions(to / name, fs::perms::owner_write, fs::perm_options::add, ec);
    if (ec) return InvalidArgument(e.path().string() + ": cannot copy: " + ec.message());
  }
  if (ec) return InvalidArgument(from.string() + ": cannot list: " + ec.message());
  return OkStatus();
}

// The copied config.json with its declared dtype ("torch_dtype", transformers 5's "dtype")
// naming the storage dtype when that differs, as the tiny writers declare theirs: `--dtype
// auto` then loads what was written.
Status DeclareStorage(nlohmann::ordered_json config, const TinyCheckpointOptions& o) {
  const std::string stored = ToString(o.storage);
  bool changed = false;
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (config.contains(key) && config[key] != stored) {
      config[key] = stored;
      changed = true;
    }
  }
  if (!changed) return OkStatus();
  return WriteTextFile((fs::path(o.out_dir) / "config.json").string(), config.dump(2));
}

}  // namespace

Status WriteCheckpointWithDimsOf(const std::string& model_dir, const TinyCheckpointOptions& o) {
  const std::string path = (fs::path(model_dir) / "config.json").string();
  CPM_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  auto json = nlohmann::ordered_json::parse(text, nullptr, false);
  if (json.is_discarded()) return InvalidArgument(path + ": not valid JSON");
  const auto arch = json.is_object() ? json.find("architectures") : json.end();
  const std::string name = arch != json.end() && arch->is_array() && !arch->empty() &&
                                   (*arch)[0].is_string()
                               ? (*arch)[0].get<std::string>()
                               : "";
  if (name == "MiniCPMForCausalLM") {
    CPM_ASSIGN_OR_RETURN(const MiniCpmConfig c, ParseMiniCpmConfig(text, path));
    CPM_RETURN_IF_ERROR(CheckTernaryStorage(o));  // before anything is written
    CPM_RETURN_IF_ERROR(CopyModelFiles(model_dir, o.out_dir));
    CPM_RETURN_IF_ERROR(DeclareStorage(json, o));
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
    CPM_RETURN_IF_ERROR(DeclareStorage(json, o));
    return WriteMiniCpmV46WeightsOf(c, v, o);
  }
  return InvalidArgument(path + ": field 'architectures' must be [\"MiniCPMForCausalLM\"] or "
                         "[\"MiniCPMV4_6ForConditionalGeneration\"] for make-tiny --dims-of");
}

}  // namespace cpm
