// AVX2 pieces of the vocabulary-wide sampling ops: max, Σ exp, shift, a threshold scan that lets
// top-k skip the (vast) majority of logits that cannot enter the current top k, a count at or
// above a threshold (a token's rank), and top-p's histogram slices and the search for a slice's
// tokens.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "kernels/ops_avx2.h"
#include "kernels/sampling_ops.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {

float MaxAvx2(const float* x, int64_t n) {
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    // maxps returns its second operand where either is NaN: the running max, so NaNs are ignored.
    m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
    m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
  }
  float m = avx2::HMax(_mm256_max_ps(m0, m1));
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

float MinFiniteAvx2(const float* x, int64_t n) {
  const __m256 inf = _mm256_set1_ps(INFINITY), zero = _mm256_setzero_ps();
  // v − v is 0 for a finite v, NaN for an infinity or a NaN: those become +inf.
  const auto finite_or_inf = [&](__m256 v) {
    return _mm256_blendv_ps(inf, v, _mm256_cmp_ps(_mm256_sub_ps(v, v), zero, _CMP_EQ_OQ));
  };
  __m256 m0 = inf, m1 = inf;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    m0 = _mm256_min_ps(m0, finite_or_inf(_mm256_loadu_ps(x + i)));
    m1 = _mm256_min_ps(m1, finite_or_inf(_mm256_loadu_ps(x + i + 8)));
  }
  float m = -avx2::HMax(_mm256_sub_ps(zero, _mm256_min_ps(m0, m1)));
  for (; i < n; ++i) m = std::isfinite(x[i]) && x[i] < m ? x[i] : m;
  return m;
}

double SumExpAvx2(const float* x, int64_t n, float shift) {
  // The exps in f32 (relative error ~1e-7 each), their sum in f64 lanes: over a vocabulary of
  // 73k entries f32 lanes lost ~1e-5 of it, which a log-prob would carry.
  const __m256 vs = _mm256_set1_ps(shift);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = avx2::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, _mm256_add_pd(s0, s1));
  double s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) s += std::exp(x[i] - shift);
  return s;
}

float ExpScaledAvx2(const float* x, int64_t n, float shift, float scale, float* out) {
  const __m256 vs = _mm256_set1_ps(shift), vc = _mm256_set1_ps(scale);
  __m256 s0 = _mm256_setzero_ps(), s1 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 e0 = avx2::Exp(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vs), vc));
    const __m256 e1 = avx2::Exp(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vs), vc));
    _mm256_storeu_ps(out + i, e0);
    _mm256_storeu_ps(out + i + 8, e1);
    s0 = _mm256_add_ps(s0, e0);
    s1 = _mm256_add_ps(s1, e1);
  }
  float s = avx2::HSum(_mm256_add_ps(s0, s1));
  for (; i < n; ++i) s += out[i] = std::exp((x[i] - shift) * scale);
  return s;
}

void SubAvx2(const float* x, int64_t n, float shift, float* out) {
  const __m256 vs = _mm256_set1_ps(shift);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, _mm256_sub_ps(_mm256_loadu_ps(x + i), vs));
  for (; i < n; ++i) out[i] = x[i] - shift;
}

int64_t FindGreaterAvx2(const float* x, int64_t begin, int64_t n, float threshold) {
  const __m256 t = _mm256_set1_ps(threshold);
  int64_t i = begin;
  for (; i + 16 <= n; i += 16) {
    const __m256 a = _mm256_cmp_ps(_mm256_loadu_ps(x + i), t, _CMP_GT_OQ);
    const __m256 b = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), t, _CMP_GT_OQ);
    const int mask = _mm256_movemask_ps(a) | (_mm256_movemask_ps(b) << 8);
    if (mask) return i + __builtin_ctz(static_cast<unsigned>(mask));
  }
  for (; i < n; ++i) {
    if (x[i] > threshold) return i;
  }
  return n;
}

int64_t CountAtLeastAvx2(const float* x, int64_t n, float threshold) {
  const __m256 t = _mm256_set1_ps(threshold);
  int64_t count = 0, i = 0;
  for (; i + 16 <= n; i += 16) {
    // _CMP_GE_OQ is false for a NaN, as the scalar x >= threshold.
    const __m256 a = _mm256_cmp_ps(_mm256_loadu_ps(x + i), t, _CMP_GE_OQ);
    const __m256 b = _mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), t, _CMP_GE_OQ);
    count += __builtin_popcount(static_cast<unsigned>(_mm256_movemask_ps(a)) |
                                (static_cast<unsigned>(_mm256_movemask_ps(b)) << 8));
  }
  for (; i < n; ++i) count += x[i] >= threshold;
  return count;
}

void MassSlicesAvx2(const float* x, int64_t n, float lo, float scale, int count, int16_t* out) {
  const __m256 vlo = _mm256_set1_ps(lo), vscale = _mm256_set1_ps(scale), zero = _mm256_setzero_ps();
  const __m256 top = _mm256_set1_ps(static_cast<float>(count - 1));
  const __m256 neg_inf = _mm256_set1_ps(-INFINITY), pos_inf = _mm256_set1_ps(INFINITY);
  const __m256i nan_slice = _mm256_set1_epi32(kNanSlice), neg_inf_slice = _mm256_set1_epi32(-1);
  const __m256i pos_inf_slice = _mm256_set1_epi32(count);
  const auto slices8 = [&](__m256 v) {
    // maxps returns its second operand for a NaN: a NaN product (0 · inf) becomes 0.
    const __m256 f = _mm256_min_ps(
        _mm256_max_ps(_mm256_mul_ps(_mm256_sub_ps(v, vlo), vscale), zero), top);
    __m256i s = _mm256_cvttps_epi32(f);
    const auto where = [](__m256 m) { return _mm256_castps_si256(m); };
    s = _mm256_blendv_epi8(s, neg_inf_slice, where(_mm256_cmp_ps(v, neg_inf, _CMP_EQ_OQ)));
    s = _mm256_blendv_epi8(s, pos_inf_slice, where(_mm256_cmp_ps(v, pos_inf, _CMP_EQ_OQ)));
    return _mm256_blendv_epi8(s, nan_slice, where(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
  };
  const auto store16 = [](int16_t* o, __m256i a, __m256i b) {
    // packs works within 128-bit lanes (a0-3 b0-3 a4-7 b4-7); the permute puts them in order.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o),
                        _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8));
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    store16(out + i, slices8(_mm256_loadu_ps(x + i)), slices8(_mm256_loadu_ps(x + i + 8)));
  }
  if (i < n) {  // the tail through a zero-padded copy: the same arithmetic (memcpy: no
    // template instantiated with AVX2 flags that scalar code could be linked to)
    alignas(32) float in[16] = {};
    alignas(32) int16_t o[16];
    std::memcpy(in, x + i, static_cast<size_t>(n - i) * sizeof(float));
    store16(o, slices8(_mm256_load_ps(in)), slices8(_mm256_load_ps(in + 8)));
    std::memcpy(out + i, o, static_cast<size_t>(n - i) * sizeof(int16_t));
  }
}

int64_t FindEqualAvx2(const int16_t* x, int64_t begin, int64_t n, int16_t v) {
  const __m256i vv = _mm256_set1_epi16(v);
  int64_t i = begin;
  for (; i + 16 <= n; i += 16) {
    const __m256i eq = _mm256_cmpeq_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i)), vv);
    const unsigned mask = static_cast<unsigned>(_mm256_movemask_epi8(eq));
    if (mask) return i + __builtin_ctz(mask) / 2;
  }
  for (; i < n; ++i) {
    if (x[i] == v) return i;
  }
  return n;
}

}  // namespace cpm::kernels
