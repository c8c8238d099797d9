// Scalar element-wise ops of the vision tower (see vision_ops.h).
#include "kernels/vision_ops.h"

#include <cmath>

#include <algorithm>

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/residual.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per task: small ops stay on one thread

inline float Rounded(float v, Round round) { return round == Round::kBf16 ? RoundBf16(v) : v; }

template <typename F>
void Map(float* x, int64_t n, Round round, ThreadPool& pool, F f) {
  pool.ParallelForRange(n, kGrain, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) x[i] = Rounded(f(x[i]), round);
  });
}

}  // namespace

void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
               float* out, Round round, ThreadPool& pool) {
  pool.ParallelForRange(rows, 1, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* o = out + r * dim;
      double sum = 0.0;
      for (int64_t j = 0; j < dim; ++j) sum += xr[j];
      const double mean = sum / static_cast<double>(dim);
      double sq = 0.0;
      for (int64_t j = 0; j < dim; ++j) sq += (xr[j] - mean) * (xr[j] - mean);
      const float inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(dim) + eps));
      const float m = static_cast<float>(mean);
      for (int64_t j = 0; j < dim; ++j) o[j] = (xr[j] - m) * inv * w[j] + b[j];
      RoundInPlace(o, dim, round);
    }
  });
}

void AddBias(float* y, int64_t rows, int64_t dim, const float* bias, Round round, ThreadPool& pool) {
  pool.ParallelForRange(rows, std::max<int64_t>(1, kGrain / dim), [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      float* yr = y + r * dim;
      for (int64_t j = 0; j < dim; ++j) yr[j] += bias[j];
      RoundInPlace(yr, dim, round);
    }
  });
}

void GeluTanh(float* x, int64_t n, Round round, ThreadPool& pool) {
  if (ActiveIsa() >= Isa::kAvx2) {
    pool.ParallelForRange(n, kGrain, [&](int64_t b, int64_t e, int) { GeluTanhAvx2(x + b, e - b, round); });
    return;
  }
  GeluTanhRef(x, n, round);
}

void GeluTanhRef(float* x, int64_t n, Round round) {
  const float k = std::sqrt(2.0f / static_cast<float>(M_PI));
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    x[i] = Rounded(0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v))), round);
  }
}

void GeluErf(float* x, int64_t n, Round round, ThreadPool& pool) {
  Map(x, n, round, pool, [](float v) { return 0.5f * v * (1.0f + std::erf(v * static_cast<float>(M_SQRT1_2))); });
}

}  // namespace cpm::kernels
