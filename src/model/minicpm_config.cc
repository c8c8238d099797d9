#include "model/minicpm_config.h"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/json_fields.h"

namespace cpm {

namespace {

Status ParseRopeScaling(const JsonFields& f, MiniCpmConfig* c) {
  if (!f.Has("rope_scaling")) return OkStatus();
  CPM_ASSIGN_OR_RETURN(JsonFields rs, f.Object("rope_scaling"));
  std::string type;
  if (rs.Has("rope_type")) CPM_RETURN_IF_ERROR(rs.String("rope_type", &type));
  else CPM_RETURN_IF_ERROR(rs.String("type", &type));
  if (type == "default") return OkStatus();
  if (type != "longrope" && type != "su") {
    return InvalidArgument(rs.where() + ": rope_type '" + type +
                           "' is not supported (expected longrope or default)");
  }
  CPM_RETURN_IF_ERROR(rs.FloatList("short_factor", &c->short_factor));
  CPM_RETURN_IF_ERROR(rs.FloatList("long_factor", &c->long_factor));
  c->original_max_position_embeddings = c->max_position_embeddings;
  CPM_RETURN_IF_ERROR(rs.OptInt("original_max_position_embeddings",
                                &c->original_max_position_embeddings));
  // LongRoPE's attention factor is sqrt(1 + ln(scale) / ln(original)): original 1 divides by 0
  // (vLLM's start-up fails there), and below 1 the table is meaningless.
  if (c->original_max_position_embeddings < 2) {
    return InvalidArgument(rs.where() +
                           ": field 'original_max_position_embeddings' must be >= 2, got " +
                           std::to_string(c->original_max_position_embeddings));
  }
  const size_t half = static_cast<size_t>(c->head_dim / 2);
  if (c->short_factor.size() != half || c->long_factor.size() != half) {
    return InvalidArgument(rs.where() + ": short_factor and long_factor need head_dim/2 = " +
                           std::to_string(half) + " values, got " +
                           std::to_string(c->short_factor.size()) + " and " +
                           std::to_string(c->long_factor.size()));
  }
  for (double v : c->short_factor) {
    if (!(v > 0)) return InvalidArgument(rs.where() + ": short_factor values must be > 0");
  }
  for (double v : c->long_factor) {
    if (!(v > 0)) return InvalidArgument(rs.where() + ": long_factor values must be > 0");
  }
  return OkStatus();
}

}  // namespace

StatusOr<MiniCpmConfig> ParseMiniCpmConfig(const std::string& config_text,
                                           const std::string& path) {
  CPM_ASSIGN_OR_RETURN(const nlohmann::json j, ParseJsonConfig(config_text, path));
  JsonFields f(j, path);
  MiniCpmConfig c;
  CPM_RETURN_IF_ERROR(f.Int("hidden_size", &c.hidden_size));
  CPM_RETURN_IF_ERROR(f.Int("intermediate_size", &c.intermediate_size));
  CPM_RETURN_IF_ERROR(f.Int("num_hidden_layers", &c.num_hidden_layers));
  CPM_RETURN_IF_ERROR(f.Int("num_attention_heads", &c.num_attention_heads));
  c.num_key_value_heads = c.num_attention_heads;  // HF default when absent
  CPM_RETURN_IF_ERROR(f.OptInt("num_key_value_heads", &c.num_key_value_heads));
  CPM_RETURN_IF_ERROR(f.Int("vocab_size", &c.vocab_size));
  CPM_RETURN_IF_ERROR(f.Int("max_position_embeddings", &c.max_position_embeddings));
  CPM_RETURN_IF_ERROR(f.Float("rms_norm_eps", &c.rms_norm_eps));
  CPM_RETURN_IF_ERROR(f.Float("scale_emb", &c.scale_emb));
  CPM_RETURN_IF_ERROR(f.Float("dim_model_base", &c.dim_model_base));
  CPM_RETURN_IF_ERROR(f.Float("scale_depth", &c.scale_depth));
  CPM_RETURN_IF_ERROR(f.OptFloat("rope_theta", &c.rope_theta));
  CPM_RETURN_IF_ERROR(f.OptBool("tie_word_embeddings", &c.tie_word_embeddings));
  CPM_RETURN_IF_ERROR(f.OptString("torch_dtype", &c.torch_dtype));
  CPM_RETURN_IF_ERROR(f.IntOrIntList("eos_token_id", &c.eos_token_id));
  std::string act = "silu";
  CPM_RETURN_IF_ERROR(f.OptString("hidden_act", &act));
  if (act != "silu") return InvalidArgument(path + ": field 'hidden_act' must be \"silu\", got \"" + act + "\"");

  // max_position_embeddings is bounded at load, by the memory its RoPE table takes.
  CPM_RETURN_IF_ERROR(CheckConfigSizes(path, {
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers, kMaxConfigLayers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"vocab_size", c.vocab_size},
      {"max_position_embeddings", c.max_position_embeddings, INT64_MAX},
  }));
  if (c.hidden_size % c.num_attention_heads != 0)
    return InvalidArgument(path + ": hidden_size must be a multiple of num_attention_heads");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return InvalidArgument(path + ": num_attention_heads must be a multiple of num_key_value_heads");
  c.head_dim = c.hidden_size / c.num_attention_heads;
  if (c.head_dim % 2 != 0) return InvalidArgument(path + ": head_dim must be even for RoPE");
  if (!(c.dim_model_base > 0)) return InvalidArgument(path + ": field 'dim_model_base' must be > 0");
  if (!(c.rope_theta > 0)) return InvalidArgument(path + ": field 'rope_theta' must be > 0");
  CPM_RETURN_IF_ERROR(ParseRopeScaling(f, &c));
  return c;
}

}  // namespace cpm
