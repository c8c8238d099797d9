// Element-wise ops of the vision tower (see vision_ops.h): dispatch and the scalar forms.
#include "kernels/vision_ops.h"

#include <cmath>

#include <algorithm>

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "kernels/residual.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kGrain = 1 << 14;  // elements per task: small ops stay on one thread

inline float Rounded(float v, Round round) { return round == Round::kBf16 ? RoundBf16(v) : v; }

// Rows [r0, r1) of y += bias, then the optional rounding (AddBias's work, on the caller).
void AddBiasRows(float* y, int64_t r0, int64_t r1, int64_t dim, const float* bias, Round round) {
  const bool simd = ActiveIsa() >= Isa::kAvx2;
  for (int64_t r = r0; r < r1; ++r) {
    float* yr = y + r * dim;
    if (simd) {
      AddBiasRowAvx2(yr, dim, bias, round == Round::kBf16);
      continue;
    }
    for (int64_t j = 0; j < dim; ++j) yr[j] += bias[j];
    RoundInPlace(yr, dim, round);
  }
}

template <typename F>
void Map(float* x, int64_t n, Round round, ThreadPool& pool, F f) {
  pool.ParallelForRange(n, kGrain, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) x[i] = Rounded(f(x[i]), round);
  });
}

}  // namespace

void LayerNorm(const float* x, int64_t rows, int64_t dim, const float* w, const float* b, float eps,
               float* out, Round round, ThreadPool& pool) {
  const bool simd = ActiveIsa() >= Isa::kAvx2;
  pool.ParallelForRange(rows, 1, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* o = out + r * dim;
      if (simd) {
        LayerNormRowAvx2(xr, dim, w, b, eps, round == Round::kBf16, o);
        continue;
      }
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
    AddBiasRows(y, r0, r1, dim, bias, round);
  });
}

namespace {

// GeluTanhAvx512 or GeluTanhAvx2 (bitwise alike) at the active ISA, else the scalar form.
void GeluTanhBlock(float* x, int64_t n, Round round) {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return GeluTanhAvx512(x, n, round);
    case Isa::kAvx2: return GeluTanhAvx2(x, n, round);
    default: return GeluTanhRef(x, n, round);
  }
}

}  // namespace

void GeluTanh(float* x, int64_t n, Round round, ThreadPool& pool) {
  pool.ParallelForRange(n, kGrain, [&](int64_t b, int64_t e, int) {
    GeluTanhBlock(x + b, e - b, round);
  });
}

void AddBiasGeluTanh(float* y, int64_t rows, int64_t dim, const float* bias, Round round,
                     ThreadPool& pool) {
  const bool simd = ActiveIsa() >= Isa::kAvx2;
  // GeluTanhAvx2 (and so GeluTanhAvx512) ends an array with scalar code past its last whole
  // vector of 8: the blocks handed to it must start on such boundaries for a result not to move
  // (the models' widths do).
  if (simd && dim % 8 != 0) {
    AddBias(y, rows, dim, bias, round, pool);
    return GeluTanh(y, rows * dim, round, pool);
  }
  constexpr int64_t kRowsPerBlock = 4;  // a block's f32 rows in L2 between the two steps
  pool.ParallelForRange(rows, kRowsPerBlock, [&](int64_t r0, int64_t r1, int) {
    for (int64_t b0 = r0; b0 < r1; b0 += kRowsPerBlock) {
      const int64_t b1 = std::min(r1, b0 + kRowsPerBlock);
      AddBiasRows(y, b0, b1, dim, bias, round);
      GeluTanhBlock(y + b0 * dim, (b1 - b0) * dim, round);
    }
  });
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
