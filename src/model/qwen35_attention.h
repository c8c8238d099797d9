// Qwen3.5's gated full-attention layer (layers with layer_types "full_attention"): q_proj holds
// per-head [query | gate], zero-centred q/k norms before partial NeoX RoPE, paged causal GQA
// attention, output ⊙ sigmoid(gate), o_proj. Math: ../shared/docs/specs/minicpmv46.md §3.3.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/rounding.h"
#include "model/qwen35_config.h"
#include "model/residual_norm.h"
#include "model/weight_loader.h"

namespace cpm {

struct GatedAttentionWeights {
  kernels::LinearWeight q_proj;  // [H·hd·2, hidden] per head [q | gate] (×1 without the gate)
  kernels::LinearWeight k_proj;  // [KV·hd, hidden]
  kernels::LinearWeight v_proj;  // [KV·hd, hidden]
  kernels::LinearWeight o_proj;  // [hidden, H·hd]
  std::vector<float> q_norm;     // [hd] zero-centred
  std::vector<float> k_norm;     // [hd] zero-centred
};

// Loads "<prefix>q_proj.weight" ... with `prefix` ending in "self_attn.".
// Its linear weights are served as `quant` says.
StatusOr<GatedAttentionWeights> LoadGatedAttention(WeightLoader& wl, const Qwen35Config& c,
                                                   const std::string& prefix,
                                                   kernels::WeightQuant quant);

// One gated attention layer over a step's T tokens. Holds its scratch (engine thread only).
class GatedAttention {
 public:
  // x: [T, hidden] (normed input, as the norm wrote it); out: [T, hidden], in the form the
  // forward chose (ChooseDeltaRows). seqs: the step's
  // sequences over the rows of x; cos, sin: [T, rotary_dim/2] for each row's position; kv_slots:
  // [T] cache slots.
  void Forward(const Qwen35Config& c, const GatedAttentionWeights& w, const NormOut& x, int64_t t,
               std::span<const kernels::AttentionSeq> seqs, const float* cos, const float* sin,
               const int64_t* kv_slots, const kernels::KvLayerView& kv, kernels::Round round,
               const DeltaRows& out, ThreadPool& pool);

 private:
  std::vector<float> qg_;    // [T, H, 2·hd]: q_proj output, per head [query | gate]
  std::vector<float> q_;     // [T, H·hd] normed, rotated queries
  std::vector<float> k_;     // [T, KV·hd]
  std::vector<float> v_;     // [T, KV·hd]
  std::vector<float> attn_;  // [T, H·hd]
};

}  // namespace cpm
