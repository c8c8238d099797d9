// How to load a model directory: the `vllm serve`-style choices that affect weights.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "kernels/matmul.h"

namespace cpm {

enum class LoadFormat { kAuto, kSafetensors, kDummy };
enum class DTypeChoice { kAuto, kBFloat16, kFloat32 };

struct LoadOptions {
  std::string model_dir;
  LoadFormat load_format = LoadFormat::kAuto;
  DTypeChoice dtype = DTypeChoice::kAuto;
  bool float16_requested = false;  // --dtype half / float16: runs as bfloat16 (LoadModel warns)
  // The engine's context length; 0 means max_position_embeddings. Picks LongRoPE's long
  // factors when larger than original_max_position_embeddings (vLLM's static rule).
  int64_t max_model_len = 0;
  // Seed of the per-tensor dummy-weight generators (vLLM uses 1234).
  uint64_t dummy_seed = 1234;
  // Dummy decoder-layer linear weights made ternary as BitCPM4's are (one scale per row), so
  // that `bench` can measure the 2-bit kernels at real dimensions. bf16 only.
  bool dummy_ternary = false;
  // vLLM's --quantization: the language model's linear weights (and head) as Q8_0 (q8.h),
  // quantized at load from the checkpoint's values. Vision towers keep their dtype.
  kernels::WeightQuant quantization = kernels::WeightQuant::kNone;
  int threads = 0;  // for parallel weight conversion; 0 = one per physical core
  bool show_progress = false;  // vLLM's progress bar on stderr while a checkpoint loads
};

bool ParseLoadFormat(const std::string& s, LoadFormat* out);  // auto | safetensors | dummy
bool ParseDTypeChoice(const std::string& s, DTypeChoice* out);  // auto | bfloat16 | float32 | ...
bool ParseQuantization(const std::string& s, kernels::WeightQuant* out);  // none | q8_0
// The three flags above into `lo`; an unknown value is an error naming its flag and the choices.
Status ParseLoadChoices(const std::string& load_format, const std::string& dtype,
                        const std::string& quantization, LoadOptions* lo);
// The --quantization flag's help, the same for every command that loads a model.
inline constexpr const char* kQuantizationHelp =
    "none | q8_0: the language model's linear weights as int8 in blocks of 32 with an fp16 "
    "scale (llama.cpp's Q8_0), activations quantized likewise at each matmul (VNNI dot "
    "products): about half the bytes of bf16, at an accuracy cost `cpmserve eval` measures";

}  // namespace cpm
