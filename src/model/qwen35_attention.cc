// Gated full attention of the Qwen3.5 hybrid, as flat named steps.
#include "model/qwen35_attention.h"

#include <cmath>

#include "kernels/gated_norm.h"
#include "kernels/rmsnorm.h"
#include "kernels/rope.h"
#include "model/forward_profile.h"
#include "model/row_ranges.h"
#include "tensor/dtype.h"

namespace cpm {

using kernels::Round;

StatusOr<GatedAttentionWeights> LoadGatedAttention(WeightLoader& wl, const Qwen35Config& c,
                                                   const std::string& p,
                                                   kernels::WeightQuant quant) {
  const int64_t hd = c.head_dim, D = c.hidden_size;
  const int64_t q_rows = c.num_attention_heads * hd * (c.attn_output_gate ? 2 : 1);
  GatedAttentionWeights w;
  CPM_ASSIGN_OR_RETURN(w.q_proj, wl.Linear(p + "q_proj.weight", q_rows, D));
  CPM_ASSIGN_OR_RETURN(w.k_proj, wl.Linear(p + "k_proj.weight", c.num_key_value_heads * hd, D));
  CPM_ASSIGN_OR_RETURN(w.v_proj, wl.Linear(p + "v_proj.weight", c.num_key_value_heads * hd, D));
  CPM_ASSIGN_OR_RETURN(w.o_proj, wl.Linear(p + "o_proj.weight", D, c.num_attention_heads * hd));
  CPM_ASSIGN_OR_RETURN(w.q_norm, wl.F32(p + "q_norm.weight", {hd}));
  CPM_ASSIGN_OR_RETURN(w.k_norm, wl.F32(p + "k_norm.weight", {hd}));
  for (kernels::LinearWeight* lw : {&w.q_proj, &w.k_proj, &w.v_proj, &w.o_proj}) {
    kernels::PrepareLinear(lw, kernels::Source::kDrop, quant);
  }
  return w;
}

void GatedAttention::Forward(const Qwen35Config& c, const GatedAttentionWeights& w,
                             const NormOut& x, int64_t t,
                             std::span<const kernels::AttentionSeq> seqs, const float* cos,
                             const float* sin, const int64_t* kv_slots,
                             const kernels::KvLayerView& kv, Round round,
                             const DeltaRows& out, ThreadPool& pool) {
  const int64_t D = c.hidden_size, hd = c.head_dim, H = c.num_attention_heads,
                KV = c.num_key_value_heads;
  const int64_t qg_width = H * hd * (c.attn_output_gate ? 2 : 1);  // per head [q | gate]
  const int64_t q_stride = c.attn_output_gate ? 2 * hd : hd;       // between query heads in qg
  qg_.resize(t * qg_width);
  q_.resize(t * H * hd);
  k_.resize(t * KV * hd);
  v_.resize(t * KV * hd);
  attn_.resize(t * H * hd);

  // qg = x · Wqᵀ [T, H, 2·hd], k = x · Wkᵀ [T, KV·hd], v = x · Wvᵀ [T, KV·hd]
  const kernels::LinearWeight* ws[] = {&w.q_proj, &w.k_proj, &w.v_proj};
  float* ys[] = {qg_.data(), k_.data(), v_.data()};
  const int64_t strides[] = {qg_width, KV * hd, KV * hd};
  {
    ProfileScope section("attn q/k/v proj",
                         MatmulWorkOf({&w.q_proj, &w.k_proj, &w.v_proj}, t));
    MatMulGroupOnNorm(x, D, t, ws, ys, strides, pool, round);
  }

  // q = q_norm(query part of qg) [T·H, hd], k = k_norm(k) [T·KV, hd]: zero-centred, f32, one cast.
  // Partial NeoX RoPE over the first rotary_dim dims of every head (cos, sin: [T, rotary_dim/2]).
  // Cache K (normed, rotated) and V (raw). Row ranges of tokens on the pool (row_ranges.h).
  const kernels::RmsNormParams norm{static_cast<float>(c.rms_norm_eps), 1.0f, false, round};
  const int64_t half = c.rotary_dim / 2;
  ProfileScope rope_section("attn q/k norms, RoPE, KV write");
  ForRowRanges(pool, t, (H + KV) * hd, [&](int64_t r0, int64_t r1) {
    const int64_t n = r1 - r0;
    float* q = q_.data() + r0 * H * hd;
    float* k = k_.data() + r0 * KV * hd;
    kernels::RmsNorm(qg_.data() + r0 * qg_width, q_stride, w.q_norm.data(), q, hd, n * H, hd,
                     norm);
    kernels::RmsNorm(k, hd, w.k_norm.data(), k, hd, n * KV, hd, norm);
    // HF's apply_rotary_pos_emb on bf16 tensors: every product and sum rounded.
    constexpr auto kEveryOp = kernels::RopeRounding::kEveryOp;
    kernels::RopeNeox(q, H * hd, n, H, hd, c.rotary_dim, cos + r0 * half, sin + r0 * half, round,
                      kEveryOp);
    kernels::RopeNeox(k, KV * hd, n, KV, hd, c.rotary_dim, cos + r0 * half, sin + r0 * half,
                      round, kEveryOp);
    kernels::KvWrite(k, KV * hd, v_.data() + r0 * KV * hd, KV * hd, kv_slots + r0, n, kv);
  });
  rope_section.End();
  {
    ProfileScope section("attention");
    // Causal attention over each sequence's cache.
    kernels::PagedAttention(q_.data(), H * hd, H, seqs, kv,
                            1.0f / std::sqrt(static_cast<float>(hd)), attn_.data(), H * hd, pool,
                            round);
    // attn ⊙ sigmoid(gate) [T·H, hd], gate = second half of each head's qg row.
    if (c.attn_output_gate) {
      ForRowRanges(pool, t, H * hd, [&](int64_t r0, int64_t r1) {
        kernels::SigmoidMul(attn_.data() + r0 * H * hd, hd, qg_.data() + r0 * qg_width + hd,
                            2 * hd, (r1 - r0) * H, hd, round);
      });
    }
  }
  // out = attn · Woᵀ [T, hidden]
  ProfileScope section("attn o proj", MatmulWorkOf({&w.o_proj}, t));
  MatMulToDelta(attn_.data(), H * hd, t, w.o_proj, out, D, pool, round);
}

}  // namespace cpm
