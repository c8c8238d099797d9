// MiniCPMForCausalLM's config.json (MiniCPM4-0.5B, BitCPM4-0.5B), with the defaults the HF
// remote code applies to keys the published file omits (rope_theta, tie_word_embeddings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace cpm {

struct MiniCpmConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_attention_heads (not a config key)
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double scale_emb = 1.0;
  double dim_model_base = 1.0;
  double scale_depth = 1.0;
  bool tie_word_embeddings = true;
  std::string torch_dtype;  // "bfloat16", "float32", ... or empty
  std::vector<int32_t> eos_token_id;

  // rope_scaling {rope_type: longrope}; empty factor lists mean plain RoPE.
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  int64_t original_max_position_embeddings = 0;

  bool longrope() const { return !short_factor.empty(); }
};

// Parses and validates `config_text`; `path` names the file in errors.
StatusOr<MiniCpmConfig> ParseMiniCpmConfig(const std::string& config_text, const std::string& path);

}  // namespace cpm
