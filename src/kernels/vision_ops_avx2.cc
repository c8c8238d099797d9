// AVX2 element-wise ops of the vision tower.
// The tanh-GELU: 0.5·x·(1 + tanh(z)) = x · sigmoid(2z) = x / (1 + e^(−2z)), z = √(2/π)(x +
// 0.044715x³), with the polynomial e^x (≤ 2 ulp from expf). Large |x| saturate correctly:
// e^(−2z) → 0 gives x, → the clamp (~1e38) gives −0.
// LayerNorm's rows: mean and variance summed in f64 as the scalar form, over 16 lanes in four
// chains (the scalar form's one chain of f64 adds took ~2.3% of a 448² slice's encode samples,
// this one 0.8%), the output as the scalar form's f32 arithmetic, rounded as it is stored. A
// linear layer's bias add rounded as it is stored too (one pass where the scalar form takes
// two).
#include <immintrin.h>

#include <cmath>

#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

void GeluTanhAvx2(float* x, int64_t n, Round round) {
  const bool rb = round == Round::kBf16;
  const __m256 one = _mm256_set1_ps(1.0f), c = _mm256_set1_ps(0.044715f);
  const __m256 minus_two_k = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(c, v), _mm256_mul_ps(v, v), v);  // x + cx³
    __m256 g = _mm256_div_ps(v, _mm256_add_ps(one, avx2::Exp(_mm256_mul_ps(minus_two_k, inner))));
    if (rb) g = avx2::RoundBf16(g);
    _mm256_storeu_ps(x + i, g);
  }
  for (; i < n; ++i) {
    const float v = x[i];
    const float g = v / (1.0f + std::exp(-2.0f * 0.7978845608028654f * (v + 0.044715f * v * v * v)));
    x[i] = rb ? RoundBf16(g) : g;
  }
}

namespace {

// Σ of the 4 f64 lanes of a + b + c + d.
double HSum(__m256d a, __m256d b, __m256d c, __m256d d) {
  const __m256d s = _mm256_add_pd(_mm256_add_pd(a, b), _mm256_add_pd(c, d));
  const __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

// Σ_j f(x[j]) in f64 over 16 floats at a time in four chains of 4 lanes, then the tail.
template <typename F>
double SumF64(const float* x, int64_t dim, F f) {
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int64_t j = 0;
  for (; j + 16 <= dim; j += 16) {
    for (int q = 0; q < 4; ++q) {
      acc[q] = _mm256_add_pd(acc[q], f(_mm256_cvtps_pd(_mm_loadu_ps(x + j + 4 * q))));
    }
  }
  double tail = 0.0;
  for (; j < dim; ++j) tail += f(_mm256_set1_pd(x[j]))[0];
  return HSum(acc[0], acc[1], acc[2], acc[3]) + tail;
}

}  // namespace

void LayerNormRowAvx2(const float* x, int64_t dim, const float* w, const float* b, float eps,
                      bool round, float* out) {
  const double mean = SumF64(x, dim, [](__m256d v) { return v; }) / static_cast<double>(dim);
  const __m256d vm = _mm256_set1_pd(mean);
  const double sq = SumF64(x, dim, [&](__m256d v) {
    const __m256d d = _mm256_sub_pd(v, vm);
    return _mm256_mul_pd(d, d);
  });
  const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(dim) + eps));
  const float m = static_cast<float>(mean);
  const __m256 vmf = _mm256_set1_ps(m), vinv = _mm256_set1_ps(inv);
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    const __m256 n = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), vmf), vinv);
    const __m256 o =
        _mm256_add_ps(_mm256_mul_ps(n, _mm256_loadu_ps(w + j)), _mm256_loadu_ps(b + j));
    _mm256_storeu_ps(out + j, round ? avx2::RoundBf16(o) : o);
  }
  for (; j < dim; ++j) {
    const float o = (x[j] - m) * inv * w[j] + b[j];
    out[j] = round ? RoundBf16(o) : o;
  }
}

void AddBiasRowAvx2(float* y, int64_t dim, const float* bias, bool round) {
  int64_t j = 0;
  for (; j + 8 <= dim; j += 8) {
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(y + j), _mm256_loadu_ps(bias + j));
    _mm256_storeu_ps(y + j, round ? avx2::RoundBf16(v) : v);
  }
  for (; j < dim; ++j) y[j] = round ? RoundBf16(y[j] + bias[j]) : y[j] + bias[j];
}

}  // namespace cpm::kernels
