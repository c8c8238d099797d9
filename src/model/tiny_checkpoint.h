// Writes random checkpoints with the real tensor names, layouts and config keys of an
// architecture, for tests and demos (`cpmserve make-tiny`): small ones, and the weights at a
// published config's full dimensions (dims_of_checkpoint.h). Deterministic for a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "model/minicpm_config.h"
#include "tensor/dtype.h"

namespace cpm {

struct TinyCheckpointOptions {
  std::string out_dir;
  uint64_t seed = 0;
  int64_t vocab_size = 0;       // must match the tokenizer written beside it
  DType storage = DType::kBF16;  // safetensors dtype
  int num_shards = 1;           // >1 writes model.safetensors.index.json
  bool tie_word_embeddings = true;
  std::vector<int32_t> eos_token_id;
  int32_t bos_token_id = 1;
  // BitCPM4-style: the decoder layers' linear weights quantised to ternary as BitCPM's
  // quantiser does (kernels/ternary.h), with a scale per `ternary_group` inputs (≥ hidden and
  // FFN sizes: per row; ternary_per_tensor: one for the tensor). 0: real-valued. bf16 only.
  int64_t ternary_group = 0;
  bool ternary_per_tensor = false;
  // The released models' per-head shapes at small widths and depths, so that kernels and
  // references meet the head sizes real checkpoints have: MiniCPM4 head_dim 64 with 8 query
  // heads per KV head; MiniCPM-V-4.6 head_dim 256 with 4 query heads per KV head, Gated DeltaNet
  // heads of 128, and vision heads of 72 on the real 70 x 70 position grid.
  bool real_heads = false;
};

// MiniCPMForCausalLM: hidden 64, 2 layers, 4 heads / 2 KV heads (head_dim 16), FFN 128 (with
// real_heads: hidden 512, 8 heads / 1 KV head of 64, FFN 512), LongRoPE with short != long and
// original_max (64) < max_position_embeddings (256).
Status WriteTinyMiniCpm(const TinyCheckpointOptions& options);

// Writes `weights` into options.out_dir as model.safetensors, or options.num_shards shards with
// their index, after removing the folder's earlier safetensors weights: a checkpoint written
// again into a folder must not be read beside the shards or index of the one before.
Status WriteCheckpointWeights(const SafetensorsWriter& weights, const TinyCheckpointOptions& options);

// Ternary weights are BitCPM4's bf16: any other storage dtype is refused.
Status CheckTernaryStorage(const TinyCheckpointOptions& options);

// Random weights of `config`'s shapes into options.out_dir, drawn as WriteTinyMiniCpm draws
// them (the config file itself is the caller's: see dims_of_checkpoint.h).
Status WriteMiniCpmWeightsOf(const MiniCpmConfig& config, const TinyCheckpointOptions& options);

}  // namespace cpm
