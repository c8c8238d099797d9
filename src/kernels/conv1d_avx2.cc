// AVX2 causal depthwise conv1d + SiLU (Gated DeltaNet's short convolution): 8 channels per
// vector, the kernel-1 history rows of the window kept in registers and slid one row per token,
// taps summed with FMAs in tap order, SiLU through the vector exp. A partial last group of
// channels uses masked loads and stores, so every channel gets the same lane arithmetic wherever
// its group starts: a channel's result does not depend on how the channels are split.
// Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <algorithm>

#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {
namespace {

// Channels [c0, c0 + n) (n ≤ 8) over all t rows, kernel K.
template <int K>
void Group(const float* x, int64_t x_stride, int64_t t, int64_t channels, int64_t c0, int64_t n,
           const float* w, float* state, float* y, int64_t y_stride, bool round_bf16) {
  constexpr int kHist = K - 1;
  const __m256i mask = avx2::FirstLanes(n);
  // wt[j] = taps j of the group's channels (w is [channels, K]); zeros in unused lanes.
  __m256 wt[K];
  for (int j = 0; j < K; ++j) {
    alignas(32) float tap[8] = {};
    for (int64_t l = 0; l < n; ++l) tap[l] = w[(c0 + l) * K + j];
    wt[j] = _mm256_load_ps(tap);
  }
  // win[r] = row r of the window's history (the state's rows at first).
  __m256 win[kHist > 0 ? kHist : 1];
#pragma GCC unroll 8
  for (int r = 0; r < kHist; ++r) win[r] = _mm256_maskload_ps(state + r * channels + c0, mask);
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < t; ++i) {
    const __m256 cur = _mm256_maskload_ps(x + i * x_stride + c0, mask);
    __m256 acc = _mm256_setzero_ps();
#pragma GCC unroll 8
    for (int j = 0; j < kHist; ++j) acc = _mm256_fmadd_ps(wt[j], win[j], acc);
    acc = _mm256_fmadd_ps(wt[kHist], cur, acc);
    // silu(a) = a / (1 + e^-a)
    __m256 s = _mm256_div_ps(acc, _mm256_add_ps(one, avx2::Exp(_mm256_sub_ps(_mm256_setzero_ps(), acc))));
    if (round_bf16) s = avx2::RoundBf16(s);
    _mm256_maskstore_ps(y + i * y_stride + c0, mask, s);
#pragma GCC unroll 8
    for (int r = 0; r + 1 < kHist; ++r) win[r] = win[r + 1];
    if constexpr (kHist > 0) win[kHist - 1] = cur;
  }
  // The new state: the window's history after the last row.
#pragma GCC unroll 8
  for (int r = 0; r < kHist; ++r) _mm256_maskstore_ps(state + r * channels + c0, mask, win[r]);
}

template <int K>
void Channels(const float* x, int64_t x_stride, int64_t t, int64_t channels, int64_t c_begin,
              int64_t c_end, const float* w, float* state, float* y, int64_t y_stride,
              bool round_bf16) {
  for (int64_t c0 = c_begin; c0 < c_end; c0 += 8) {
    Group<K>(x, x_stride, t, channels, c0, std::min<int64_t>(8, c_end - c0), w, state, y,
             y_stride, round_bf16);
  }
}

}  // namespace

bool CausalConv1dSiluAvx2(const float* x, int64_t x_stride, int64_t t, int64_t channels,
                          int64_t c_begin, int64_t c_end, const float* w, int64_t kernel,
                          float* state, float* y, int64_t y_stride, Round round) {
  const bool rb = round == Round::kBf16;
  switch (kernel) {
    case 2: Channels<2>(x, x_stride, t, channels, c_begin, c_end, w, state, y, y_stride, rb); break;
    case 3: Channels<3>(x, x_stride, t, channels, c_begin, c_end, w, state, y, y_stride, rb); break;
    case 4: Channels<4>(x, x_stride, t, channels, c_begin, c_end, w, state, y, y_stride, rb); break;
    case 5: Channels<5>(x, x_stride, t, channels, c_begin, c_end, w, state, y, y_stride, rb); break;
    case 6: Channels<6>(x, x_stride, t, channels, c_begin, c_end, w, state, y, y_stride, rb); break;
    default: return false;
  }
  return true;
}

}  // namespace cpm::kernels
