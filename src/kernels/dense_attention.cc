// DenseAttention: dispatch, the path through the matmul kernels, and the scalar reference.
#include "kernels/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops_avx512.h"
#include "kernels/sampling_ops.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

// A head's K [n, d] and Vᵀ [d, n] (and their bf16 copies) as the weights of scores = Q Kᵀ and
// o = P V.
struct HeadWeights {
  std::vector<float> k, vt;
  std::vector<uint16_t> k_bf16, vt_bf16;
  LinearWeight kw, vw;
};

// Per head: scores [n, n] = Q Kᵀ, the softmax pass (p, rounded to bf16 with `bf16`, each row's
// 1 / Σ p), P V, then the division (and the output's rounding). All heads' weights are made
// first, a pool task each: copied, transposed and packed head by head on the caller, they took
// ~13% of a 448² slice's encode while the other core waited.
void DenseAttentionByMatMul(const float* q, const float* k, const float* v, int64_t ld,
                            int64_t n, int64_t heads, int64_t d, float scale, bool bf16,
                            float* out, int64_t out_ld, ThreadPool& pool) {
  // The caller's scratch, kept between calls (one caller at a time).
  thread_local std::vector<float> scores_scratch, inv_scratch;
  thread_local std::vector<HeadWeights> weights_scratch;
  scores_scratch.resize(n * n), inv_scratch.resize(n), weights_scratch.resize(heads);
  // Pointers, not the names: in a pool task a thread_local name is that thread's variable.
  float* const scores = scores_scratch.data();
  float* const inv = inv_scratch.data();
  HeadWeights* const head_weights = weights_scratch.data();
  pool.ParallelFor(heads, [&](int64_t h, int) {
    HeadWeights& w = head_weights[h];
    w.k.resize(n * d), w.vt.resize(d * n);
    for (int64_t t = 0; t < n; ++t) {
      std::copy(k + t * ld + h * d, k + t * ld + (h + 1) * d, w.k.data() + t * d);
      for (int64_t c = 0; c < d; ++c) w.vt[c * n + t] = v[t * ld + h * d + c];
    }
    w.kw = WeightOfValues(w.k, &w.k_bf16, n, d, bf16);
    w.vw = WeightOfValues(w.vt, &w.vt_bf16, d, n, bf16);
  });
  for (int64_t h = 0; h < heads; ++h) {
    MatMul(q + h * d, ld, n, head_weights[h].kw, scores, n, pool);
    pool.ParallelForRange(n, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        float* row = scores + t * n;
        inv[t] = 1.0f / ExpScaled(row, n, Max(row, n), scale, row);
        if (bf16) {
          for (int64_t j = 0; j < n; ++j) row[j] = RoundBf16(row[j]);
        }
      }
    });
    float* oh = out + h * d;
    MatMul(scores, n, n, head_weights[h].vw, oh, out_ld, pool);
    pool.ParallelForRange(n, 1, [&](int64_t b, int64_t e, int) {
      for (int64_t t = b; t < e; ++t) {
        for (int64_t c = 0; c < d; ++c) {
          const float o = oh[t * out_ld + c] * inv[t];
          oh[t * out_ld + c] = bf16 ? RoundBf16(o) : o;
        }
      }
    });
  }
}

}  // namespace

void DenseAttention(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                    int64_t heads, int64_t d, float scale, bool bf16, float* out, int64_t out_ld,
                    ThreadPool& pool) {
  CPM_CHECK(d % 2 == 0 && n >= 1);
  if (bf16 && ActiveIsa() == Isa::kAvx512 && GetCpuFeatures().avx512bf16) {
    return DenseAttentionBf16Avx512(q, k, v, ld, n, heads, d, scale, out, out_ld, pool);
  }
  DenseAttentionByMatMul(q, k, v, ld, n, heads, d, scale, bf16, out, out_ld, pool);
}

void DenseAttentionReference(const float* q, const float* k, const float* v, int64_t ld,
                             int64_t n, int64_t heads, int64_t d, float scale, bool bf16,
                             float* out, int64_t out_ld) {
  std::vector<float> s(n);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t t = 0; t < n; ++t) {
      const float* qt = q + t * ld + h * d;
      for (int64_t j = 0; j < n; ++j) {
        const float* kj = k + j * ld + h * d;
        float dot = 0.0f;
        for (int64_t c = 0; c < d; ++c) dot += qt[c] * kj[c];
        s[j] = dot;
      }
      const float m = *std::max_element(s.begin(), s.end());
      float sum = 0.0f;
      for (int64_t j = 0; j < n; ++j) {
        const float p = std::exp((s[j] - m) * scale);
        sum += p;
        s[j] = bf16 ? RoundBf16(p) : p;
      }
      const float inv = 1.0f / sum;
      float* o = out + t * out_ld + h * d;
      for (int64_t c = 0; c < d; ++c) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n; ++j) acc += s[j] * v[j * ld + h * d + c];
        o[c] = bf16 ? RoundBf16(acc * inv) : acc * inv;
      }
    }
  }
}

}  // namespace cpm::kernels
