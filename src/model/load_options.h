// How to load a model directory: the `vllm serve`-style choices that affect weights.
#pragma once

#include <cstdint>
#include <string>

namespace cpm {

enum class LoadFormat { kAuto, kSafetensors, kDummy };
enum class DTypeChoice { kAuto, kBFloat16, kFloat32 };

struct LoadOptions {
  std::string model_dir;
  LoadFormat load_format = LoadFormat::kAuto;
  DTypeChoice dtype = DTypeChoice::kAuto;
  // The engine's context length; 0 means max_position_embeddings. Picks LongRoPE's long
  // factors when larger than original_max_position_embeddings (vLLM's static rule).
  int64_t max_model_len = 0;
  // Seed of the per-tensor dummy-weight generators (vLLM uses 1234).
  uint64_t dummy_seed = 1234;
  // Dummy decoder-layer linear weights made ternary as BitCPM4's are (one scale per row), so
  // that `bench` can measure the 2-bit kernels at real dimensions. bf16 only.
  bool dummy_ternary = false;
  int threads = 0;  // for parallel weight conversion; 0 = all CPUs
  bool show_progress = false;  // vLLM's progress bar on stderr while a checkpoint loads
};

bool ParseLoadFormat(const std::string& s, LoadFormat* out);  // auto | safetensors | dummy
bool ParseDTypeChoice(const std::string& s, DTypeChoice* out);  // auto | bfloat16 | float32 | ...

}  // namespace cpm
