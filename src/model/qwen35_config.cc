// Parsing and validation of the Qwen3.5 text config and the MiniCPM-V-4.6 vision config.
#include "model/qwen35_config.h"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/json_fields.h"

namespace cpm {
namespace {

// layer_types when present, else HF's rule: layer i is full iff (i+1) % interval == 0.
Status ParseLayerTypes(const JsonFields& f, Qwen35Config* c) {
  c->full_attention.assign(c->num_hidden_layers, false);
  if (!f.Has("layer_types")) {
    int64_t interval = 4;
    CPM_RETURN_IF_ERROR(f.OptInt("full_attention_interval", &interval));
    if (interval <= 0) return InvalidArgument(f.where() + ": field 'full_attention_interval' must be > 0");
    for (int64_t i = 0; i < c->num_hidden_layers; ++i) c->full_attention[i] = (i + 1) % interval == 0;
    return OkStatus();
  }
  const nlohmann::json& v = f.json()["layer_types"];
  if (!v.is_array() || static_cast<int64_t>(v.size()) != c->num_hidden_layers) {
    return InvalidArgument(f.where() + ": field 'layer_types' must list num_hidden_layers = " +
                           std::to_string(c->num_hidden_layers) + " layer types");
  }
  for (int64_t i = 0; i < c->num_hidden_layers; ++i) {
    const std::string t = v[i].is_string() ? v[i].get<std::string>() : v[i].dump();
    if (t == "full_attention") c->full_attention[i] = true;
    else if (t != "linear_attention")
      return InvalidArgument(f.where() + ": field 'layer_types'[" + std::to_string(i) + "]: '" + t +
                             "' is not supported (expected full_attention or linear_attention)");
  }
  return OkStatus();
}

// rope_parameters (transformers 5) or the older flat rope_theta / partial_rotary_factor.
Status ParseRope(const JsonFields& f, Qwen35Config* c) {
  double partial = 0.25;  // HF Qwen3.5 default
  CPM_RETURN_IF_ERROR(f.OptFloat("rope_theta", &c->rope_theta));
  CPM_RETURN_IF_ERROR(f.OptFloat("partial_rotary_factor", &partial));
  if (f.Has("rope_parameters")) {
    CPM_ASSIGN_OR_RETURN(JsonFields rp, f.Object("rope_parameters"));
    std::string type = "default";
    CPM_RETURN_IF_ERROR(rp.OptString("rope_type", &type));
    if (type != "default") {
      return InvalidArgument(rp.where() + ": rope_type '" + type + "' is not supported (expected default)");
    }
    CPM_RETURN_IF_ERROR(rp.OptFloat("rope_theta", &c->rope_theta));
    CPM_RETURN_IF_ERROR(rp.OptFloat("partial_rotary_factor", &partial));
  }
  if (!(c->rope_theta > 0)) return InvalidArgument(f.where() + ": rope_theta must be > 0");
  c->rotary_dim = static_cast<int64_t>(static_cast<double>(c->head_dim) * partial);
  if (c->rotary_dim <= 0 || c->rotary_dim % 2 != 0 || c->rotary_dim > c->head_dim) {
    return InvalidArgument(f.where() + ": partial_rotary_factor gives rotary dim " +
                           std::to_string(c->rotary_dim) + " (must be even, in (0, head_dim])");
  }
  return OkStatus();
}

}  // namespace

int64_t Qwen35Config::num_full_layers() const {
  int64_t n = 0;
  for (bool f : full_attention) n += f;
  return n;
}

StatusOr<Qwen35Config> ParseQwen35Config(const std::string& config_text, const std::string& path) {
  CPM_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJsonConfig(config_text, path));
  JsonFields top(j, path);
  const bool nested = top.Has("text_config");
  Qwen35Config c;
  c.weight_prefix = nested ? "model.language_model." : "model.";
  const nlohmann::json& tj = nested ? j["text_config"] : j;
  if (!tj.is_object()) return InvalidArgument(path + ": field 'text_config' must be an object");
  JsonFields f(tj, nested ? path + ": text_config" : path);
  CPM_RETURN_IF_ERROR(f.Int("hidden_size", &c.hidden_size));
  CPM_RETURN_IF_ERROR(f.Int("intermediate_size", &c.intermediate_size));
  CPM_RETURN_IF_ERROR(f.Int("num_hidden_layers", &c.num_hidden_layers));
  CPM_RETURN_IF_ERROR(f.Int("num_attention_heads", &c.num_attention_heads));
  CPM_RETURN_IF_ERROR(f.Int("num_key_value_heads", &c.num_key_value_heads));
  CPM_RETURN_IF_ERROR(f.Int("linear_num_key_heads", &c.linear_num_key_heads));
  CPM_RETURN_IF_ERROR(f.Int("linear_num_value_heads", &c.linear_num_value_heads));
  CPM_RETURN_IF_ERROR(f.Int("linear_key_head_dim", &c.linear_key_head_dim));
  CPM_RETURN_IF_ERROR(f.Int("linear_value_head_dim", &c.linear_value_head_dim));
  CPM_RETURN_IF_ERROR(f.Int("linear_conv_kernel_dim", &c.linear_conv_kernel_dim));
  CPM_RETURN_IF_ERROR(f.Int("vocab_size", &c.vocab_size));
  CPM_RETURN_IF_ERROR(f.Int("max_position_embeddings", &c.max_position_embeddings));
  CPM_RETURN_IF_ERROR(f.Float("rms_norm_eps", &c.rms_norm_eps));
  CPM_RETURN_IF_ERROR(f.OptBool("attn_output_gate", &c.attn_output_gate));
  // max_position_embeddings is bounded at load, by the memory its RoPE table takes.
  CPM_RETURN_IF_ERROR(CheckConfigSizes(f.where(), {
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers, kMaxConfigLayers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"linear_num_key_heads", c.linear_num_key_heads},
      {"linear_num_value_heads", c.linear_num_value_heads},
      {"linear_key_head_dim", c.linear_key_head_dim},
      {"linear_value_head_dim", c.linear_value_head_dim},
      {"linear_conv_kernel_dim", c.linear_conv_kernel_dim},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings, INT64_MAX},
  }));
  c.head_dim = c.hidden_size / c.num_attention_heads;
  CPM_RETURN_IF_ERROR(f.OptInt("head_dim", &c.head_dim));
  CPM_RETURN_IF_ERROR(CheckConfigSizes(f.where(), {{"head_dim", c.head_dim}}));
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return InvalidArgument(f.where() + ": num_attention_heads must be a multiple of num_key_value_heads");
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    return InvalidArgument(f.where() + ": linear_num_value_heads must be a multiple of linear_num_key_heads");
  if (c.linear_value_head_dim > 1024)
    return InvalidArgument(f.where() + ": linear_value_head_dim above 1024 is not supported");
  std::string act = "silu";
  CPM_RETURN_IF_ERROR(f.OptString("hidden_act", &act));
  if (act != "silu") return InvalidArgument(f.where() + ": field 'hidden_act' must be \"silu\", got \"" + act + "\"");
  CPM_RETURN_IF_ERROR(ParseLayerTypes(f, &c));
  CPM_RETURN_IF_ERROR(ParseRope(f, &c));
  // Top level wins (HF reads tie_word_embeddings from the outer config of a VLM).
  CPM_RETURN_IF_ERROR(f.OptBool("tie_word_embeddings", &c.tie_word_embeddings));
  CPM_RETURN_IF_ERROR(top.OptBool("tie_word_embeddings", &c.tie_word_embeddings));
  for (const JsonFields* src : {&f, &top}) {  // "dtype" (transformers 5) or "torch_dtype"
    CPM_RETURN_IF_ERROR(src->OptString("torch_dtype", &c.torch_dtype));
    CPM_RETURN_IF_ERROR(src->OptString("dtype", &c.torch_dtype));
  }
  CPM_RETURN_IF_ERROR(f.IntOrIntList("eos_token_id", &c.eos_token_id));
  if (top.Has("eos_token_id")) CPM_RETURN_IF_ERROR(top.IntOrIntList("eos_token_id", &c.eos_token_id));
  return c;
}

StatusOr<MiniCpmV46VisionConfig> ParseMiniCpmV46VisionConfig(const std::string& config_text,
                                                             const std::string& path) {
  CPM_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJsonConfig(config_text, path));
  JsonFields top(j, path);
  CPM_ASSIGN_OR_RETURN(JsonFields f, top.Object("vision_config"));
  MiniCpmV46VisionConfig v;
  CPM_RETURN_IF_ERROR(f.Int("hidden_size", &v.hidden_size));
  CPM_RETURN_IF_ERROR(f.Int("intermediate_size", &v.intermediate_size));
  CPM_RETURN_IF_ERROR(f.Int("num_hidden_layers", &v.num_hidden_layers));
  CPM_RETURN_IF_ERROR(f.Int("num_attention_heads", &v.num_attention_heads));
  CPM_RETURN_IF_ERROR(f.Int("patch_size", &v.patch_size));
  CPM_RETURN_IF_ERROR(f.Int("image_size", &v.image_size));
  CPM_RETURN_IF_ERROR(f.OptInt("num_channels", &v.num_channels));
  CPM_RETURN_IF_ERROR(top.OptInt("insert_layer_id", &v.insert_layer_id));
  CPM_RETURN_IF_ERROR(f.OptFloat("layer_norm_eps", &v.layer_norm_eps));
  CPM_RETURN_IF_ERROR(top.OptBool("drop_vision_last_layer", &v.drop_vision_last_layer));
  std::string act = "gelu_pytorch_tanh", mode = "16x";
  CPM_RETURN_IF_ERROR(f.OptString("hidden_act", &act));
  CPM_RETURN_IF_ERROR(top.OptString("downsample_mode", &mode));
  // The image processor makes RGB pixels; a patch embedding over other channels would read
  // past them (transformers' would fail on its first image too).
  if (v.num_channels != 3)
    return InvalidArgument(f.where() + ": field 'num_channels' must be 3 (RGB), got " +
                           std::to_string(v.num_channels));
  if (act != "gelu_pytorch_tanh")
    return InvalidArgument(f.where() + ": field 'hidden_act' must be \"gelu_pytorch_tanh\", got \"" + act + "\"");
  if (mode != "16x" && mode != "4x")
    return InvalidArgument(path + ": field 'downsample_mode' must be \"16x\" or \"4x\", got \"" + mode + "\"");
  v.vit_merger = mode == "16x";
  CPM_RETURN_IF_ERROR(CheckConfigSizes(f.where(), {
      {"hidden_size", v.hidden_size},
      {"intermediate_size", v.intermediate_size},
      {"num_hidden_layers", v.num_hidden_layers, kMaxConfigLayers},
      {"num_attention_heads", v.num_attention_heads},
      {"patch_size", v.patch_size},
      {"image_size", v.image_size},
      {"num_channels", v.num_channels},
  }));
  if (v.hidden_size % v.num_attention_heads != 0)
    return InvalidArgument(f.where() + ": hidden_size must be a multiple of num_attention_heads");
  if (v.image_size % v.patch_size != 0)
    return InvalidArgument(f.where() + ": image_size must be a multiple of patch_size");
  if (v.insert_layer_id < -1 || v.insert_layer_id >= v.num_hidden_layers)
    return InvalidArgument(path + ": field 'insert_layer_id' must be in [-1, num_hidden_layers)");
  return v;
}

}  // namespace cpm
