// The Qwen3.5 hybrid text config (MiniCPM-V-4.6's language model, or a plain Qwen3.5 LM) and
// MiniCPM-V-4.6's vision config, read from config.json: nested under "text_config" /
// "vision_config" for MiniCPMV4_6ForConditionalGeneration, flat for Qwen3_5ForCausalLM.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace cpm {

struct Qwen35Config {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  std::vector<bool> full_attention;  // [num_hidden_layers]: layer_types[i] == "full_attention"
  // Gated full attention.
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  bool attn_output_gate = true;       // q_proj holds per-head [query | gate]
  int64_t rotary_dim = 0;             // int(head_dim · partial_rotary_factor)
  double rope_theta = 10000.0;
  // Gated DeltaNet.
  int64_t linear_num_key_heads = 0;
  int64_t linear_num_value_heads = 0;
  int64_t linear_key_head_dim = 0;
  int64_t linear_value_head_dim = 0;
  int64_t linear_conv_kernel_dim = 0;
  // Shared.
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = true;
  std::string torch_dtype;            // "bfloat16", "float32", ... or empty (none declared)
  std::vector<int32_t> eos_token_id;
  std::string weight_prefix;          // "model.language_model." (MiniCPM-V-4.6) or "model."

  int64_t key_dim() const { return linear_num_key_heads * linear_key_head_dim; }
  int64_t value_dim() const { return linear_num_value_heads * linear_value_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }
  int64_t num_full_layers() const;
};

// MiniCPM-V-4.6's SigLIP tower with the ViT merger inside it and the MLP merger after it.
struct MiniCpmV46VisionConfig {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_channels = 3;
  int64_t patch_size = 0;
  int64_t image_size = 0;       // position table: (image_size / patch_size)² rows
  int64_t insert_layer_id = 6;  // the ViT merger runs after this encoder layer
  double layer_norm_eps = 1e-6;
  // The default mode, "16x" (HF's): the ViT window merger runs inside the tower, a slice of h×w
  // patches gives (h/4)(w/4) embeddings; "4x": no window merger, (h/2)(w/2). A request may ask
  // for the other (VisionEncoder::Supports).
  bool vit_merger = true;
  bool drop_vision_last_layer = false;  // the last encoder layer is skipped when true

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t position_grid() const { return image_size / patch_size; }  // 70 in the real config
};

// Parses the text model of `architecture` (MiniCPMV4_6ForConditionalGeneration or
// Qwen3_5ForCausalLM) from `config_text`; `path` names the file in errors.
StatusOr<Qwen35Config> ParseQwen35Config(const std::string& config_text, const std::string& path);

// Parses "vision_config" and "insert_layer_id" of a MiniCPM-V-4.6 config.json.
StatusOr<MiniCpmV46VisionConfig> ParseMiniCpmV46VisionConfig(const std::string& config_text,
                                                             const std::string& path);

}  // namespace cpm
