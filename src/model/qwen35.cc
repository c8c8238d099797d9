// Qwen3.5 hybrid decoder: embeddings (or caller-supplied multimodal rows), then per layer
// h += Mixer(norm(h)); h += MLP(norm(h)) with Mixer = gated attention or Gated DeltaNet, then the
// final norm and the tied head on the requested rows. State per sequence: paged K/V for the full
// layers, one StateSlots slot (conv + recurrent state of every linear layer).
#include "model/qwen35.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/log.h"
#include "io/safetensors.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/q8.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "kv/state_slots.h"
#include "model/embedding_rows.h"
#include "model/forward_profile.h"
#include "model/minicpmv46_weights.h"
#include "model/qwen35_attention.h"
#include "model/qwen35_config.h"
#include "model/qwen35_deltanet.h"
#include "model/residual_norm.h"
#include "model/rope_table.h"
#include "model/weight_loader.h"

namespace cpm {
namespace {

using kernels::LinearWeight;
using kernels::Round;

struct Qwen35Layer {
  bool full_attention = false;
  int64_t index = 0;                            // among the full (KV layer) or the linear layers
  std::vector<float> input_layernorm;           // [hidden] zero-centred
  GatedAttentionWeights attn;                   // full layers
  GatedDeltaNetWeights gdn;                     // linear layers
  std::vector<float> post_attention_layernorm;  // [hidden] zero-centred
  LinearWeight gate_proj, up_proj, down_proj;   // [ffn, hidden] ×2, [hidden, ffn]
};

class Qwen35Model : public Model {
 public:
  const ModelInfo& info() const override { return info_; }
  Status Forward(const ForwardBatch& batch, KvCache& kv, StateSlots* states, float* logits,
                 ThreadPool& pool) override;
  // `vision` is set for MiniCPM-V-4.6: its tensors are validated here; the tower itself is
  // loaded by LoadVisionEncoder (minicpmv46_vision.cc).
  Status Load(const LoadOptions& options, const std::string& architecture, const Qwen35Config& c,
              const MiniCpmV46VisionConfig* vision, ThreadPool& pool);

 private:
  Status LoadLayer(WeightLoader& wl, int64_t l, int64_t* full, int64_t* linear);
  std::vector<const LinearWeight*> LayerLinearWeights() const;  // every layer's
  std::vector<const LinearWeight*> AllLinearWeights() const;    // the layers', then the head
  Status Validate(const ForwardBatch& batch, const KvCache& kv, const StateSlots* states) const;
  void Embed(const ForwardBatch& batch);
  void PrepareStep(const ForwardBatch& batch, int64_t block_size, StateSlots* states);
  // h += MLP(x), x = norm(h) already there; then x = the next norm (`next_norm`, if any) of h.
  void Mlp(const Qwen35Layer& w, const std::vector<float>* next_norm, int64_t t,
           ThreadPool& pool);
  // h += mix over t rows (rounded in the bf16 path), then x = norm(h) · next_norm when one is
  // given (residual_norm.h).
  void AddMixAndNorm(const std::vector<float>* next_norm, int64_t t, ThreadPool& pool);
  // x = norm(h) · weight over t rows: the first layer's mixer's input (residual_norm.h).
  void NormInto(const std::vector<float>& weight, int64_t t, ThreadPool& pool);
  void Head(const ForwardBatch& batch, float* logits, ThreadPool& pool);
  kernels::RmsNormParams Norm() const {
    return {static_cast<float>(c_.rms_norm_eps), 1.0f, false, round_};
  }

  Qwen35Config c_;
  ModelInfo info_;
  Round round_ = Round::kNone;
  kernels::WeightQuant quant_ = kernels::WeightQuant::kNone;  // --quantization
  LinearWeight embed_tokens_;  // [vocab, hidden]; also the head when tied
  LinearWeight lm_head_;       // [vocab, hidden]
  std::vector<float> norm_;    // [hidden] zero-centred
  std::vector<Qwen35Layer> layers_;
  RopeTable rope_;             // [positions, rotary_dim/2]
  int64_t state_floats_ = 0;   // per linear layer, inside a slot
  GatedAttention attention_;
  GatedDeltaNet deltanet_;
  // Per-step activations, reused (the engine thread is the only caller).
  std::vector<float> h_, x_, mix_, gate_, cos_, sin_, head_in_;  // [T, ...]; gate_: silu(g)·u
  AlignedBuffer x_pairs_;  // x as the matmuls' bf16 pair rows, where they take them (x_out_)
  // Where the norms write x and the mixers' input and MLP matmuls read it: x_, or x_pairs_ on
  // the bf16 dot products with no weight quantized to Q8_0 (ChooseNormOut, once per Forward).
  NormOut x_out_ = nullptr;
  AlignedBuffer mix_bf16_;  // the mixers' and MLP's output as bf16 rows, where written so
  // Where the mixers' out projections and the MLP write what the residual add reads: mix_, or
  // mix_bf16_ where the matmuls write bf16 rows (ChooseDeltaRows, with x_out_).
  DeltaRows mix_out_ = nullptr;
  std::vector<int64_t> kv_slots_;                                     // [T]
  std::vector<kernels::AttentionSeq> attn_seqs_;
  std::vector<DeltaNetSeq> gdn_seqs_;
  std::vector<float*> seq_states_;  // per sequence: its slot's first float
};

std::vector<const LinearWeight*> Qwen35Model::LayerLinearWeights() const {
  std::vector<const LinearWeight*> ws;
  for (const Qwen35Layer& L : layers_) {
    if (L.full_attention) {
      for (const LinearWeight* w : {&L.attn.q_proj, &L.attn.k_proj, &L.attn.v_proj, &L.attn.o_proj}) {
        ws.push_back(w);
      }
    } else {
      for (const LinearWeight* w : {&L.gdn.in_proj_qkv, &L.gdn.in_proj_z, &L.gdn.in_proj_b,
                                    &L.gdn.in_proj_a, &L.gdn.out_proj}) {
        ws.push_back(w);
      }
    }
    for (const LinearWeight* w : {&L.gate_proj, &L.up_proj, &L.down_proj}) ws.push_back(w);
  }
  return ws;
}

std::vector<const LinearWeight*> Qwen35Model::AllLinearWeights() const {
  std::vector<const LinearWeight*> ws = LayerLinearWeights();
  ws.push_back(&lm_head_);
  return ws;
}

Status Qwen35Model::LoadLayer(WeightLoader& wl, int64_t l, int64_t* full, int64_t* linear) {
  const int64_t D = c_.hidden_size, F = c_.intermediate_size;
  const std::string p = c_.weight_prefix + "layers." + std::to_string(l) + ".";
  Qwen35Layer L;
  L.full_attention = c_.full_attention[l];
  CPM_ASSIGN_OR_RETURN(L.input_layernorm, wl.F32(p + "input_layernorm.weight", {D}));
  if (L.full_attention) {
    L.index = (*full)++;
    CPM_ASSIGN_OR_RETURN(L.attn, LoadGatedAttention(wl, c_, p + "self_attn.", quant_));
  } else {
    L.index = (*linear)++;
    CPM_ASSIGN_OR_RETURN(L.gdn, LoadGatedDeltaNet(wl, c_, p + "linear_attn.", quant_));
  }
  CPM_ASSIGN_OR_RETURN(L.post_attention_layernorm, wl.F32(p + "post_attention_layernorm.weight", {D}));
  CPM_ASSIGN_OR_RETURN(L.gate_proj, wl.Linear(p + "mlp.gate_proj.weight", F, D));
  CPM_ASSIGN_OR_RETURN(L.up_proj, wl.Linear(p + "mlp.up_proj.weight", F, D));
  CPM_ASSIGN_OR_RETURN(L.down_proj, wl.Linear(p + "mlp.down_proj.weight", D, F));
  for (LinearWeight* w : {&L.gate_proj, &L.up_proj, &L.down_proj}) {
    kernels::PrepareLinear(w, kernels::Source::kDrop, quant_);
  }
  layers_.push_back(std::move(L));
  return OkStatus();
}

Status Qwen35Model::Load(const LoadOptions& options, const std::string& architecture,
                         const Qwen35Config& c, const MiniCpmV46VisionConfig* vision,
                         ThreadPool& pool) {
  c_ = c;
  // No declared dtype (the released MiniCPM-V-4.6 config) means bf16, as vLLM / TRT-LLM load it.
  DType dtype = DType::kBF16;
  if (options.dtype == DTypeChoice::kFloat32 ||
      (options.dtype == DTypeChoice::kAuto && c_.torch_dtype == "float32")) {
    dtype = DType::kF32;
  }
  round_ = dtype == DType::kBF16 ? Round::kBf16 : Round::kNone;
  quant_ = options.quantization;

  CPM_ASSIGN_OR_RETURN(WeightLoader wl, WeightLoader::Open(options, dtype, &pool));
  const int64_t D = c_.hidden_size;
  CPM_ASSIGN_OR_RETURN(embed_tokens_, wl.EmbeddingTable(c_.weight_prefix + "embed_tokens.weight",
                                                       c_.vocab_size, D));
  int64_t full = 0, linear = 0;
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    CPM_RETURN_IF_ERROR(LoadLayer(wl, l, &full, &linear));
  }
  CPM_ASSIGN_OR_RETURN(norm_, wl.F32(c_.weight_prefix + "norm.weight", {D}));
  // Tied unless the config says otherwise and the checkpoint has a head (as HF and vLLM).
  const bool untied = !c_.tie_word_embeddings && (wl.dummy() || wl.Has("lm_head.weight"));
  if (untied) {
    CPM_ASSIGN_OR_RETURN(lm_head_, wl.Linear("lm_head.weight", c_.vocab_size, D));
  } else {
    lm_head_ = embed_tokens_;
  }
  // Tied, the head's source is the embedding table, which Embed reads.
  kernels::PrepareLinear(&lm_head_, untied ? kernels::Source::kDrop : kernels::Source::kKeep,
                         quant_);
  const std::string q8 = kernels::SummarizeQ8(AllLinearWeights());
  if (!q8.empty()) CPM_LOG_INFO("Quantized weights: {}", q8);

  // MiniCPM-V-4.6: the vision tower and merger must match vision_config; MTP weights are skipped.
  const bool vlm = vision != nullptr;
  if (vlm && !wl.dummy()) {
    CPM_ASSIGN_OR_RETURN(SafetensorsArchive archive, SafetensorsArchive::OpenDir(options.model_dir));
    CPM_RETURN_IF_ERROR(ValidateMiniCpmV46Vision(archive, *vision, D));
  }
  // A head beside a tied embedding is ignored, as vLLM skips it, at the top level or under the
  // language model's prefix (the seed document's tensor listing shows
  // model.language_model.lm_head.weight).
  CPM_RETURN_IF_ERROR(wl.CheckAllUsed([&](const std::string& n) {
    return IsMtpTensor(n) || (vlm && IsMiniCpmV46VisionTensor(n)) || n == "lm_head.weight" ||
           n == c_.weight_prefix + "lm_head.weight" || n.find("rotary_emb.") != std::string::npos;
  }));

  CPM_ASSIGN_OR_RETURN(const int64_t max_len,
                       RopeTablePositions(options, c_.max_position_embeddings, c_.rotary_dim));
  rope_ = BuildRopeTable(c_.rotary_dim, c_.rope_theta, max_len);
  if (round_ == Round::kBf16) {  // HF and vLLM cast cos/sin to the activation dtype
    kernels::RoundBf16InPlace(rope_.cos.data(), static_cast<int64_t>(rope_.cos.size()));
    kernels::RoundBf16InPlace(rope_.sin.data(), static_cast<int64_t>(rope_.sin.size()));
  }
  state_floats_ = DeltaNetStateFloats(c_);

  info_.architecture = architecture;
  info_.vocab_size = c_.vocab_size;
  info_.hidden_size = D;
  info_.max_position_embeddings = c_.max_position_embeddings;
  info_.max_positions = max_len;
  info_.dtype = dtype;
  info_.kv = {full, c_.num_key_value_heads, c_.head_dim};
  info_.state_slot_bytes = linear * state_floats_ * static_cast<int64_t>(sizeof(float));
  if (linear > 0) info_.prompt_chunk_tokens = GatedDeltaNet::kChunk;
  info_.weight_bytes = wl.bytes_held() + kernels::PackedHeldBytesDelta(AllLinearWeights());
  info_.eos_token_ids = c_.eos_token_id;
  return OkStatus();
}

Status Qwen35Model::Validate(const ForwardBatch& batch, const KvCache& kv,
                             const StateSlots* states) const {
  for (int32_t tok : batch.tokens) {
    if (tok < 0 || tok >= c_.vocab_size)
      return InvalidArgument("token id " + std::to_string(tok) + " is outside the vocabulary [0, " +
                             std::to_string(c_.vocab_size) + ")");
  }
  const bool hybrid = info_.state_slot_bytes > 0;
  if (hybrid && (states == nullptr || states->slot_bytes() < info_.state_slot_bytes))
    return Internal("Qwen3.5 hybrid: the forward step needs state slots of " +
                    std::to_string(info_.state_slot_bytes) + " bytes");
  if (kv.spec().num_attention_layers < info_.kv.num_attention_layers)
    return Internal("Qwen3.5 hybrid: the KV cache has too few attention layers");
  for (const SeqStep& s : batch.seqs) {
    if (s.num_computed + s.num_tokens > rope_.max_positions())
      return InvalidArgument("position " + std::to_string(s.num_computed + s.num_tokens - 1) +
                             " is beyond the model length " + std::to_string(rope_.max_positions()));
    if (hybrid && (s.state_slot < 0 || s.state_slot >= states->num_slots()))
      return Internal("Qwen3.5 hybrid: sequence without a valid state slot");
  }
  return OkStatus();
}

// h = E[tok] [T, hidden] (no embedding scale), or the caller's embeddings on `embed_rows`.
void Qwen35Model::Embed(const ForwardBatch& batch) {
  const int64_t D = c_.hidden_size;
  EmbeddingRows(embed_tokens_, batch.tokens, h_.data());
  for (size_t i = 0; i < batch.embed_rows.size(); ++i) {
    std::copy(batch.embeds + i * D, batch.embeds + (i + 1) * D, h_.data() + batch.embed_rows[i] * D);
    kernels::RoundInPlace(h_.data() + batch.embed_rows[i] * D, D, round_);
  }
}

// Per token: RoPE cos/sin of its position and its KV slot; per sequence: its attention range and
// the first float of its state slot.
void Qwen35Model::PrepareStep(const ForwardBatch& batch, int64_t block_size, StateSlots* states) {
  const int64_t half = rope_.half;
  attn_seqs_.clear();
  seq_states_.clear();
  int64_t t = 0;
  for (const SeqStep& s : batch.seqs) {
    attn_seqs_.push_back({t, s.num_tokens, s.num_computed + s.num_tokens, s.block_table.data()});
    float* state = states && s.state_slot >= 0 ? reinterpret_cast<float*>(states->Data(s.state_slot))
                                               : nullptr;
    // A sequence starts from the zero state, whatever the slot held (e.g. after preemption).
    if (state && s.num_computed == 0) std::fill_n(state, info_.state_slot_bytes / sizeof(float), 0.0f);
    seq_states_.push_back(state);
    for (int64_t i = 0; i < s.num_tokens; ++i, ++t) {
      const int64_t pos = s.num_computed + i;
      std::copy(rope_.CosAt(pos), rope_.CosAt(pos) + half, cos_.data() + t * half);
      std::copy(rope_.SinAt(pos), rope_.SinAt(pos) + half, sin_.data() + t * half);
      kv_slots_[t] = static_cast<int64_t>(s.block_table[pos / block_size]) * block_size + pos % block_size;
    }
  }
}

// h += down(silu(gate(x)) ⊙ up(x)), x = norm(h)
void Qwen35Model::Mlp(const Qwen35Layer& w, const std::vector<float>* next_norm, int64_t t,
                      ThreadPool& pool) {
  const int64_t F = c_.intermediate_size, D = c_.hidden_size;
  {
    ProfileScope section("MLP (gate/up, SiLU, down)",
                         MatmulWorkOf({&w.gate_proj, &w.up_proj, &w.down_proj}, t));
    GatedMlpOnNorm(x_out_, D, t, w.gate_proj, w.up_proj, w.down_proj, gate_.data(), F,
                   mix_out_, D, pool, round_);
  }
  AddMixAndNorm(next_norm, t, pool);
}

void Qwen35Model::NormInto(const std::vector<float>& weight, int64_t t, ThreadPool& pool) {
  NormRows(pool, t, c_.hidden_size, h_.data(), weight.data(), x_out_, Norm());
}

void Qwen35Model::AddMixAndNorm(const std::vector<float>* next_norm, int64_t t,
                                ThreadPool& pool) {
  AddResidualAndNorm(pool, t, c_.hidden_size, h_.data(), mix_out_, 1.0f, round_,
                     next_norm ? next_norm->data() : nullptr, x_out_, Norm());
}

// logits = norm(h) · Eᵀ [rows, vocab] for the requested rows only.
void Qwen35Model::Head(const ForwardBatch& batch, float* logits, ThreadPool& pool) {
  const int64_t D = c_.hidden_size, n = static_cast<int64_t>(batch.logit_rows.size());
  ProfileScope section("head (norm, lm_head)", MatmulWorkOf({&lm_head_}, n));
  head_in_.resize(n * D);
  for (int64_t i = 0; i < n; ++i) {
    const float* src = h_.data() + batch.logit_rows[i] * D;
    std::copy(src, src + D, head_in_.data() + i * D);
  }
  kernels::RmsNorm(head_in_.data(), D, norm_.data(), head_in_.data(), D, n, D, Norm());
  kernels::MatMul(head_in_.data(), D, n, lm_head_, logits, c_.vocab_size, pool, round_);
}

Status Qwen35Model::Forward(const ForwardBatch& batch, KvCache& kv, StateSlots* states,
                            float* logits, ThreadPool& pool) {
  const int64_t t = static_cast<int64_t>(batch.tokens.size());
  if (t == 0) return OkStatus();
  CPM_RETURN_IF_ERROR(Validate(batch, kv, states));
  const int64_t D = c_.hidden_size;
  h_.resize(t * D);
  x_.resize(t * D);
  const std::vector<const LinearWeight*> linear = LayerLinearWeights();
  x_out_ = ChooseNormOut(round_, linear, t, D, x_.data(), x_pairs_);
  mix_.resize(t * D);
  mix_out_ = ChooseDeltaRows(x_out_, linear, t, D, mix_.data(), mix_bf16_);
  gate_.resize(t * c_.intermediate_size);
  cos_.resize(t * rope_.half);
  sin_.resize(t * rope_.half);
  kv_slots_.resize(t);
  {
    ProfileScope section("embedding, positions");
    Embed(batch);
    PrepareStep(batch, kv.block_size(), states);
  }

  NormInto(layers_.front().input_layernorm, t, pool);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Qwen35Layer& L = layers_[l];
    // h += Mixer(x), x = norm(h); then x = norm(h) for the MLP
    if (L.full_attention) {
      attention_.Forward(c_, L.attn, x_out_, t, attn_seqs_, cos_.data(), sin_.data(),
                         kv_slots_.data(), kv.Layer(L.index), round_, mix_out_, pool);
    } else {
      gdn_seqs_.clear();
      for (size_t i = 0; i < batch.seqs.size(); ++i) {
        const SeqStep& s = batch.seqs[i];
        const int64_t prompt_rows =
            std::clamp<int64_t>(s.num_prompt_tokens - s.num_computed, 0, s.num_tokens);
        gdn_seqs_.push_back({attn_seqs_[i].q_begin, attn_seqs_[i].q_len, prompt_rows,
                             seq_states_[i] + L.index * state_floats_});
      }
      deltanet_.Forward(c_, L.gdn, x_out_, t, gdn_seqs_, round_, mix_out_, pool);
    }
    AddMixAndNorm(&L.post_attention_layernorm, t, pool);
    // h += MLP(x); then x = norm(h) for the next layer's mixer
    Mlp(L, l + 1 < layers_.size() ? &layers_[l + 1].input_layernorm : nullptr, t, pool);
  }
  Head(batch, logits, pool);
  return OkStatus();
}

}  // namespace

StatusOr<std::unique_ptr<Model>> LoadQwen35(const LoadOptions& options, const std::string& config_text,
                                            const std::string& config_path, ThreadPool& pool) {
  nlohmann::json j = nlohmann::json::parse(config_text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("architectures") ||
      !j["architectures"].is_array() || j["architectures"].empty() || !j["architectures"][0].is_string()) {
    return InvalidArgument(config_path + ": field 'architectures' must be a non-empty list of names");
  }
  const std::string arch = j["architectures"][0].get<std::string>();
  CPM_ASSIGN_OR_RETURN(Qwen35Config config, ParseQwen35Config(config_text, config_path));
  std::unique_ptr<MiniCpmV46VisionConfig> vision;
  if (arch == "MiniCPMV4_6ForConditionalGeneration") {
    CPM_ASSIGN_OR_RETURN(MiniCpmV46VisionConfig v, ParseMiniCpmV46VisionConfig(config_text, config_path));
    vision = std::make_unique<MiniCpmV46VisionConfig>(v);
  }
  auto model = std::make_unique<Qwen35Model>();
  CPM_RETURN_IF_ERROR(model->Load(options, arch, config, vision.get(), pool));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace cpm
