// Gated DeltaNet layer of the Qwen3.5 hybrid, as flat named steps over a mixed batch.
#include "model/qwen35_deltanet.h"

#include <algorithm>
#include <cmath>

#include "kernels/conv1d.h"
#include "kernels/gated_delta_rule.h"
#include "kernels/gated_norm.h"
#include "kernels/residual.h"
#include "model/forward_profile.h"
#include "model/row_ranges.h"
#include "tensor/dtype.h"

namespace cpm {

using kernels::Round;

StatusOr<GatedDeltaNetWeights> LoadGatedDeltaNet(WeightLoader& wl, const Qwen35Config& c,
                                                 const std::string& p,
                                                 kernels::WeightQuant quant) {
  const int64_t D = c.hidden_size, Hv = c.linear_num_value_heads, K = c.linear_conv_kernel_dim;
  GatedDeltaNetWeights w;
  CPM_ASSIGN_OR_RETURN(w.in_proj_qkv, wl.Linear(p + "in_proj_qkv.weight", c.conv_dim(), D));
  CPM_ASSIGN_OR_RETURN(w.in_proj_z, wl.Linear(p + "in_proj_z.weight", c.value_dim(), D));
  CPM_ASSIGN_OR_RETURN(w.in_proj_b, wl.Linear(p + "in_proj_b.weight", Hv, D));
  CPM_ASSIGN_OR_RETURN(w.in_proj_a, wl.Linear(p + "in_proj_a.weight", Hv, D));
  CPM_ASSIGN_OR_RETURN(w.out_proj, wl.Linear(p + "out_proj.weight", D, c.value_dim()));
  CPM_ASSIGN_OR_RETURN(std::vector<float> conv1d,
                       wl.F32(p + "conv1d.weight", {c.conv_dim(), 1, K}));
  w.conv1d_taps = kernels::PackConvTaps(conv1d, c.conv_dim(), K);
  CPM_ASSIGN_OR_RETURN(std::vector<float> a_log, wl.F32(p + "A_log", {Hv}));
  CPM_ASSIGN_OR_RETURN(w.dt_bias, wl.F32(p + "dt_bias", {Hv}));
  CPM_ASSIGN_OR_RETURN(w.norm, wl.F32(p + "norm.weight", {c.linear_value_head_dim}));
  w.neg_a.resize(Hv);
  for (int64_t h = 0; h < Hv; ++h) w.neg_a[h] = -std::exp(a_log[h]);
  for (kernels::LinearWeight* lw : {&w.in_proj_qkv, &w.in_proj_z, &w.out_proj}) {
    kernels::PrepareLinear(lw, kernels::Source::kDrop, quant);
  }
  for (kernels::LinearWeight* lw : {&w.in_proj_b, &w.in_proj_a}) {
    kernels::PrepareLinear(lw, kernels::Source::kDrop);
  }
  return w;
}

int64_t DeltaNetConvStateFloats(const Qwen35Config& c) {
  return (c.linear_conv_kernel_dim - 1) * c.conv_dim();
}

int64_t DeltaNetStateFloats(const Qwen35Config& c) {
  return DeltaNetConvStateFloats(c) +
         c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim;
}

// One sequence's conv over ranges of its tokens: a range's K−1 rows of history are rows of m
// (or, for the first range, the old state), copied into the worker's own history buffer so
// that no task reads the state after another has updated it; the state is updated last.
void GatedDeltaNet::ConvByTokens(const DeltaNetSeq& s, const float* taps, int64_t K,
                                 int64_t conv_dim, Round round, ThreadPool& pool) {
  const int64_t hist = K - 1, t = s.num_tokens;
  const float* m = m_.data() + s.row_begin * conv_dim;
  float* y = y_.data() + s.row_begin * conv_dim;
  // Row r of state ++ m, r in [-hist, t).
  const auto row = [&](int64_t r) {
    return r < 0 ? s.state + (r + hist) * conv_dim : m + r * conv_dim;
  };
  const int64_t ranges = std::min<int64_t>(4 * pool.num_threads(), t / 16);
  const int64_t per = (t + ranges - 1) / ranges;
  conv_hist_.resize(pool.num_threads());
  pool.ParallelFor(ranges, [&](int64_t task, int worker) {
    const int64_t i0 = task * per, i1 = std::min(t, i0 + per);
    if (i0 >= i1) return;
    std::vector<float>& h = conv_hist_[worker];
    h.resize(hist * conv_dim);
    for (int64_t j = 0; j < hist; ++j) {
      std::copy(row(i0 - hist + j), row(i0 - hist + j) + conv_dim, h.data() + j * conv_dim);
    }
    kernels::CausalConv1dSilu(m + i0 * conv_dim, conv_dim, i1 - i0, conv_dim, 0, conv_dim, taps,
                              K, h.data(), y + i0 * conv_dim, conv_dim, round);
  });
  // state <- the last hist rows of state ++ m (t ≥ kConvByTokens > hist: all rows of m).
  for (int64_t j = 0; j < hist; ++j) {
    std::copy(row(t - hist + j), row(t - hist + j) + conv_dim, s.state + j * conv_dim);
  }
}

void GatedDeltaNet::Forward(const Qwen35Config& c, const GatedDeltaNetWeights& w, const NormOut& x,
                            int64_t t, std::span<const DeltaNetSeq> seqs, Round round,
                            const DeltaRows& out, ThreadPool& pool) {
  const int64_t D = c.hidden_size, Hk = c.linear_num_key_heads, Hv = c.linear_num_value_heads,
                dk = c.linear_key_head_dim, dv = c.linear_value_head_dim,
                K = c.linear_conv_kernel_dim, key_dim = c.key_dim(), value_dim = c.value_dim(),
                conv_dim = c.conv_dim();
  m_.resize(t * conv_dim);
  y_.resize(t * conv_dim);
  z_.resize(t * value_dim);
  b_.resize(t * Hv);
  a_.resize(t * Hv);
  o_.resize(t * value_dim);

  // m = x · W_qkvᵀ [T, conv_dim], z = x · W_zᵀ [T, value_dim], b, a = x · W_bᵀ, x · W_aᵀ [T, Hv]
  const kernels::LinearWeight* ws[] = {&w.in_proj_qkv, &w.in_proj_z, &w.in_proj_b, &w.in_proj_a};
  float* ys[] = {m_.data(), z_.data(), b_.data(), a_.data()};
  const int64_t strides[] = {conv_dim, value_dim, Hv, Hv};
  {
    ProfileScope section("GDN in proj", MatmulWorkOf({ws[0], ws[1], ws[2], ws[3]}, t));
    MatMulGroupOnNorm(x, D, t, ws, ys, strides, pool, round);
  }

  // y = silu(causal_conv1d(conv_state ++ m)) [T, conv_dim] per sequence; conv state updated.
  // A sequence of kConvByTokens+ tokens (a prefill chunk) goes by ranges of its tokens, whole
  // rows each, read in memory order. The others go by tasks of whole rows where they alone
  // give the threads enough of them (a decode batch, whose conv states come from memory: each
  // task then streams whole 24 KiB rows of its state rather than 2 KiB pieces; V-4.6 batch 16
  // 1.04x), else of ≥ 512 channels. A channel's result does not depend on the split.
  ProfileScope conv_section("GDN conv, gates, q/k l2norm");
  std::vector<DeltaNetSeq> short_seqs;
  for (const DeltaNetSeq& s : seqs) {
    if (s.num_tokens >= kConvByTokens) {
      ConvByTokens(s, w.conv1d_taps.data(), K, conv_dim, round, pool);
    } else {
      short_seqs.push_back(s);
    }
  }
  const int64_t num_seqs = static_cast<int64_t>(short_seqs.size()),
                wanted = 6 * pool.num_threads();
  const int64_t channel_block =
      num_seqs >= wanted ? conv_dim
                         : std::max<int64_t>(512, (conv_dim * num_seqs / wanted + 63) / 64 * 64);
  const int64_t blocks = (conv_dim + channel_block - 1) / channel_block;
  pool.ParallelFor(num_seqs * blocks, [&](int64_t task, int) {
    const DeltaNetSeq& s = short_seqs[task / blocks];
    const int64_t c0 = (task % blocks) * channel_block, c1 = std::min(conv_dim, c0 + channel_block);
    kernels::CausalConv1dSilu(m_.data() + s.row_begin * conv_dim, conv_dim, s.num_tokens, conv_dim,
                              c0, c1, w.conv1d_taps.data(), K, s.state,
                              y_.data() + s.row_begin * conv_dim, conv_dim, round);
  });

  // β = sigmoid(b), g = −exp(A_log) · softplus(a + dt_bias), both f32 [T, Hv];
  // q <- l2norm(q) · dk^-1/2, k <- l2norm(k), per head, f32 (in place in y). Rows of tokens on
  // the pool (row_ranges.h).
  ForRowRanges(pool, t, Hv, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      for (int64_t h = 0; h < Hv; ++h) {
        float& b = b_[i * Hv + h];
        float& a = a_[i * Hv + h];
        b = 1.0f / (1.0f + std::exp(-b));
        if (round == Round::kBf16) b = RoundBf16(b);  // HF's b.sigmoid() on bf16, as vLLM's β
        const float u = a + w.dt_bias[h];
        const float softplus = u > 20.0f ? u : std::log1p(std::exp(u));  // torch's threshold
        a = w.neg_a[h] * softplus;
      }
    }
    float* yr = y_.data() + r0 * conv_dim;
    kernels::L2NormHeads(yr, conv_dim, r1 - r0, Hk, dk, 1e-6f,
                         1.0f / std::sqrt(static_cast<float>(dk)));
    kernels::L2NormHeads(yr + key_dim, conv_dim, r1 - r0, Hk, dk, 1e-6f, 1.0f);
  });

  conv_section.End();

  // o = gated delta rule per (sequence, value head) [T, Hv, dv]; v head h reads k head h / (Hv/Hk).
  // Tasks in contiguous shares: a sequence's head states follow one another in memory, so each
  // thread streams one run of them (V-4.6's dims, batch-16 decode, where the states are ~30% of
  // a step's bytes: +4.8-7.3% in 3 of 3 interleaved rounds; batch 1 and 4 within the noise).
  const int64_t conv_floats = DeltaNetConvStateFloats(c), heads_per_k = Hv / Hk;
  const int64_t scratch_floats = kernels::GatedDeltaRuleChunkedScratch(kChunk, dk, dv);
  scratch_.resize(pool.num_threads());
  ProfileScope rule_section("GDN delta rule, gated norm");
  pool.ParallelForShares(static_cast<int64_t>(seqs.size()) * Hv, [&](int64_t task, int worker) {
    const DeltaNetSeq& s = seqs[task / Hv];
    const int64_t h = task % Hv, kh = h / heads_per_k, r0 = s.row_begin;
    kernels::GdnHead head;
    head.q = y_.data() + r0 * conv_dim + kh * dk;
    head.k = y_.data() + r0 * conv_dim + key_dim + kh * dk;
    head.qk_stride = conv_dim;
    head.v = y_.data() + r0 * conv_dim + 2 * key_dim + h * dv;
    head.v_stride = conv_dim;
    head.g = a_.data() + r0 * Hv + h;
    head.beta = b_.data() + r0 * Hv + h;
    head.gb_stride = Hv;
    head.o = o_.data() + r0 * value_dim + h * dv;
    head.o_stride = value_dim;
    head.state = s.state + conv_floats + h * dk * dv;
    if (s.num_chunked > 0) {
      std::vector<float>& sc = scratch_[worker];
      if (static_cast<int64_t>(sc.size()) < scratch_floats) sc.resize(scratch_floats);
      kernels::GatedDeltaRuleChunked(head, s.num_chunked, dk, dv, kChunk, sc.data());
    }
    if (s.num_tokens > s.num_chunked) {
      kernels::GatedDeltaRuleRecurrent(head.FromRow(s.num_chunked), s.num_tokens - s.num_chunked,
                                       dk, dv);
    }
  });
  // o = rmsnorm(bf(o)) · w · silu(z) per head [T·Hv, dv]
  ForRowRanges(pool, t, value_dim, [&](int64_t r0, int64_t r1) {
    float* o = o_.data() + r0 * value_dim;
    kernels::RoundInPlace(o, (r1 - r0) * value_dim, round);
    kernels::GatedRmsNorm(o, dv, z_.data() + r0 * value_dim, dv, w.norm.data(), o, dv,
                          (r1 - r0) * Hv, dv, static_cast<float>(c.rms_norm_eps), round);
  });

  rule_section.End();

  // out = o · W_outᵀ [T, hidden]
  ProfileScope section("GDN out proj", MatmulWorkOf({&w.out_proj}, t));
  MatMulToDelta(o_.data(), value_dim, t, w.out_proj, out, D, pool, round);
}

}  // namespace cpm
