// Writer of tiny MiniCPM-V-4.6 / Qwen3.5 checkpoints (see tiny_minicpmv46.h).
#include "model/tiny_minicpmv46.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "model/minicpmv46_weights.h"
#include "model/qwen35_config.h"

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;

// Random tensors drawn from N(mean, std) (or U(lo, hi)) in the storage dtype.
class TensorSink {
 public:
  TensorSink(uint64_t seed, DType dtype) : rng_(seed), dtype_(dtype) {}

  void Normal(const std::string& name, std::vector<int64_t> shape, double mean, double std) {
    std::normal_distribution<double> d(mean, std);
    Add(name, std::move(shape), [&] { return d(rng_); });
  }
  void Uniform(const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    Add(name, std::move(shape), [&] { return d(rng_); });
  }
  // log(U(lo, hi)): A_log as HF initialises it (A uniform, stored as its log).
  void LogUniform(const std::string& name, std::vector<int64_t> shape, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    Add(name, std::move(shape), [&] { return std::log(d(rng_)); });
  }
  SafetensorsWriter& writer() { return w_; }

 private:
  template <typename Draw>
  void Add(const std::string& name, std::vector<int64_t> shape, Draw draw) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::string bytes(n * DTypeSize(dtype_), '\0');
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(draw());
      if (dtype_ == DType::kF32) {
        std::memcpy(&bytes[i * 4], &v, 4);
      } else {
        const uint16_t h = dtype_ == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
        std::memcpy(&bytes[i * 2], &h, 2);
      }
    }
    w_.Add(name, dtype_, std::move(shape), std::move(bytes));
  }
  std::mt19937_64 rng_;
  DType dtype_;
  SafetensorsWriter w_;
};

Json TextConfig(const TinyCheckpointOptions& o, const TinyQwen35Dims& d) {
  Json layer_types = Json::array();
  for (int64_t i = 0; i < d.num_hidden_layers; ++i)
    layer_types.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
  return {{"attention_bias", false},
          {"attention_dropout", 0.0},
          {"attn_output_gate", true},
          {"full_attention_interval", 4},
          {"head_dim", d.head_dim},
          {"hidden_act", "silu"},
          {"hidden_size", d.hidden_size},
          {"initializer_range", 0.02},
          {"intermediate_size", d.intermediate_size},
          {"layer_types", layer_types},
          {"linear_conv_kernel_dim", d.linear_conv_kernel_dim},
          {"linear_key_head_dim", d.linear_key_head_dim},
          {"linear_num_key_heads", d.linear_num_key_heads},
          {"linear_num_value_heads", d.linear_num_value_heads},
          {"linear_value_head_dim", d.linear_value_head_dim},
          {"mamba_ssm_dtype", "float32"},
          {"max_position_embeddings", d.max_position_embeddings},
          {"mlp_only_layers", Json::array()},
          {"mtp_num_hidden_layers", 1},
          {"mtp_use_dedicated_embeddings", false},
          {"num_attention_heads", d.num_attention_heads},
          {"num_hidden_layers", d.num_hidden_layers},
          {"num_key_value_heads", d.num_key_value_heads},
          {"partial_rotary_factor", 0.25},
          {"rms_norm_eps", 1e-6},
          {"rope_parameters", {{"partial_rotary_factor", 0.25}, {"rope_theta", 10000000}, {"rope_type", "default"}}},
          {"vocab_size", o.vocab_size},
          {"model_type", "qwen3_5_text"},
          {"tie_word_embeddings", o.tie_word_embeddings}};
}

MiniCpmV46VisionConfig TinyVision(bool real_heads) {
  MiniCpmV46VisionConfig v;
  v.hidden_size = real_heads ? 144 : 32;  // real: 16 heads of 72
  v.intermediate_size = 2 * v.hidden_size;
  v.num_hidden_layers = 3;  // one layer runs after the ViT merger
  v.num_attention_heads = 2;
  v.patch_size = 14;
  v.image_size = real_heads ? 980 : 112;  // real: 70 x 70 position embeddings
  v.insert_layer_id = 1;
  return v;
}

// Id of an added token in `dir`/tokenizer.json, or `fallback`.
int64_t AddedTokenId(const std::filesystem::path& dir, const std::string& content, int64_t fallback) {
  auto text = ReadTextFile((dir / "tokenizer.json").string());
  if (!text.ok()) return fallback;
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.contains("added_tokens") || !j["added_tokens"].is_array()) return fallback;
  for (const auto& t : j["added_tokens"]) {
    if (t.is_object() && t.value("content", "") == content && t.contains("id") && t["id"].is_number_integer())
      return t["id"].get<int64_t>();
  }
  return fallback;
}

// One decoder layer's tensors under `p` ("...layers.3."), full attention or Gated DeltaNet.
void AddDecoderLayer(TensorSink& s, const std::string& p, bool full, const TinyQwen35Dims& d) {
  const int64_t D = d.hidden_size, F = d.intermediate_size, hd = d.head_dim;
  const double in_std = 1.0 / std::sqrt(static_cast<double>(D));
  s.Normal(p + "input_layernorm.weight", {D}, 0.0, 0.1);  // zero-centred: used as 1 + w
  if (full) {
    const std::string a = p + "self_attn.";
    s.Normal(a + "q_proj.weight", {d.num_attention_heads * hd * 2, D}, 0.0, 2.0 * in_std);
    s.Normal(a + "k_proj.weight", {d.num_key_value_heads * hd, D}, 0.0, 2.0 * in_std);
    s.Normal(a + "v_proj.weight", {d.num_key_value_heads * hd, D}, 0.0, 2.0 * in_std);
    s.Normal(a + "o_proj.weight", {D, d.num_attention_heads * hd}, 0.0, 2.0 / std::sqrt(double(d.num_attention_heads * hd)));
    s.Normal(a + "q_norm.weight", {hd}, 0.0, 0.1);
    s.Normal(a + "k_norm.weight", {hd}, 0.0, 0.1);
  } else {
    const std::string a = p + "linear_attn.";
    const int64_t key_dim = d.linear_num_key_heads * d.linear_key_head_dim,
                  value_dim = d.linear_num_value_heads * d.linear_value_head_dim,
                  conv_dim = 2 * key_dim + value_dim, Hv = d.linear_num_value_heads;
    s.Normal(a + "in_proj_qkv.weight", {conv_dim, D}, 0.0, 2.0 * in_std);
    s.Normal(a + "in_proj_z.weight", {value_dim, D}, 0.0, 2.0 * in_std);
    s.Normal(a + "in_proj_b.weight", {Hv, D}, 0.0, 2.0 * in_std);
    s.Normal(a + "in_proj_a.weight", {Hv, D}, 0.0, 1.0 * in_std);
    s.Normal(a + "conv1d.weight", {conv_dim, 1, d.linear_conv_kernel_dim}, 0.0, 0.6);
    // Decays e^g mostly in (0.7, 0.99), so the state carries information across many tokens.
    s.LogUniform(a + "A_log", {Hv}, 0.3, 2.0);
    s.Normal(a + "dt_bias", {Hv}, -2.0, 0.5);
    s.Normal(a + "norm.weight", {d.linear_value_head_dim}, 1.0, 0.1);  // plain weight
    s.Normal(a + "out_proj.weight", {D, value_dim}, 0.0, 3.0 / std::sqrt(double(value_dim)));
  }
  s.Normal(p + "post_attention_layernorm.weight", {D}, 0.0, 0.1);
  s.Normal(p + "mlp.gate_proj.weight", {F, D}, 0.0, 2.0 * in_std);
  s.Normal(p + "mlp.up_proj.weight", {F, D}, 0.0, 2.0 * in_std);
  s.Normal(p + "mlp.down_proj.weight", {D, F}, 0.0, 2.0 / std::sqrt(static_cast<double>(F)));
}

// The weights of a checkpoint of `d`'s text dimensions (layer l full attention iff full[l]),
// with `vision`'s tower, the merger and the MTP head when given (MiniCPM-V-4.6's names), else a
// plain Qwen3.5 LM's; each tensor drawn in name order from one generator seeded with o.seed.
Status WriteQwen35Weights(const TinyCheckpointOptions& o, const TinyQwen35Dims& d,
                          const std::vector<bool>& full, const MiniCpmV46VisionConfig* vision) {
  const std::string prefix = vision != nullptr ? "model.language_model." : "model.";
  TensorSink s(o.seed, o.storage);
  const int64_t D = d.hidden_size;
  // Embedding spread wide enough for peaked logits through the tied head.
  s.Normal(prefix + "embed_tokens.weight", {o.vocab_size, D}, 0.0, 0.5);
  for (int64_t l = 0; l < d.num_hidden_layers; ++l) {
    AddDecoderLayer(s, prefix + "layers." + std::to_string(l) + ".", full[l], d);
  }
  s.Normal(prefix + "norm.weight", {D}, 0.0, 0.1);
  if (!o.tie_word_embeddings) s.Normal("lm_head.weight", {o.vocab_size, D}, 0.0, 0.5);
  if (vision != nullptr) {
    for (const NamedShape& t : MiniCpmV46VisionTensors(*vision, D)) {
      const bool is_norm_weight = t.shape.size() == 1 && t.name.find("norm") != std::string::npos &&
                                  t.name.ends_with(".weight");
      if (is_norm_weight) s.Normal(t.name, t.shape, 1.0, 0.05);
      else s.Normal(t.name, t.shape, 0.0, t.shape.size() == 1 ? 0.02 : 0.5 / std::sqrt(double(t.shape.back())));
    }
    // MTP head (Qwen3.5 multi-token prediction): fc over [embedding | hidden], one full layer.
    s.Normal("mtp.fc.weight", {D, 2 * D}, 0.0, 0.1);
    s.Normal("mtp.pre_fc_norm_embedding.weight", {D}, 0.0, 0.1);
    s.Normal("mtp.pre_fc_norm_hidden.weight", {D}, 0.0, 0.1);
    AddDecoderLayer(s, "mtp.layers.0.", true, d);
    s.Normal("mtp.norm.weight", {D}, 0.0, 0.1);
  }
  return WriteCheckpointWeights(s.writer(), o);
}

}  // namespace

Status WriteTinyQwen35(const TinyCheckpointOptions& o, const TinyQwen35Dims& d) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return InvalidArgument(o.out_dir + ": cannot create: " + ec.message());
  if (o.vocab_size <= 0) return InvalidArgument("make-tiny: vocab_size must be > 0");
  const MiniCpmV46VisionConfig vision = TinyVision(o.real_heads);
  const std::string dtype = o.storage == DType::kF32 ? "float32" : ToString(o.storage);
  Json eos = o.eos_token_id.size() == 1 ? Json(o.eos_token_id[0]) : Json(o.eos_token_id);

  Json config;
  std::string prefix = "model.";
  if (d.minicpmv) {
    prefix = "model.language_model.";
    config = {{"architectures", {"MiniCPMV4_6ForConditionalGeneration"}},
              {"bos_token_id", nullptr},
              {"drop_vision_last_layer", false},
              {"dtype", dtype},
              {"eos_token_id", eos},
              {"image_size", 224},
              {"model_type", "minicpmv4_6"},
              {"pad_token_id", nullptr},
              {"tie_word_embeddings", o.tie_word_embeddings},
              {"transformers_version", "5.7.0"},
              {"use_cache", true},
              {"vision_config",
               {{"attention_dropout", 0.0},
                {"hidden_act", "gelu_pytorch_tanh"},
                {"hidden_size", vision.hidden_size},
                {"image_size", vision.image_size},
                {"intermediate_size", vision.intermediate_size},
                {"layer_norm_eps", 1e-6},
                {"model_type", "minicpmv4_6_vision"},
                {"num_attention_heads", vision.num_attention_heads},
                {"num_channels", vision.num_channels},
                {"num_hidden_layers", vision.num_hidden_layers},
                {"patch_size", vision.patch_size}}},
              {"text_config", TextConfig(o, d)},
              {"insert_layer_id", vision.insert_layer_id},
              {"image_token_id", AddedTokenId(o.out_dir, "<|image_pad|>", o.vocab_size - 2)},
              {"video_token_id", AddedTokenId(o.out_dir, "<|video_pad|>", o.vocab_size - 1)}};
  } else {
    config = TextConfig(o, d);
    config["architectures"] = {"Qwen3_5ForCausalLM"};
    config["dtype"] = dtype;
    config["eos_token_id"] = eos;
    config["bos_token_id"] = o.bos_token_id;
  }
  CPM_RETURN_IF_ERROR(WriteTextFile((fs::path(o.out_dir) / "config.json").string(), config.dump(2)));
  if (d.minicpmv) {
    // The released preprocessor_config.json's values: real slicing on a tiny tower.
    const Json pre = {{"image_processor_type", "MiniCPMV4_6ImageProcessor"},
                      {"processor_class", "MiniCPMV4_6Processor"},
                      {"max_slice_nums", 9},
                      {"scale_resolution", 448},
                      {"patch_size", vision.patch_size},
                      {"use_image_id", true},
                      {"slice_mode", true},
                      {"image_mean", {0.5, 0.5, 0.5}},
                      {"image_std", {0.5, 0.5, 0.5}}};
    CPM_RETURN_IF_ERROR(WriteTextFile((fs::path(o.out_dir) / "preprocessor_config.json").string(), pre.dump(2)));
  }

  std::vector<bool> full(d.num_hidden_layers);
  for (int64_t l = 0; l < d.num_hidden_layers; ++l) full[l] = (l + 1) % 4 == 0;
  return WriteQwen35Weights(o, d, full, d.minicpmv ? &vision : nullptr);
}

Status WriteTinyMiniCpmV46(const TinyCheckpointOptions& options) {
  TinyQwen35Dims d;
  if (options.real_heads) {  // real: 8 query heads / 2 KV heads of 256, 16 + 16 GDN heads of 128
    d.hidden_size = 256;
    d.num_hidden_layers = 4;
    d.num_key_value_heads = 1;
    d.head_dim = 256;
    d.intermediate_size = 256;
    d.linear_num_key_heads = 2;
    d.linear_num_value_heads = 2;
    d.linear_key_head_dim = 128;
    d.linear_value_head_dim = 128;
  }
  return WriteTinyQwen35(options, d);
}

Status WriteMiniCpmV46WeightsOf(const Qwen35Config& text, const MiniCpmV46VisionConfig& vision,
                                const TinyCheckpointOptions& options) {
  TinyQwen35Dims d;
  d.hidden_size = text.hidden_size;
  d.num_hidden_layers = text.num_hidden_layers;
  d.num_attention_heads = text.num_attention_heads;
  d.num_key_value_heads = text.num_key_value_heads;
  d.head_dim = text.head_dim;
  d.intermediate_size = text.intermediate_size;
  d.linear_num_key_heads = text.linear_num_key_heads;
  d.linear_num_value_heads = text.linear_num_value_heads;
  d.linear_key_head_dim = text.linear_key_head_dim;
  d.linear_value_head_dim = text.linear_value_head_dim;
  d.linear_conv_kernel_dim = text.linear_conv_kernel_dim;
  d.max_position_embeddings = text.max_position_embeddings;
  TinyCheckpointOptions o = options;
  o.vocab_size = text.vocab_size;
  o.tie_word_embeddings = text.tie_word_embeddings;
  return WriteQwen35Weights(o, d, text.full_attention, &vision);
}

}  // namespace cpm
