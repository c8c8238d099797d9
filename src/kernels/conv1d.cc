// Causal depthwise conv1d + SiLU with state continuation: dispatch plus the scalar reference.
#include "kernels/conv1d.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/cpu_features.h"
#include "kernels/ops_avx2.h"
#include "kernels/ops_avx512.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

void CausalConv1dSilu(const float* x, int64_t x_stride, int64_t t, int64_t channels,
                      int64_t c_begin, int64_t c_end, const float* w, int64_t kernel,
                      float* state, float* y, int64_t y_stride, Round round) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
      if (CausalConv1dSiluAvx512(x, x_stride, t, channels, c_begin, c_end, w, kernel, state, y,
                                 y_stride, round)) {
        return;
      }
      break;
    case Isa::kAvx2:
      if (CausalConv1dSiluAvx2(x, x_stride, t, channels, c_begin, c_end, w, kernel, state, y,
                               y_stride, round)) {
        return;
      }
      break;
    default: break;
  }
  const int64_t hist = kernel - 1;  // rows of state
  const bool rb = round == Round::kBf16;
  // Row r of xx = state ++ x, for r in [0, hist + t).
  auto xx = [&](int64_t r, int64_t c) {
    return r < hist ? state[r * channels + c] : x[(r - hist) * x_stride + c];
  };
  for (int64_t i = 0; i < t; ++i) {
    float* yi = y + i * y_stride;
    for (int64_t c = c_begin; c < c_end; ++c) {
      float acc = 0.0f;
      const float* wc = w + (c / kConvGroup) * kernel * kConvGroup + c % kConvGroup;
      for (int64_t j = 0; j < kernel; ++j) acc += wc[j * kConvGroup] * xx(i + j, c);
      if (rb) acc = RoundBf16(acc);  // torch's conv1d on bf16 tensors, then SiLU
      const float s = acc / (1.0f + std::exp(-acc));
      yi[c] = rb ? RoundBf16(s) : s;
    }
  }
  // New state: the last `hist` rows of xx. Rows come from the old state (when t < hist) or x;
  // walking upwards never overwrites a state row that is still to be read.
  for (int64_t r = 0; r < hist; ++r) {
    const int64_t src = t + r;  // row of xx that becomes state row r
    for (int64_t c = c_begin; c < c_end; ++c) state[r * channels + c] = xx(src, c);
  }
}

std::vector<float> PackConvTaps(std::span<const float> w, int64_t channels, int64_t kernel) {
  CPM_CHECK(static_cast<int64_t>(w.size()) == channels * kernel);
  const int64_t groups = (channels + kConvGroup - 1) / kConvGroup;
  std::vector<float> packed(groups * kernel * kConvGroup, 0.0f);
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t j = 0; j < kernel; ++j) {
      packed[((c / kConvGroup) * kernel + j) * kConvGroup + c % kConvGroup] = w[c * kernel + j];
    }
  }
  return packed;
}

}  // namespace cpm::kernels
