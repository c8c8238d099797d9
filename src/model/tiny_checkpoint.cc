#include "model/tiny_checkpoint.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "kernels/ternary.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;

// Draws a tensor from N(mean, std) and encodes it in `dtype`.
std::string RandomTensor(std::mt19937_64& rng, int64_t n, double mean, double std, DType dtype) {
  std::normal_distribution<double> dist(mean, std);
  std::string bytes(n * DTypeSize(dtype), '\0');
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(dist(rng));
    if (dtype == DType::kF32) {
      std::memcpy(&bytes[i * 4], &v, 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? F32ToBf16(v) : F32ToF16(v);
      std::memcpy(&bytes[i * 2], &h, 2);
    }
  }
  return bytes;
}

// The tensor shapes of a MiniCPMForCausalLM checkpoint.
struct MiniCpmShape {
  int64_t hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
  bool tied;
};

// Random weights of `s`'s shapes into o.out_dir, each tensor drawn in name order from one
// generator seeded with o.seed.
Status WriteMiniCpmWeights(const MiniCpmShape& s, const TinyCheckpointOptions& o) {
  CPM_RETURN_IF_ERROR(CheckTernaryStorage(o));
  const int64_t hidden = s.hidden, heads = s.heads, kv_heads = s.kv_heads, head_dim = s.head_dim,
                ffn = s.ffn;
  std::mt19937_64 rng(o.seed);
  SafetensorsWriter w;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, double mean, double std) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::string bytes = RandomTensor(rng, n, mean, std, o.storage);
    if (o.ternary_group > 0 && shape.size() == 2 && name.find(".layers.") != std::string::npos) {
      kernels::FakeQuantizeTernary(reinterpret_cast<uint16_t*>(bytes.data()), shape[0], shape[1],
                                   o.ternary_group, o.ternary_per_tensor);
    }
    w.Add(name, o.storage, shape, std::move(bytes));
  };
  // Embedding spread: wide enough for peaked logits through the tied head, small enough that
  // the layers (not the input token alone) decide the next token.
  add("model.embed_tokens.weight", {s.vocab, hidden}, 0.0, 0.3);
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const double in_std = 1.0 / std::sqrt(static_cast<double>(hidden));
    add(p + "input_layernorm.weight", {hidden}, 1.0, 0.1);
    add(p + "self_attn.q_proj.weight", {heads * head_dim, hidden}, 0.0, 2.0 * in_std);
    add(p + "self_attn.k_proj.weight", {kv_heads * head_dim, hidden}, 0.0, 2.0 * in_std);
    // Branch outputs comparable to the scaled embedding (|h| ~ 12), so every layer matters.
    add(p + "self_attn.v_proj.weight", {kv_heads * head_dim, hidden}, 0.0, 3.0 * in_std);
    add(p + "self_attn.o_proj.weight", {hidden, heads * head_dim}, 0.0, 3.0 * in_std);
    add(p + "post_attention_layernorm.weight", {hidden}, 1.0, 0.1);
    add(p + "mlp.gate_proj.weight", {ffn, hidden}, 0.0, 2.0 * in_std);
    add(p + "mlp.up_proj.weight", {ffn, hidden}, 0.0, 3.0 * in_std);
    add(p + "mlp.down_proj.weight", {hidden, ffn}, 0.0, 3.0 / std::sqrt(static_cast<double>(ffn)));
  }
  add("model.norm.weight", {hidden}, 1.0, 0.1);
  if (!s.tied) add("lm_head.weight", {s.vocab, hidden}, 0.0, 1.0);
  return WriteCheckpointWeights(w, o);
}

}  // namespace

Status WriteCheckpointWeights(const SafetensorsWriter& weights, const TinyCheckpointOptions& o) {
  std::error_code ec;
  std::vector<fs::path> old;
  for (const auto& e : fs::directory_iterator(o.out_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("model") &&
        (name.ends_with(".safetensors") || name == "model.safetensors.index.json")) {
      old.push_back(e.path());
    }
  }
  for (const fs::path& f : old) {
    if (!fs::remove(f, ec) && ec) return InvalidArgument(f.string() + ": cannot remove: " + ec.message());
  }
  // A folder that cannot be listed fails at the write, naming the file.
  if (o.num_shards > 1) return weights.WriteSharded(o.out_dir, o.num_shards);
  return weights.Write((fs::path(o.out_dir) / "model.safetensors").string());
}

Status CheckTernaryStorage(const TinyCheckpointOptions& o) {
  if (o.ternary_group > 0 && o.storage != DType::kBF16) {
    return InvalidArgument("ternary weights are stored as bf16 (BitCPM4's format)");
  }
  return OkStatus();
}

Status WriteTinyMiniCpm(const TinyCheckpointOptions& o) {
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec) return InvalidArgument(o.out_dir + ": cannot create: " + ec.message());
  if (o.vocab_size <= 0) return InvalidArgument("make-tiny: vocab_size must be > 0");

  const int64_t hidden = o.real_heads ? 512 : 64, layers = 2, heads = o.real_heads ? 8 : 4,
                kv_heads = o.real_heads ? 1 : 2, head_dim = hidden / heads, ffn = o.real_heads ? 512 : 128;
  // Factors chosen so short and long differ visibly (1.25-ish against up to 99 over 8 pairs; the
  // 32 pairs of real_heads take the long ones to 1923, past the released 50, which only slows
  // the lowest frequencies further).
  nlohmann::ordered_json short_f = nlohmann::ordered_json::array(), long_f = short_f;
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    short_f.push_back(1.0 + 0.25 * static_cast<double>(i));
    long_f.push_back(1.0 + 2.0 * static_cast<double>(i * i));
  }
  nlohmann::ordered_json config = {
      {"architectures", {"MiniCPMForCausalLM"}},
      {"bos_token_id", o.bos_token_id},
      {"eos_token_id", o.eos_token_id},
      {"hidden_act", "silu"},
      {"hidden_size", hidden},
      {"initializer_range", 0.1},
      {"intermediate_size", ffn},
      {"max_position_embeddings", 256},
      {"num_attention_heads", heads},
      {"num_hidden_layers", layers},
      {"num_key_value_heads", kv_heads},
      {"rms_norm_eps", 1e-5},
      {"rope_scaling",
       {{"rope_type", "longrope"},
        {"long_factor", long_f},
        {"short_factor", short_f},
        {"original_max_position_embeddings", 64}}},
      {"torch_dtype", o.storage == DType::kF32 ? "float32" : ToString(o.storage)},
      {"vocab_size", o.vocab_size},
      {"scale_emb", 12},
      {"dim_model_base", hidden / 4},  // logits ÷ 4, as the released 1024 / 256
      {"scale_depth", 1.4},
  };
  if (!o.tie_word_embeddings) config["tie_word_embeddings"] = false;
  CPM_RETURN_IF_ERROR(WriteTextFile((fs::path(o.out_dir) / "config.json").string(), config.dump(2)));

  return WriteMiniCpmWeights({hidden, layers, heads, kv_heads, head_dim, ffn, o.vocab_size,
                              o.tie_word_embeddings},
                             o);
}

Status WriteMiniCpmWeightsOf(const MiniCpmConfig& c, const TinyCheckpointOptions& o) {
  return WriteMiniCpmWeights({c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                              c.num_key_value_heads, c.head_dim, c.intermediate_size, c.vocab_size,
                              c.tie_word_embeddings},
                             o);
}

}  // namespace cpm
