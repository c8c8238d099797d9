// The MiniCPM-V-4.6 vision/merger tensor table (spec §4.6) and its validation.
#include "model/minicpmv46_weights.h"

#include <set>

namespace cpm {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// LayerNorm weight + bias.
void AddNorm(std::vector<NamedShape>& t, const std::string& p, int64_t n) {
  t.push_back({p + ".weight", {n}});
  t.push_back({p + ".bias", {n}});
}

// nn.Linear(in, out) with bias.
void AddLinear(std::vector<NamedShape>& t, const std::string& p, int64_t out, int64_t in) {
  t.push_back({p + ".weight", {out, in}});
  t.push_back({p + ".bias", {out}});
}

void AddSelfAttention(std::vector<NamedShape>& t, const std::string& p, int64_t hidden) {
  for (const char* proj : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
    AddLinear(t, p + "self_attn." + proj, hidden, hidden);
  }
}

}  // namespace

std::vector<NamedShape> MiniCpmV46VisionTensors(const MiniCpmV46VisionConfig& v, int64_t text_hidden) {
  const int64_t E = v.hidden_size, F = v.intermediate_size, P = v.patch_size;
  const int64_t grid = v.image_size / v.patch_size;
  const int64_t window = 4 * E, window_ffn = 4 * F;  // 2×2 window concatenation
  const std::string vt = "model.vision_tower.";
  std::vector<NamedShape> t;
  t.push_back({vt + "embeddings.patch_embedding.weight", {E, v.num_channels, P, P}});
  t.push_back({vt + "embeddings.patch_embedding.bias", {E}});
  t.push_back({vt + "embeddings.position_embedding.weight", {grid * grid, E}});
  for (int64_t l = 0; l < v.num_hidden_layers; ++l) {
    const std::string p = vt + "encoder.layers." + std::to_string(l) + ".";
    AddNorm(t, p + "layer_norm1", E);
    AddSelfAttention(t, p, E);
    AddNorm(t, p + "layer_norm2", E);
    AddLinear(t, p + "mlp.fc1", F, E);
    AddLinear(t, p + "mlp.fc2", E, F);
  }
  AddNorm(t, vt + "post_layernorm", E);
  const std::string vm = vt + "vit_merger.";
  AddNorm(t, vm + "layer_norm1", E);
  AddSelfAttention(t, vm, E);
  AddNorm(t, vm + "pre_norm", window);
  AddLinear(t, vm + "linear_1", window_ffn, window);
  AddLinear(t, vm + "linear_2", E, window_ffn);
  const std::string mg = "model.merger.mlp.0.";
  AddNorm(t, mg + "pre_norm", window);
  AddLinear(t, mg + "linear_1", window, window);
  AddLinear(t, mg + "linear_2", text_hidden, window);
  return t;
}

bool IsMiniCpmV46VisionTensor(const std::string& name) {
  return name.rfind("model.vision_tower.", 0) == 0 || name.rfind("model.merger.", 0) == 0;
}

bool IsMtpTensor(const std::string& name) { return name.rfind("mtp.", 0) == 0; }

Status ValidateMiniCpmV46Vision(const SafetensorsArchive& archive, const MiniCpmV46VisionConfig& v,
                                int64_t text_hidden) {
  std::set<std::string> expected;
  for (const NamedShape& e : MiniCpmV46VisionTensors(v, text_hidden)) {
    expected.insert(e.name);
    const TensorInfo* t = archive.Find(e.name);
    if (!t) {
      return NotFound(archive.files().front() + ": missing vision tensor '" + e.name +
                      "' (expected shape " + ShapeString(e.shape) + ")");
    }
    if (t->shape != e.shape) {
      return InvalidArgument(t->file + ": tensor '" + e.name + "' has shape " + t->ShapeString() +
                             ", expected " + ShapeString(e.shape) + " from vision_config");
    }
    if (!t->dtype_supported) {
      return InvalidArgument(t->file + ": tensor '" + e.name + "' has dtype " + t->dtype_name +
                             ", expected F32, BF16 or F16");
    }
  }
  for (const auto& [name, t] : archive.tensors()) {
    if (IsMiniCpmV46VisionTensor(name) && !expected.count(name)) {
      return InvalidArgument(t.file + ": unexpected vision tensor '" + name + "' " + t.ShapeString() +
                             " (not part of vision_config)");
    }
  }
  return OkStatus();
}

}  // namespace cpm
