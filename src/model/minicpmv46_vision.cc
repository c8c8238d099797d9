// MiniCPM-V-4.6's vision tower and mergers (spec minicpmv46.md §4), one slice at a time.
// Activations are f32 rows [tokens, width], tokens in row-major patch order; every linear layer
// runs through the model's matmul kernels (weights packed at load), the slice's attention through
// DenseAttention.
#include "model/minicpmv46_vision.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/dense_attention.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/sampling_ops.h"
#include "kernels/vision_ops.h"
#include "model/row_ranges.h"
#include "model/weight_loader.h"
#include "tensor/dtype.h"

namespace cpm {
namespace {

using kernels::LinearWeight;
using kernels::Round;

// HF's MiniCPMV4_6Merger builds its pre_norm with eps 1e-6, not vision_config.layer_norm_eps.
constexpr double kMergerNormEps = 1e-6;

struct Linear {
  LinearWeight w;        // [out, in]
  std::vector<float> b;  // [out]
};
struct Norm {
  std::vector<float> w, b;  // [dim]
};
struct SelfAttention {
  Linear q, k, v, out;  // [D, D] each; heads of head_dim
};
struct EncoderLayer {
  Norm layer_norm1, layer_norm2;
  SelfAttention self_attn;
  Linear fc1, fc2;  // [I, D], [D, I]
};
// `vit_merger`: attention inside 2×2 windows, then each window's 4 tokens merged into one.
struct WindowMerger {
  Norm layer_norm1;
  SelfAttention self_attn;
  Norm pre_norm;              // [4D]
  Linear linear_1, linear_2;  // [4I, 4D], [D, 4I]
};
// `merger.mlp.0`: 2×2 blocks of the tower's output to the language model's width.
struct Merger {
  Norm pre_norm;              // [4D]
  Linear linear_1, linear_2;  // [4D, 4D], [text_hidden, 4D]
};

// The patch embedding's [out, in] values (f32, rounded to the tower's dtype; the caller keeps them
// alive) as a packed weight: f32, or with `bf16` through their bf16 copy in `*b16` (exact: the
// values are bf16 already), so that the product takes the bf16 dot-product kernels.
LinearWeight WeightOfValues(const std::vector<float>& data, std::vector<uint16_t>* b16,
                            int64_t out, int64_t in, bool bf16) {
  LinearWeight w;
  w.dtype = DType::kF32;
  w.out_features = out;
  w.in_features = in;
  w.data = data.data();
  if (bf16) {
    b16->resize(data.size());
    for (size_t i = 0; i < data.size(); ++i) (*b16)[i] = F32ToBf16(data[i]);
    w.dtype = DType::kBF16;
    w.data = b16->data();
  }
  kernels::PrepareLinear(&w);
  return w;
}

// dst[r, 0:4·dim] = the 2×2 block at (2R, 2C) of the rows×cols grid `src` [rows·cols, dim], its
// tokens in the order top-left, top-right, bottom-left, bottom-right; blocks row-major.
void GatherBlocks(const float* src, int64_t rows, int64_t cols, int64_t dim, float* dst) {
  for (int64_t br = 0; br < rows / 2; ++br) {
    for (int64_t bc = 0; bc < cols / 2; ++bc) {
      float* out = dst + (br * (cols / 2) + bc) * 4 * dim;
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t token = (2 * br + k / 2) * cols + 2 * bc + k % 2;
        std::copy(src + token * dim, src + (token + 1) * dim, out + k * dim);
      }
    }
  }
}

class MiniCpmV46Vision final : public VisionEncoder {
 public:
  Status Load(const LoadOptions& options, const MiniCpmV46VisionConfig& c, int64_t text_hidden,
              DType dtype, ThreadPool& pool);

  int64_t weight_bytes() const override { return weight_bytes_; }
  int64_t output_dim() const override { return text_hidden_; }
  // 16x (the ViT merger, then the merger) needs the ViT merger's weights; 4x (the merger alone,
  // every layer on the full grid) runs on any checkpoint.
  bool Supports(int64_t patches_per_token) const override {
    return patches_per_token == 4 || (patches_per_token == 16 && has_vit_merger_);
  }
  int64_t default_patches_per_token() const override { return c_.vit_merger ? 16 : 4; }
  int64_t patch_size() const override { return c_.patch_size; }
  int64_t OutputRows(int64_t height, int64_t width, int64_t patches_per_token) const override {
    return (height / c_.patch_size) * (width / c_.patch_size) / patches_per_token;
  }
  StatusOr<bool> EncodeSlicePiece(const float* pixels, int64_t height, int64_t width,
                                  int64_t patches_per_token, float* out,
                                  VisionProgress* progress, ThreadPool& pool) override;

 private:
  StatusOr<std::vector<float>> Param(WeightLoader& wl, const std::string& name,
                                     const std::vector<int64_t>& shape);
  StatusOr<Linear> LoadLinear(WeightLoader& wl, const std::string& p, int64_t out, int64_t in);
  StatusOr<Norm> LoadNorm(WeightLoader& wl, const std::string& p, int64_t dim);
  StatusOr<SelfAttention> LoadAttention(WeightLoader& wl, const std::string& p);

  void Apply(const Linear& l, const float* x, int64_t m, float* y, ThreadPool& pool) const;
  // Apply, then gelu_tanh, the bias and the GELU in one pass over y.
  void ApplyGeluTanh(const Linear& l, const float* x, int64_t m, float* y, ThreadPool& pool) const;
  void AddResidual(float* x, const float* d, int64_t rows, ThreadPool& pool) const;
  // LayerNorm with the tower's layer_norm_eps, or `eps` (the final merger's is fixed at 1e-6).
  void ApplyNorm(const Norm& n, const float* x, int64_t m, int64_t dim, float* y, ThreadPool& pool,
                 double eps = -1) const;
  void Embed(const float* pixels, int64_t gh, int64_t gw, float* x, ThreadPool& pool) const;
  void Attend(const SelfAttention& a, const float* x, int64_t n, int64_t window_cols, float* out,
              ThreadPool& pool);
  void AttendWindows(int64_t n, int64_t cols, ThreadPool& pool);
  void AttendFull(int64_t n, ThreadPool& pool);
  void Encoder(const EncoderLayer& L, float* x, int64_t n, ThreadPool& pool);
  void MergeWindows(float* x, int64_t gh, int64_t gw, ThreadPool& pool);
  void MergeToText(const float* x, int64_t gh, int64_t gw, float* out, ThreadPool& pool);

  MiniCpmV46VisionConfig c_;
  int64_t text_hidden_ = 0;
  int64_t weight_bytes_ = 0;
  Round round_ = Round::kNone;
  LinearWeight patch_embedding_;           // [D, channels·P·P] (the conv as a matmul)
  std::vector<float> patch_bias_;          // [D]
  std::vector<float> position_embedding_;  // [grid², D]
  std::vector<EncoderLayer> layers_;
  std::vector<float> patch_weight_;        // backing store of patch_embedding_ (f32, bf16)
  std::vector<uint16_t> patch_weight_bf16_;
  WindowMerger vit_merger_;
  bool has_vit_merger_ = false;  // its weights are loaded (16x mode)
  Norm post_layernorm_;
  Merger merger_;
  // Per-slice scratch (the engine thread is the only caller).
  std::vector<float> ln_, q_, k_, v_, attn_, tmp_, ffn_;
};

// A small parameter as f32; with bf16 compute rounded to bf16, the values a bf16 model holds.
StatusOr<std::vector<float>> MiniCpmV46Vision::Param(WeightLoader& wl, const std::string& name,
                                                     const std::vector<int64_t>& shape) {
  CPM_ASSIGN_OR_RETURN(std::vector<float> v, wl.F32(name, shape));
  kernels::RoundInPlace(v.data(), static_cast<int64_t>(v.size()), round_);
  return v;
}

StatusOr<Linear> MiniCpmV46Vision::LoadLinear(WeightLoader& wl, const std::string& p, int64_t out,
                                              int64_t in) {
  Linear l;
  CPM_ASSIGN_OR_RETURN(l.w, wl.Linear(p + ".weight", out, in));
  kernels::PrepareLinear(&l.w, kernels::Source::kDrop);
  CPM_ASSIGN_OR_RETURN(l.b, Param(wl, p + ".bias", {out}));
  return l;
}

StatusOr<Norm> MiniCpmV46Vision::LoadNorm(WeightLoader& wl, const std::string& p, int64_t dim) {
  Norm n;
  CPM_ASSIGN_OR_RETURN(n.w, Param(wl, p + ".weight", {dim}));
  CPM_ASSIGN_OR_RETURN(n.b, Param(wl, p + ".bias", {dim}));
  return n;
}

StatusOr<SelfAttention> MiniCpmV46Vision::LoadAttention(WeightLoader& wl, const std::string& p) {
  const int64_t D = c_.hidden_size;
  SelfAttention a;
  CPM_ASSIGN_OR_RETURN(a.q, LoadLinear(wl, p + "q_proj", D, D));
  CPM_ASSIGN_OR_RETURN(a.k, LoadLinear(wl, p + "k_proj", D, D));
  CPM_ASSIGN_OR_RETURN(a.v, LoadLinear(wl, p + "v_proj", D, D));
  CPM_ASSIGN_OR_RETURN(a.out, LoadLinear(wl, p + "out_proj", D, D));
  return a;
}

Status MiniCpmV46Vision::Load(const LoadOptions& options, const MiniCpmV46VisionConfig& c,
                              int64_t text_hidden, DType dtype, ThreadPool& pool) {
  c_ = c;
  text_hidden_ = text_hidden;
  round_ = dtype == DType::kBF16 ? Round::kBf16 : Round::kNone;
  LoadOptions o = options;
  o.show_progress = false;  // the language model's loader shows the checkpoint's progress
  CPM_ASSIGN_OR_RETURN(WeightLoader wl, WeightLoader::Open(o, dtype, &pool));
  const int64_t D = c.hidden_size, I = c.intermediate_size, P = c.patch_size;
  const std::string vt = "model.vision_tower.";
  CPM_ASSIGN_OR_RETURN(patch_weight_, Param(wl, vt + "embeddings.patch_embedding.weight",
                                            {D, c.num_channels, P, P}));
  patch_embedding_ = WeightOfValues(patch_weight_, &patch_weight_bf16_, D, c.num_channels * P * P,
                                    round_ == Round::kBf16);
  CPM_ASSIGN_OR_RETURN(patch_bias_, Param(wl, vt + "embeddings.patch_embedding.bias", {D}));
  const int64_t grid = c.position_grid();
  CPM_ASSIGN_OR_RETURN(position_embedding_,
                       Param(wl, vt + "embeddings.position_embedding.weight", {grid * grid, D}));
  const int64_t num_layers = c.num_hidden_layers - (c.drop_vision_last_layer ? 1 : 0);
  for (int64_t i = 0; i < num_layers; ++i) {
    const std::string p = vt + "encoder.layers." + std::to_string(i) + ".";
    EncoderLayer L;
    CPM_ASSIGN_OR_RETURN(L.layer_norm1, LoadNorm(wl, p + "layer_norm1", D));
    CPM_ASSIGN_OR_RETURN(L.self_attn, LoadAttention(wl, p + "self_attn."));
    CPM_ASSIGN_OR_RETURN(L.layer_norm2, LoadNorm(wl, p + "layer_norm2", D));
    CPM_ASSIGN_OR_RETURN(L.fc1, LoadLinear(wl, p + "mlp.fc1", I, D));
    CPM_ASSIGN_OR_RETURN(L.fc2, LoadLinear(wl, p + "mlp.fc2", D, I));
    layers_.push_back(std::move(L));
  }
  // The config's mode needs the ViT merger; a checkpoint that has it serves both modes (vLLM's
  // downsample_mode per request).
  const std::string merger_prefix = vt + "vit_merger.";
  if (c.vit_merger || wl.Has(merger_prefix + "linear_1.weight")) {
    const std::string& p = merger_prefix;
    CPM_ASSIGN_OR_RETURN(vit_merger_.layer_norm1, LoadNorm(wl, p + "layer_norm1", D));
    CPM_ASSIGN_OR_RETURN(vit_merger_.self_attn, LoadAttention(wl, p + "self_attn."));
    CPM_ASSIGN_OR_RETURN(vit_merger_.pre_norm, LoadNorm(wl, p + "pre_norm", 4 * D));
    CPM_ASSIGN_OR_RETURN(vit_merger_.linear_1, LoadLinear(wl, p + "linear_1", 4 * I, 4 * D));
    CPM_ASSIGN_OR_RETURN(vit_merger_.linear_2, LoadLinear(wl, p + "linear_2", D, 4 * I));
    has_vit_merger_ = true;
  }
  CPM_ASSIGN_OR_RETURN(post_layernorm_, LoadNorm(wl, vt + "post_layernorm", D));
  const std::string mg = "model.merger.mlp.0.";
  CPM_ASSIGN_OR_RETURN(merger_.pre_norm, LoadNorm(wl, mg + "pre_norm", 4 * D));
  CPM_ASSIGN_OR_RETURN(merger_.linear_1, LoadLinear(wl, mg + "linear_1", 4 * D, 4 * D));
  CPM_ASSIGN_OR_RETURN(merger_.linear_2, LoadLinear(wl, mg + "linear_2", text_hidden, 4 * D));
  weight_bytes_ = wl.bytes_held();
  return OkStatus();
}

// y[m, out] = x[m, in] · Wᵀ + b, rounded once (as a bf16 nn.Linear with bias).
void MiniCpmV46Vision::Apply(const Linear& l, const float* x, int64_t m, float* y, ThreadPool& pool) const {
  kernels::MatMul(x, l.w.in_features, m, l.w, y, l.w.out_features, pool);
  kernels::AddBias(y, m, l.w.out_features, l.b.data(), round_, pool);
}

void MiniCpmV46Vision::ApplyGeluTanh(const Linear& l, const float* x, int64_t m, float* y,
                                     ThreadPool& pool) const {
  kernels::MatMul(x, l.w.in_features, m, l.w, y, l.w.out_features, pool);
  kernels::AddBiasGeluTanh(y, m, l.w.out_features, l.b.data(), round_, pool);
}

// x[rows, D] = bf(x + d) (a residual add), rows spread over the pool.
void MiniCpmV46Vision::AddResidual(float* x, const float* d, int64_t rows, ThreadPool& pool) const {
  const int64_t D = c_.hidden_size;
  ForRowRanges(pool, rows, D, [&](int64_t r0, int64_t r1) {
    kernels::AddScaled(x + r0 * D, D, d + r0 * D, D, r1 - r0, D, 1.0f, round_);
  });
}

void MiniCpmV46Vision::ApplyNorm(const Norm& n, const float* x, int64_t m, int64_t dim, float* y,
                                 ThreadPool& pool, double eps) const {
  kernels::LayerNorm(x, m, dim, n.w.data(), n.b.data(), static_cast<float>(eps < 0 ? c_.layer_norm_eps : eps),
                     y, round_, pool);
}

// x[gh·gw, D] = Conv2d(pixels; kernel = stride = P) + position_embedding[bucket_h·70 + bucket_w],
// where an axis of n patches maps patch i to bucket ⌊70·i/n⌋ (HF's nearest-position ids).
void MiniCpmV46Vision::Embed(const float* pixels, int64_t gh, int64_t gw, float* x, ThreadPool& pool) const {
  const int64_t P = c_.patch_size, C = c_.num_channels, D = c_.hidden_size, W = gw * P;
  const int64_t K = C * P * P;  // one patch, in the conv weight's (channel, ky, kx) order
  std::vector<float> patches(static_cast<size_t>(gh * gw * K));
  for (int64_t r = 0; r < gh; ++r) {
    for (int64_t col = 0; col < gw; ++col) {
      float* dst = patches.data() + (r * gw + col) * K;
      for (int64_t ch = 0; ch < C; ++ch)
        for (int64_t ky = 0; ky < P; ++ky)
          for (int64_t kx = 0; kx < P; ++kx)
            dst[(ch * P + ky) * P + kx] = pixels[((r * P + ky) * W + col * P + kx) * C + ch];
    }
  }
  kernels::RoundInPlace(patches.data(), static_cast<int64_t>(patches.size()), round_);  // bf16 pixel_values
  kernels::MatMul(patches.data(), K, gh * gw, patch_embedding_, x, D, pool);
  kernels::AddBias(x, gh * gw, D, patch_bias_.data(), round_, pool);
  const int64_t grid = c_.position_grid();
  for (int64_t r = 0; r < gh; ++r) {
    for (int64_t col = 0; col < gw; ++col) {
      const int64_t pos = (grid * r / gh) * grid + grid * col / gw;
      kernels::AddScaled(x + (r * gw + col) * D, D, position_embedding_.data() + pos * D, D, 1, D,
                         1.0f, round_);
    }
  }
}

// out[n, D] = out_proj(MHA(x)) over q/k/v projections of x [n, D]. window_cols = 0: every token
// sees every token of the slice; otherwise x is a grid of `window_cols` columns and a token sees
// the tokens of its 2×2 window only (the ViT merger's window attention).
void MiniCpmV46Vision::Attend(const SelfAttention& a, const float* x, int64_t n, int64_t window_cols,
                              float* out, ThreadPool& pool) {
  const int64_t D = c_.hidden_size;
  q_.resize(n * D), k_.resize(n * D), v_.resize(n * D), attn_.resize(n * D);
  const LinearWeight* ws[] = {&a.q.w, &a.k.w, &a.v.w};
  float* const ys[] = {q_.data(), k_.data(), v_.data()};
  const int64_t strides[] = {D, D, D};
  kernels::MatMulGroup(x, D, n, ws, ys, strides, pool);  // one pass over x for all three
  for (const auto& [l, y] : {std::pair{&a.q, q_.data()}, {&a.k, k_.data()}, {&a.v, v_.data()}})
    kernels::AddBias(y, n, D, l->b.data(), round_, pool);
  if (window_cols > 0) {
    AttendWindows(n, window_cols, pool);
    kernels::RoundInPlace(attn_.data(), n * D, round_);
  } else {
    AttendFull(n, pool);  // rounded as it is stored
  }
  Apply(a.out, attn_.data(), n, out, pool);
}

// attn_ = softmax(q kᵀ / √hd) v per head within each 2×2 window of the grid: 4×4 scores.
void MiniCpmV46Vision::AttendWindows(int64_t n, int64_t cols, ThreadPool& pool) {
  const int64_t D = c_.hidden_size, hd = c_.head_dim(), heads = c_.num_attention_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t windows_per_row = cols / 2;
  pool.ParallelForRange(n / 4, 1, [&](int64_t b, int64_t e, int) {
    for (int64_t w = b; w < e; ++w) {
      const int64_t br = w / windows_per_row, bc = w % windows_per_row;
      int64_t tok[4];  // TL, TR, BL, BR
      for (int k = 0; k < 4; ++k) tok[k] = (2 * br + k / 2) * cols + 2 * bc + k % 2;
      for (int64_t h = 0; h < heads; ++h) {
        for (int i = 0; i < 4; ++i) {
          const float* q = q_.data() + tok[i] * D + h * hd;
          float s[4];
          for (int j = 0; j < 4; ++j) {
            const float* k = k_.data() + tok[j] * D + h * hd;
            float dot = 0.0f;
            for (int64_t d = 0; d < hd; ++d) dot += q[d] * k[d];
            s[j] = dot;
          }
          const float inv = 1.0f / kernels::ExpScaled(s, 4, kernels::Max(s, 4), scale, s);
          float* o = attn_.data() + tok[i] * D + h * hd;
          for (int64_t d = 0; d < hd; ++d) {
            float acc = 0.0f;
            for (int j = 0; j < 4; ++j) acc += s[j] * v_[tok[j] * D + h * hd + d];
            o[d] = acc * inv;
          }
        }
      }
    }
  });
}

// attn_ = softmax(q kᵀ / √hd) v per head over all n tokens of the slice.
void MiniCpmV46Vision::AttendFull(int64_t n, ThreadPool& pool) {
  const int64_t D = c_.hidden_size, hd = c_.head_dim(), heads = c_.num_attention_heads;
  kernels::DenseAttention(q_.data(), k_.data(), v_.data(), D, n, heads, hd,
                          1.0f / std::sqrt(static_cast<float>(hd)), round_ == Round::kBf16,
                          attn_.data(), D, pool);
}

// Pre-LN SigLIP block: x += out_proj(MHA(LN1 x)); x += fc2(gelu_tanh(fc1(LN2 x))).
void MiniCpmV46Vision::Encoder(const EncoderLayer& L, float* x, int64_t n, ThreadPool& pool) {
  const int64_t D = c_.hidden_size, I = c_.intermediate_size;
  ln_.resize(n * D), tmp_.resize(n * D), ffn_.resize(n * I);
  ApplyNorm(L.layer_norm1, x, n, D, ln_.data(), pool);
  Attend(L.self_attn, ln_.data(), n, 0, tmp_.data(), pool);
  AddResidual(x, tmp_.data(), n, pool);
  ApplyNorm(L.layer_norm2, x, n, D, ln_.data(), pool);
  ApplyGeluTanh(L.fc1, ln_.data(), n, ffn_.data(), pool);
  Apply(L.fc2, ffn_.data(), n, tmp_.data(), pool);
  AddResidual(x, tmp_.data(), n, pool);
}

// vit_merger on the gh×gw grid x [gh·gw, D] → x [(gh/2)(gw/2), D]: window attention with a
// residual, then per window linear_2(gelu_tanh(linear_1(LN(concat of its 4 tokens)))) plus the
// mean of those tokens.
void MiniCpmV46Vision::MergeWindows(float* x, int64_t gh, int64_t gw, ThreadPool& pool) {
  const int64_t D = c_.hidden_size, I4 = 4 * c_.intermediate_size, n = gh * gw, nw = n / 4;
  const WindowMerger& m = vit_merger_;
  ln_.resize(n * D), tmp_.resize(n * D);
  ApplyNorm(m.layer_norm1, x, n, D, ln_.data(), pool);
  Attend(m.self_attn, ln_.data(), n, gw, tmp_.data(), pool);
  AddResidual(x, tmp_.data(), n, pool);
  std::vector<float> blocks(static_cast<size_t>(n * D)), mean(static_cast<size_t>(nw * D));
  GatherBlocks(x, gh, gw, D, blocks.data());
  for (int64_t w = 0; w < nw; ++w) {
    const float* b = blocks.data() + w * 4 * D;
    for (int64_t d = 0; d < D; ++d) mean[w * D + d] = (b[d] + b[D + d] + b[2 * D + d] + b[3 * D + d]) * 0.25f;
  }
  kernels::RoundInPlace(mean.data(), nw * D, round_);
  ApplyNorm(m.pre_norm, blocks.data(), nw, 4 * D, blocks.data(), pool);
  ffn_.resize(nw * I4);
  ApplyGeluTanh(m.linear_1, blocks.data(), nw, ffn_.data(), pool);
  Apply(m.linear_2, ffn_.data(), nw, x, pool);
  AddResidual(x, mean.data(), nw, pool);
}

// merger on the gh×gw grid x → out [(gh/2)(gw/2), text_hidden]:
// linear_2(gelu_erf(linear_1(LN(concat of each 2×2 block)))), no residual.
void MiniCpmV46Vision::MergeToText(const float* x, int64_t gh, int64_t gw, float* out, ThreadPool& pool) {
  const int64_t D4 = 4 * c_.hidden_size, nb = gh * gw / 4;
  std::vector<float> blocks(static_cast<size_t>(nb * D4)), hidden(static_cast<size_t>(nb * D4));
  GatherBlocks(x, gh, gw, c_.hidden_size, blocks.data());
  ApplyNorm(merger_.pre_norm, blocks.data(), nb, D4, blocks.data(), pool, kMergerNormEps);
  Apply(merger_.linear_1, blocks.data(), nb, hidden.data(), pool);
  kernels::GeluErf(hidden.data(), nb * D4, round_, pool);
  Apply(merger_.linear_2, hidden.data(), nb, out, pool);
}

// One piece per stage, in order: the patch and position embedding; each encoder layer, with
// the ViT merger as a stage of its own after layer insert_layer_id (it is the heaviest: its MLP
// is 4× wider); post_layernorm and the merger. At real size on 2 cores (Zen 5, measured) a
// full-resolution layer of a 448² slice is ~57 ms, the ViT merger ~91 ms, a later layer ~13 ms.
StatusOr<bool> MiniCpmV46Vision::EncodeSlicePiece(const float* pixels, int64_t height, int64_t width,
                                                 int64_t patches_per_token, float* out,
                                                 VisionProgress* p, ThreadPool& pool) {
  if (!Supports(patches_per_token))
    return InvalidArgument("vision: " + std::to_string(patches_per_token) +
                           " patches per token is not a mode of this checkpoint");
  const bool window_merge = patches_per_token == 16;
  const int64_t P = c_.patch_size, unit = 4 * P, layers = static_cast<int64_t>(layers_.size());
  const int64_t merge_stage = window_merge ? c_.insert_layer_id + 2 : -1;  // after that layer
  const int64_t last_stage = layers + (window_merge ? 2 : 1);
  const int64_t s = p->stage++;
  if (s == 0) {
    if (height <= 0 || width <= 0 || height % unit != 0 || width % unit != 0)
      return InvalidArgument("vision: a slice must be a positive multiple of " + std::to_string(unit) +
                             " pixels on each side, got " + std::to_string(height) + "x" + std::to_string(width));
    p->grid_h = height / P, p->grid_w = width / P;
    p->hidden.resize(static_cast<size_t>(p->grid_h * p->grid_w * c_.hidden_size));
    Embed(pixels, p->grid_h, p->grid_w, p->hidden.data(), pool);
  } else if (s == merge_stage) {
    MergeWindows(p->hidden.data(), p->grid_h, p->grid_w, pool);
    p->grid_h /= 2, p->grid_w /= 2;
  } else if (s < last_stage) {
    const int64_t layer = s - 1 - (merge_stage >= 0 && s > merge_stage ? 1 : 0);
    Encoder(layers_[layer], p->hidden.data(), p->grid_h * p->grid_w, pool);
  } else {
    const int64_t n = p->grid_h * p->grid_w;
    ApplyNorm(post_layernorm_, p->hidden.data(), n, c_.hidden_size, p->hidden.data(), pool);
    MergeToText(p->hidden.data(), p->grid_h, p->grid_w, out, pool);
    p->hidden.clear();
    p->hidden.shrink_to_fit();
    return true;
  }
  return false;
}

}  // namespace

StatusOr<std::unique_ptr<VisionEncoder>> LoadMiniCpmV46Vision(const LoadOptions& options,
                                                              const MiniCpmV46VisionConfig& config,
                                                              int64_t text_hidden, DType dtype,
                                                              ThreadPool& pool) {
  auto v = std::make_unique<MiniCpmV46Vision>();
  CPM_RETURN_IF_ERROR(v->Load(options, config, text_hidden, dtype, pool));
  return std::unique_ptr<VisionEncoder>(std::move(v));
}

}  // namespace cpm
