// Qwen3.5's Gated DeltaNet layer (layer_types "linear_attention"): in_proj_qkv/z/b/a, causal
// depthwise conv1d + SiLU, L2-normalised q/k, β = sigmoid(b), g = −exp(A_log)·softplus(a + dt_bias),
// the gated delta rule (recurrent or chunked), gated RMSNorm with silu(z), out_proj.
// Math: ../shared/docs/specs/minicpmv46.md §3.4. Per-sequence state lives in a StateSlots slot.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/rounding.h"
#include "model/qwen35_config.h"
#include "model/residual_norm.h"
#include "model/weight_loader.h"

namespace cpm {

struct GatedDeltaNetWeights {
  kernels::LinearWeight in_proj_qkv;  // [conv_dim, hidden]: rows q [key_dim] | k [key_dim] | v [value_dim]
  kernels::LinearWeight in_proj_z;    // [value_dim, hidden]
  kernels::LinearWeight in_proj_b;    // [Hv, hidden]
  kernels::LinearWeight in_proj_a;    // [Hv, hidden]
  kernels::LinearWeight out_proj;     // [hidden, value_dim]
  std::vector<float> conv1d_taps;     // stored [conv_dim, 1, kernel], as PackConvTaps lays it out
  std::vector<float> neg_a;           // [Hv] −exp(A_log), f32
  std::vector<float> dt_bias;         // [Hv]
  std::vector<float> norm;            // [dv] plain weight of the gated RMSNorm
};

// Loads "<prefix>in_proj_qkv.weight" ... with `prefix` ending in "linear_attn.". The
// projections are served as `quant` says, but for in_proj_a and in_proj_b: [Hv, D] each (a
// 64th of the layer's bytes), they set each head's decay and write strength, which the
// recurrent state compounds over every later token, so they keep the checkpoint's values.
StatusOr<GatedDeltaNetWeights> LoadGatedDeltaNet(WeightLoader& wl, const Qwen35Config& c,
                                                 const std::string& prefix,
                                                 kernels::WeightQuant quant);

// One layer's state inside a sequence's slot, both f32:
//   conv state [kernel-1, conv_dim] (the last pre-conv rows, oldest first), then
//   recurrent state S [Hv, dk, dv].
int64_t DeltaNetConvStateFloats(const Qwen35Config& c);
int64_t DeltaNetStateFloats(const Qwen35Config& c);  // conv + recurrent

// One sequence's rows of the step and its state for this layer.
struct DeltaNetSeq {
  int64_t row_begin = 0;
  int64_t num_tokens = 0;
  // Its first rows that are prompt positions, from a chunk boundary of the prompt: the chunked
  // rule; the rest (generated positions) the recurrent rule, whatever their number. Which form a
  // position takes then depends on the position alone, not on the step (the two agree only up
  // to rounding, which in bf16 can change a greedy token).
  int64_t num_chunked = 0;
  float* state = nullptr;  // [DeltaNetStateFloats] floats
};

// One Gated DeltaNet layer over a step's T tokens. Holds its scratch (engine thread only).
class GatedDeltaNet {
 public:
  // A prompt's positions take the chunked delta rule, kChunk tokens a chunk from position 0.
  // Its work per token is ~3·dk·dv for the state plus ~kChunk·(3·dk + 2·dv) within the
  // chunk, so shorter chunks do less (HF's torch path uses 64: the same math, the f32 rounding a
  // little different, the decays e^Γ over shorter spans). kernels_bench, 256 tokens of a head:
  // chunks of 16 194 µs, 32 231, 64 270; the rule's share of a V-4.6 pp512 7.4-7.7% of the
  // samples with 16, 7.6-8.1% with 32, 9.6-10.2% with 64 (3 runs each).
  static constexpr int64_t kChunk = 16;

  // x: [T, hidden] (normed input, as the norm wrote it); out: [T, hidden], in the form the
  // forward chose (ChooseDeltaRows). Reads and updates each sequence's state.
  void Forward(const Qwen35Config& c, const GatedDeltaNetWeights& w, const NormOut& x, int64_t t,
               std::span<const DeltaNetSeq> seqs, kernels::Round round, const DeltaRows& out,
               ThreadPool& pool);

 private:
  std::vector<float> m_;     // [T, conv_dim] in_proj_qkv output (pre-conv)
  std::vector<float> y_;     // [T, conv_dim] conv output: q | k | v
  std::vector<float> z_;     // [T, value_dim]
  std::vector<float> b_;     // [T, Hv] then β
  std::vector<float> a_;     // [T, Hv] then g
  std::vector<float> o_;     // [T, value_dim]
  std::vector<std::vector<float>> scratch_;  // per worker: chunked-rule scratch
  std::vector<std::vector<float>> conv_hist_;  // per worker: a token range's conv history

  // Sequences with at least this many new tokens run the conv by token ranges.
  static constexpr int64_t kConvByTokens = 64;
  void ConvByTokens(const DeltaNetSeq& s, const float* taps, int64_t K, int64_t conv_dim,
                    kernels::Round round, ThreadPool& pool);
};

}  // namespace cpm
