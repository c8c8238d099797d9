// DenseAttention: dispatch and the scalar reference.
#include "kernels/dense_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul_impl.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

void DenseAttention(const float* q, const float* k, const float* v, int64_t ld, int64_t n,
                    int64_t heads, int64_t d, float scale, bool bf16, float* out, int64_t out_ld,
                    ThreadPool& pool) {
  CPM_CHECK(d % 2 == 0 && n >= 1);
  const Isa isa = ActiveIsa();
  if (bf16 && isa == Isa::kAvx512 && GetCpuFeatures().avx512bf16) {
    if (AmxChoice().on) {
      return DenseAttentionBf16Amx(q, k, v, ld, n, heads, d, scale, out, out_ld, pool);
    }
    return DenseAttentionBf16Avx512(q, k, v, ld, n, heads, d, scale, out, out_ld, pool);
  }
  if (isa >= Isa::kAvx2) {
    return DenseAttentionAvx2(q, k, v, ld, n, heads, d, scale, bf16, out, out_ld, pool);
  }
  DenseAttentionReference(q, k, v, ld, n, heads, d, scale, bf16, out, out_ld);
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
