// AVX2 attention for one query row of a GQA group: walks the sequence's KV blocks once, and
// for each block scores every head of the group, then folds the block into a per-head online
// softmax (running max m, sum l, output o). Each K/V block is read from memory once for the
// whole group; the group's queries and outputs (8 heads × 64 dims) stay in L1.
// Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/attention_impl.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxGroup = 16;
constexpr int64_t kChunk = 16;  // keys scored before each softmax update (≤ one block)

template <bool kBf16>
inline __m256 LoadKv8(const void* base, int64_t idx) {
  if constexpr (kBf16) return avx2::LoadBf16(static_cast<const uint16_t*>(base) + idx);
  else return _mm256_loadu_ps(static_cast<const float*>(base) + idx);
}

template <bool kBf16>
void AttendRow(const float* q, int64_t n_keys, int64_t kvh, int64_t group, const KvLayerView& kv,
               const int32_t* block_table, float scale, float* out) {
  const int64_t d = kv.head_dim, nv = d / 8;
  float m[kMaxGroup], l[kMaxGroup];
  for (int64_t g = 0; g < group; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
    std::fill(out + g * d, out + (g + 1) * d, 0.0f);
  }
  alignas(32) float s[kMaxGroup][kChunk];
  for (int64_t p0 = 0, n = 0; p0 < n_keys; p0 += n) {
    // A chunk stays inside one block (any block_size works; 16 is one chunk per block).
    const int64_t block = block_table[p0 / kv.block_size];
    const int64_t in_block = p0 % kv.block_size;
    n = std::min({kChunk, n_keys - p0, kv.block_size - in_block});
    const int64_t base = block * kv.BlockStride() + kvh * kv.HeadStride() + in_block * d;
    // Scores s[g][t] = scale · q_g · k_t.
    for (int64_t t = 0; t < n; ++t) {
      const int64_t off = base + t * d;
      for (int64_t g = 0; g < group; ++g) {
        const float* qg = q + g * d;
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 2 <= nv; j += 2) {
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * j), LoadKv8<kBf16>(kv.k, off + 8 * j), a0);
          a1 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * j + 8),
                               LoadKv8<kBf16>(kv.k, off + 8 * j + 8), a1);
        }
        if (j < nv) {
          a0 = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * j), LoadKv8<kBf16>(kv.k, off + 8 * j), a0);
        }
        s[g][t] = avx2::HSum(_mm256_add_ps(a0, a1)) * scale;
      }
    }
    // Online softmax update and V accumulation, one head at a time (o_g lives in L1).
    for (int64_t g = 0; g < group; ++g) {
      float mx = m[g];
      for (int64_t t = 0; t < n; ++t) mx = std::max(mx, s[g][t]);
      const float alpha = std::exp(m[g] - mx);  // 0 on the first chunk (m = -inf)
      m[g] = mx;
      float sum = 0.0f;
      for (int64_t t = n; t < kChunk; ++t) s[g][t] = -INFINITY;
      for (int64_t t = 0; t < kChunk; t += 8) {
        __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_load_ps(&s[g][t]), _mm256_set1_ps(mx)));
        _mm256_store_ps(&s[g][t], e);
      }
      for (int64_t t = 0; t < n; ++t) sum += s[g][t];
      l[g] = l[g] * alpha + sum;
      float* og = out + g * d;
      const __m256 va = _mm256_set1_ps(alpha);
      for (int64_t j = 0; j < nv; ++j) {
        __m256 o = _mm256_mul_ps(_mm256_loadu_ps(og + 8 * j), va);
        for (int64_t t = 0; t < n; ++t) {
          o = _mm256_fmadd_ps(_mm256_set1_ps(s[g][t]), LoadKv8<kBf16>(kv.v, base + t * d + 8 * j),
                              o);
        }
        _mm256_storeu_ps(og + 8 * j, o);
      }
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    const __m256 inv = _mm256_set1_ps(1.0f / l[g]);
    float* og = out + g * d;
    for (int64_t j = 0; j < nv; ++j) {
      _mm256_storeu_ps(og + 8 * j, _mm256_mul_ps(_mm256_loadu_ps(og + 8 * j), inv));
    }
  }
}

}  // namespace

void AttendRowAvx2(const float* q, int64_t n_keys, int64_t kvh, int64_t group,
                   const KvLayerView& kv, const int32_t* block_table, float scale, float* out) {
  if (kv.dtype == DType::kBF16) {
    AttendRow<true>(q, n_keys, kvh, group, kv, block_table, scale, out);
  } else {
    AttendRow<false>(q, n_keys, kvh, group, kv, block_table, scale, out);
  }
}

}  // namespace cpm::kernels
