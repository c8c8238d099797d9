// Residual updates, scaling and bf16 rounding: dispatch plus scalar references.
#include "kernels/residual.h"

#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

namespace {

inline float DeltaAt(const float* d, int64_t j) { return d[j]; }
inline float DeltaAt(const uint16_t* d, int64_t j) { return Bf16ToF32(d[j]); }

// The scalar reference, on f32 or bf16 deltas.
template <typename D>
void AddScaledRef(float* h, int64_t h_stride, const D* d, int64_t d_stride, int64_t rows,
                  int64_t dim, float scale, Round round) {
  const bool rb = round == Round::kBf16;
  for (int64_t r = 0; r < rows; ++r) {
    float* hr = h + r * h_stride;
    const D* dr = d + r * d_stride;
    for (int64_t j = 0; j < dim; ++j) {
      float s = DeltaAt(dr, j) * scale;
      if (rb) s = RoundBf16(s);
      float v = hr[j] + s;
      hr[j] = rb ? RoundBf16(v) : v;
    }
  }
}

}  // namespace

void AddScaled(float* h, int64_t h_stride, const float* d, int64_t d_stride, int64_t rows,
               int64_t dim, float scale, Round round) {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return AddScaledAvx512(h, h_stride, d, d_stride, rows, dim, scale, round);
    case Isa::kAvx2: return AddScaledAvx2(h, h_stride, d, d_stride, rows, dim, scale, round);
    default: break;
  }
  AddScaledRef(h, h_stride, d, d_stride, rows, dim, scale, round);
}

void AddScaled(float* h, int64_t h_stride, const uint16_t* d, int64_t d_stride, int64_t rows,
               int64_t dim, float scale, Round round) {
  // bf16 deltas come from AMX machines, which have AVX-512; below it, the reference.
  if (ActiveIsa() == Isa::kAvx512) {
    return AddScaledAvx512(h, h_stride, d, d_stride, rows, dim, scale, round);
  }
  AddScaledRef(h, h_stride, d, d_stride, rows, dim, scale, round);
}

void Scale(float* x, int64_t n, float scale, Round round) {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return ScaleAvx512(x, n, scale, round);
    case Isa::kAvx2: return ScaleAvx2(x, n, scale, round);
    default: break;
  }
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i] * scale;
    x[i] = round == Round::kBf16 ? RoundBf16(v) : v;
  }
}

void RoundBf16InPlace(float* x, int64_t n) {
  switch (ActiveIsa()) {
    case Isa::kAvx512: return RoundBf16InPlaceAvx512(x, n);
    case Isa::kAvx2: return RoundBf16InPlaceAvx2(x, n);
    default: break;
  }
  for (int64_t i = 0; i < n; ++i) x[i] = RoundBf16(x[i]);
}

}  // namespace cpm::kernels
