#include "model/minicpm.h"

#include <array>
#include <cmath>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/log.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/q8.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "kernels/ternary.h"
#include "model/embedding_rows.h"
#include "model/forward_profile.h"
#include "model/minicpm_config.h"
#include "model/residual_norm.h"
#include "model/rope_table.h"
#include "model/row_ranges.h"
#include "model/weight_loader.h"

namespace cpm {
namespace {

using kernels::LinearWeight;
using kernels::Round;

struct MiniCpmLayer {
  std::vector<float> input_layernorm;           // [hidden]
  LinearWeight q_proj, k_proj, v_proj, o_proj;  // [H·D, hidden], [KV·D, hidden] ×2, [hidden, H·D]
  std::vector<float> post_attention_layernorm;  // [hidden]
  LinearWeight gate_proj, up_proj, down_proj;   // [ffn, hidden] ×2, [hidden, ffn]
};

// A layer's linear weights (const or not, as the layer is).
template <typename Layer>
auto LinearWeights(Layer& L) {
  return std::array{&L.q_proj, &L.k_proj, &L.v_proj, &L.o_proj, &L.gate_proj, &L.up_proj,
                    &L.down_proj};
}

// Per-step activations, grown on demand and reused (the engine thread is the only caller).
struct Activations {
  std::vector<float> h, x, q, k, v, attn, o, gate, cos, sin, head_in;  // gate: the MLP's silu(g)·u
  AlignedBuffer x_pairs;  // x as the matmuls' bf16 pair rows, where they take them (x_out_)
  AlignedBuffer o_bf16;   // o as bf16 rows, where the matmuls write them (o_out_)
  std::vector<int64_t> slots;
  void Resize(int64_t t, const MiniCpmConfig& c) {
    const int64_t hd = c.hidden_size, qd = c.num_attention_heads * c.head_dim,
                  kvd = c.num_key_value_heads * c.head_dim, ffn = c.intermediate_size;
    h.resize(t * hd);
    x.resize(t * hd);
    q.resize(t * qd);
    k.resize(t * kvd);
    v.resize(t * kvd);
    attn.resize(t * qd);
    o.resize(t * hd);
    gate.resize(t * ffn);
    cos.resize(t * c.head_dim / 2);
    sin.resize(t * c.head_dim / 2);
    slots.resize(t);
  }
};

class MiniCpmModel : public Model {
 public:
  const ModelInfo& info() const override { return info_; }
  Status Forward(const ForwardBatch& batch, KvCache& kv, StateSlots* states, float* logits,
                 ThreadPool& pool) override;
  Status Load(const LoadOptions& options, const MiniCpmConfig& config, ThreadPool& pool);

 private:
  void Embed(const ForwardBatch& batch, float* h) const;
  void PrepareRopeAndSlots(const ForwardBatch& batch, int64_t block_size);
  // Each reads its input x (the norm of h) as the step before left it, and ends with the residual
  // add and the norm after it into x: the MLP's, or the next layer's `next_norm` (none after the
  // last).
  void Attention(const MiniCpmLayer& w, int64_t layer, const ForwardBatch& batch, KvCache& kv,
                 int64_t t, ThreadPool& pool);
  void Mlp(const MiniCpmLayer& w, const std::vector<float>* next_norm, int64_t t,
           ThreadPool& pool);
  void Head(const ForwardBatch& batch, float* logits, ThreadPool& pool);
  // x = RMSNorm(h) · weight over t rows: layer 0's attention input (residual_norm.h).
  void Norm(const std::vector<float>& weight, int64_t t, ThreadPool& pool);
  // h = bf(h + bf(o · scale_depth/sqrt(L))) over t rows, then x = RMSNorm(h) · next_norm when
  // one is given (residual_norm.h).
  void AddResidualAndNorm(const std::vector<float>* next_norm, int64_t t, ThreadPool& pool);
  std::vector<const LinearWeight*> LayerLinearWeights() const;  // every layer's
  std::vector<const LinearWeight*> AllLinearWeights() const;    // the layers', then the head
  // Which linear weights were found ternary and packed as 2-bit codes (BitCPM4, ternary.h), or
  // quantized (--quantization).
  void LogPackedWeights() const;
  // MiniCPM's RMSNorm: bf(x·r) then bf(·w) in the bf16 path (HF LlamaRMSNorm on bf16).
  kernels::RmsNormParams NormParams() const {
    return {static_cast<float>(c_.rms_norm_eps), 0.0f, round_ == Round::kBf16, round_};
  }

  MiniCpmConfig c_;
  ModelInfo info_;
  Round round_ = Round::kNone;
  float residual_scale_ = 1.0f;  // scale_depth / sqrt(num_hidden_layers), kept in f32
  kernels::LinearWeight embed_tokens_;  // [vocab, hidden]
  kernels::LinearWeight lm_head_;       // = embed_tokens_ when tied
  std::vector<float> norm_;             // [hidden]
  std::vector<MiniCpmLayer> layers_;
  RopeTable rope_;
  Activations a_;
  // Where the norms write x and the q/k/v and MLP matmuls read it: a_.x, or a_.x_pairs on the
  // bf16 dot products with no weight quantized to Q8_0 (ChooseNormOut, once per Forward).
  NormOut x_out_ = nullptr;
  // Where the o and down projections write o and the residual add reads it: a_.o, or a_.o_bf16
  // where the matmuls write bf16 rows (ChooseDeltaRows, with x_out_).
  DeltaRows o_out_ = nullptr;
};

std::vector<const LinearWeight*> MiniCpmModel::LayerLinearWeights() const {
  std::vector<const LinearWeight*> ws;
  for (const MiniCpmLayer& L : layers_) {
    for (const LinearWeight* w : LinearWeights(L)) ws.push_back(w);
  }
  return ws;
}

std::vector<const LinearWeight*> MiniCpmModel::AllLinearWeights() const {
  std::vector<const LinearWeight*> ws = LayerLinearWeights();
  ws.push_back(&lm_head_);
  return ws;
}

void MiniCpmModel::LogPackedWeights() const {
  const std::vector<const LinearWeight*> ws = AllLinearWeights();
  const std::string ternary = kernels::SummarizeTernary(ws);
  if (!ternary.empty()) CPM_LOG_INFO("Ternary weights (BitCPM4): {}", ternary);
  const std::string q8 = kernels::SummarizeQ8(ws);
  if (!q8.empty()) CPM_LOG_INFO("Quantized weights: {}", q8);
}

Status MiniCpmModel::Load(const LoadOptions& options, const MiniCpmConfig& config,
                          ThreadPool& pool) {
  c_ = config;
  DType dtype = DType::kBF16;
  if (options.dtype == DTypeChoice::kFloat32 ||
      (options.dtype == DTypeChoice::kAuto && config.torch_dtype == "float32")) {
    dtype = DType::kF32;
  }
  round_ = dtype == DType::kBF16 ? Round::kBf16 : Round::kNone;
  residual_scale_ = static_cast<float>(c_.scale_depth / std::sqrt(static_cast<double>(c_.num_hidden_layers)));

  CPM_ASSIGN_OR_RETURN(WeightLoader wl, WeightLoader::Open(options, dtype, &pool));
  const int64_t hd = c_.hidden_size, qd = c_.num_attention_heads * c_.head_dim,
                kvd = c_.num_key_value_heads * c_.head_dim, ffn = c_.intermediate_size;
  CPM_ASSIGN_OR_RETURN(embed_tokens_,
                       wl.EmbeddingTable("model.embed_tokens.weight", c_.vocab_size, hd));
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    MiniCpmLayer L;
    CPM_ASSIGN_OR_RETURN(L.input_layernorm, wl.F32(p + "input_layernorm.weight", {hd}));
    CPM_ASSIGN_OR_RETURN(L.q_proj, wl.Linear(p + "self_attn.q_proj.weight", qd, hd));
    CPM_ASSIGN_OR_RETURN(L.k_proj, wl.Linear(p + "self_attn.k_proj.weight", kvd, hd));
    CPM_ASSIGN_OR_RETURN(L.v_proj, wl.Linear(p + "self_attn.v_proj.weight", kvd, hd));
    CPM_ASSIGN_OR_RETURN(L.o_proj, wl.Linear(p + "self_attn.o_proj.weight", hd, qd));
    CPM_ASSIGN_OR_RETURN(L.post_attention_layernorm,
                         wl.F32(p + "post_attention_layernorm.weight", {hd}));
    CPM_ASSIGN_OR_RETURN(L.gate_proj, wl.Linear(p + "mlp.gate_proj.weight", ffn, hd));
    CPM_ASSIGN_OR_RETURN(L.up_proj, wl.Linear(p + "mlp.up_proj.weight", ffn, hd));
    CPM_ASSIGN_OR_RETURN(L.down_proj, wl.Linear(p + "mlp.down_proj.weight", hd, ffn));
    layers_.push_back(std::move(L));
  }
  // Packing (and BitCPM4's ternary scan) one weight per task: ~1 ns per value, 430 M values.
  // The first weight alone: on an AVX-512 CPU its packing runs the kernel self-check, which
  // times kernels and should not share the cores with other packing.
  std::vector<LinearWeight*> linear;
  for (MiniCpmLayer& L : layers_) {
    for (LinearWeight* w : LinearWeights(L)) linear.push_back(w);
  }
  if (!linear.empty()) {
    const kernels::WeightQuant quant = options.quantization;
    kernels::PrepareLinear(linear[0], kernels::Source::kDrop, quant);
    pool.ParallelFor(static_cast<int64_t>(linear.size()) - 1, [&](int64_t i, int) {
      kernels::PrepareLinear(linear[i + 1], kernels::Source::kDrop, quant);
    });
  }
  CPM_ASSIGN_OR_RETURN(norm_, wl.F32("model.norm.weight", {hd}));
  if (c_.tie_word_embeddings) {
    lm_head_ = embed_tokens_;
  } else {
    CPM_ASSIGN_OR_RETURN(lm_head_, wl.Linear("lm_head.weight", c_.vocab_size, hd));
  }
  // Tied, the head's source is the embedding table, which Embed reads.
  kernels::PrepareLinear(&lm_head_,
                         c_.tie_word_embeddings ? kernels::Source::kKeep : kernels::Source::kDrop,
                         options.quantization);
  LogPackedWeights();
  const bool tied = c_.tie_word_embeddings;
  CPM_RETURN_IF_ERROR(wl.CheckAllUsed([tied](const std::string& n) {
    // Rotary caches are derived data; a tied checkpoint may still carry a redundant lm_head.
    return n.find("rotary_emb.") != std::string::npos || (tied && n == "lm_head.weight");
  }));

  CPM_ASSIGN_OR_RETURN(const int64_t max_len,
                       RopeTablePositions(options, c_.max_position_embeddings, c_.head_dim));
  if (c_.longrope()) {
    // vLLM's static rule: long factors for every position iff the context can exceed L0.
    const bool use_long = max_len > c_.original_max_position_embeddings;
    rope_ = BuildLongRopeTable(c_.head_dim, c_.rope_theta, use_long ? c_.long_factor : c_.short_factor,
                               c_.max_position_embeddings, c_.original_max_position_embeddings, max_len);
  } else {
    rope_ = BuildRopeTable(c_.head_dim, c_.rope_theta, max_len);
  }

  info_.architecture = "MiniCPMForCausalLM";
  info_.vocab_size = c_.vocab_size;
  info_.hidden_size = hd;
  info_.max_position_embeddings = c_.max_position_embeddings;
  info_.max_positions = max_len;
  info_.dtype = dtype;
  info_.kv = {c_.num_hidden_layers, c_.num_key_value_heads, c_.head_dim};
  info_.weight_bytes = wl.bytes_held() + kernels::PackedHeldBytesDelta(AllLinearWeights());
  info_.eos_token_ids = c_.eos_token_id;
  return OkStatus();
}

// h = bf(E[tok] · scale_emb), or the caller's embeddings on `embed_rows`.
void MiniCpmModel::Embed(const ForwardBatch& batch, float* h) const {
  const int64_t hd = c_.hidden_size;
  EmbeddingRows(embed_tokens_, batch.tokens, h);
  kernels::Scale(h, static_cast<int64_t>(batch.tokens.size()) * hd,
                 static_cast<float>(c_.scale_emb), round_);
  for (size_t i = 0; i < batch.embed_rows.size(); ++i) {
    std::copy(batch.embeds + i * hd, batch.embeds + (i + 1) * hd, h + batch.embed_rows[i] * hd);
  }
}

// Gathers each token's cos/sin row and its KV slot from its position.
void MiniCpmModel::PrepareRopeAndSlots(const ForwardBatch& batch, int64_t block_size) {
  const int64_t half = rope_.half;
  int64_t t = 0;
  for (const SeqStep& s : batch.seqs) {
    for (int64_t i = 0; i < s.num_tokens; ++i, ++t) {
      const int64_t pos = s.num_computed + i;
      std::copy(rope_.CosAt(pos), rope_.CosAt(pos) + half, a_.cos.data() + t * half);
      std::copy(rope_.SinAt(pos), rope_.SinAt(pos) + half, a_.sin.data() + t * half);
      a_.slots[t] = static_cast<int64_t>(s.block_table[pos / block_size]) * block_size + pos % block_size;
    }
  }
}

void MiniCpmModel::Attention(const MiniCpmLayer& w, int64_t layer, const ForwardBatch& batch,
                             KvCache& kv, int64_t t, ThreadPool& pool) {
  const int64_t hd = c_.hidden_size, D = c_.head_dim, H = c_.num_attention_heads,
                KV = c_.num_key_value_heads;
  {
    // q, k, v = x · Wqᵀ, x · Wkᵀ, x · Wvᵀ   [t, H·D], [t, KV·D], [t, KV·D]
    ProfileScope section("q/k/v proj", MatmulWorkOf({&w.q_proj, &w.k_proj, &w.v_proj}, t));
    const LinearWeight* ws[] = {&w.q_proj, &w.k_proj, &w.v_proj};
    float* ys[] = {a_.q.data(), a_.k.data(), a_.v.data()};
    const int64_t strides[] = {H * D, KV * D, KV * D};
    MatMulGroupOnNorm(x_out_, hd, t, ws, ys, strides, pool, round_);
  }
  const kernels::KvLayerView view = kv.Layer(layer);
  {
    // RoPE in f32 on bf16 inputs, rounded once (HF apply_rotary_pos_emb); K and V into the cache.
    ProfileScope section("RoPE, KV write");
    ForRowRanges(pool, t, H * D, [&](int64_t r0, int64_t r1) {
      const float* cos = a_.cos.data() + r0 * rope_.half;
      const float* sin = a_.sin.data() + r0 * rope_.half;
      kernels::RopeNeox(a_.q.data() + r0 * H * D, H * D, r1 - r0, H, D, D, cos, sin, round_);
      kernels::RopeNeox(a_.k.data() + r0 * KV * D, KV * D, r1 - r0, KV, D, D, cos, sin, round_);
      kernels::KvWrite(a_.k.data() + r0 * KV * D, KV * D, a_.v.data() + r0 * KV * D, KV * D,
                       a_.slots.data() + r0, r1 - r0, view);
    });
  }
  {
    ProfileScope section("attention");
    std::vector<kernels::AttentionSeq> seqs;
    int64_t begin = 0;
    for (const SeqStep& s : batch.seqs) {
      seqs.push_back({begin, s.num_tokens, s.num_computed + s.num_tokens, s.block_table.data()});
      begin += s.num_tokens;
    }
    kernels::PagedAttention(a_.q.data(), H * D, H, seqs, view,
                            1.0f / std::sqrt(static_cast<float>(D)), a_.attn.data(), H * D, pool,
                            round_);
  }
  {
    ProfileScope section("o proj", MatmulWorkOf({&w.o_proj}, t));
    MatMulToDelta(a_.attn.data(), H * D, t, w.o_proj, o_out_, hd, pool, round_);
  }
  // h = bf(h + bf(o · scale_depth/sqrt(L))); x = RMSNorm(h), the MLP's input
  AddResidualAndNorm(&w.post_attention_layernorm, t, pool);
}

void MiniCpmModel::Norm(const std::vector<float>& weight, int64_t t, ThreadPool& pool) {
  NormRows(pool, t, c_.hidden_size, a_.h.data(), weight.data(), x_out_, NormParams());
}

void MiniCpmModel::AddResidualAndNorm(const std::vector<float>* next_norm, int64_t t,
                                      ThreadPool& pool) {
  cpm::AddResidualAndNorm(pool, t, c_.hidden_size, a_.h.data(), o_out_, residual_scale_,
                          round_, next_norm ? next_norm->data() : nullptr, x_out_,
                          NormParams());
}

void MiniCpmModel::Mlp(const MiniCpmLayer& w, const std::vector<float>* next_norm, int64_t t,
                       ThreadPool& pool) {
  const int64_t hd = c_.hidden_size, ffn = c_.intermediate_size;
  {
    // m = bf(bf(silu(g)) · u), g = bf(x · gateᵀ), u = bf(x · upᵀ) [t, ffn]; o = m · downᵀ [t, hd]
    ProfileScope section("MLP (gate/up, SiLU, down)",
                         MatmulWorkOf({&w.gate_proj, &w.up_proj, &w.down_proj}, t));
    GatedMlpOnNorm(x_out_, hd, t, w.gate_proj, w.up_proj, w.down_proj, a_.gate.data(), ffn,
                   o_out_, hd, pool, round_);
  }
  AddResidualAndNorm(next_norm, t, pool);
}

// logits = bf(bf(norm(h) / (hidden_size/dim_model_base)) · Eᵀ) for the requested rows only.
void MiniCpmModel::Head(const ForwardBatch& batch, float* logits, ThreadPool& pool) {
  const int64_t hd = c_.hidden_size, n = static_cast<int64_t>(batch.logit_rows.size());
  ProfileScope section("head (norm, lm_head)", MatmulWorkOf({&lm_head_}, n));
  a_.head_in.resize(n * hd);
  for (int64_t i = 0; i < n; ++i) {
    const float* src = a_.h.data() + batch.logit_rows[i] * hd;
    std::copy(src, src + hd, a_.head_in.data() + i * hd);
  }
  kernels::RmsNorm(a_.head_in.data(), hd, norm_.data(), a_.head_in.data(), hd, n, hd,
                   NormParams());
  kernels::Scale(a_.head_in.data(), n * hd, static_cast<float>(c_.dim_model_base / c_.hidden_size), round_);
  kernels::MatMul(a_.head_in.data(), hd, n, lm_head_, logits, c_.vocab_size, pool, round_);
}

Status MiniCpmModel::Forward(const ForwardBatch& batch, KvCache& kv, StateSlots* /*states*/,
                             float* logits, ThreadPool& pool) {
  const int64_t t = static_cast<int64_t>(batch.tokens.size());
  if (t == 0) return OkStatus();
  for (int32_t tok : batch.tokens) {
    if (tok < 0 || tok >= c_.vocab_size)
      return InvalidArgument("token id " + std::to_string(tok) + " is outside the vocabulary [0, " +
                             std::to_string(c_.vocab_size) + ")");
  }
  for (const SeqStep& s : batch.seqs) {
    if (s.num_computed + s.num_tokens > rope_.max_positions())
      return InvalidArgument("position " + std::to_string(s.num_computed + s.num_tokens - 1) +
                             " is beyond the model length " + std::to_string(rope_.max_positions()));
  }
  a_.Resize(t, c_);
  const std::vector<const LinearWeight*> linear = LayerLinearWeights();
  x_out_ = ChooseNormOut(round_, linear, t, c_.hidden_size, a_.x.data(), a_.x_pairs);
  o_out_ = ChooseDeltaRows(x_out_, linear, t, c_.hidden_size, a_.o.data(), a_.o_bf16);
  {
    ProfileScope section("embedding, positions");
    Embed(batch, a_.h.data());
    PrepareRopeAndSlots(batch, kv.block_size());
  }
  // x = RMSNorm(h), layer 0's attention input; each later norm follows a residual add.
  Norm(layers_[0].input_layernorm, t, pool);
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const bool last = l + 1 == c_.num_hidden_layers;
    Attention(layers_[l], l, batch, kv, t, pool);
    Mlp(layers_[l], last ? nullptr : &layers_[l + 1].input_layernorm, t, pool);
  }
  Head(batch, logits, pool);
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadMiniCpm(const LoadOptions& options,
                                             const std::string& config_text,
                                             const std::string& config_path, ThreadPool& pool) {
  CPM_ASSIGN_OR_RETURN(MiniCpmConfig config, ParseMiniCpmConfig(config_text, config_path));
  auto model = std::make_unique<MiniCpmModel>();
  CPM_RETURN_IF_ERROR(model->Load(options, config, pool));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace cpm
