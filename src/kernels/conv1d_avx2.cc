// AVX2 causal depthwise conv1d + SiLU (Gated DeltaNet's short convolution): 8 channels per
// vector, token by token across the channel range, each of a token's window rows read where it
// lies (in x or in the state), taps summed with FMAs in tap order, SiLU through the vector exp.
// A group of 8 that the range only partly covers (its first or last) uses masked loads and
// stores, so every channel gets the same lane arithmetic wherever the range starts: a channel's
// result does not depend on how the channels are split.
// Compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include "kernels/conv1d.h"
#include "kernels/ops_avx2.h"
#include "kernels/simd_avx2.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kLanes = 8;

// 8 channels' floats at p: all 8 (kFull) or the lanes of `mask`, the rest read as 0 and never
// written. A masked store is microcoded on AMD (~10× a plain one): only a partial group uses it.
template <bool kFull>
inline __m256 Load8(const float* p, __m256i mask) {
  if constexpr (kFull) return _mm256_loadu_ps(p);
  return _mm256_maskload_ps(p, mask);
}
template <bool kFull>
inline void Store8(float* p, __m256i mask, __m256 v) {
  if constexpr (kFull) _mm256_storeu_ps(p, v);
  else _mm256_maskstore_ps(p, mask, v);
}

// y[c0 .. c0+8) of one token: silu(Σ_j w[j] · rows[j]) with rows[K-1] the token's own row.
template <int K, bool kFull>
inline void Output8(const float* const* rows, const float* w, int64_t c0, __m256i mask,
                    bool round_bf16, float* y) {
  // The 8 channels' taps: a half of their PackConvTaps group's.
  const float* wg = w + c0 / kConvGroup * K * kConvGroup + c0 % kConvGroup;
  __m256 acc = _mm256_setzero_ps();
#pragma GCC unroll 8
  for (int j = 0; j < K; ++j) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(wg + j * kConvGroup), Load8<kFull>(rows[j] + c0, mask),
                          acc);
  }
  if (round_bf16) acc = avx2::RoundBf16(acc);  // torch's conv1d on bf16 tensors, then SiLU
  __m256 s = avx2::DivOnePlusExpNeg(acc, acc);  // silu(a) = a / (1 + e^-a)
  if (round_bf16) s = avx2::RoundBf16(s);
  Store8<kFull>(y + c0, mask, s);
}

// Copies row `from` to row `to` for channels [c_begin, c_end).
inline void CopyChannels(const float* from, float* to, int64_t c_begin, int64_t c_end) {
  int64_t c = c_begin;
  for (; c + 8 <= c_end; c += 8) _mm256_storeu_ps(to + c, _mm256_loadu_ps(from + c));
  if (c < c_end) {
    const __m256i mask = avx2::FirstLanes(c_end - c);
    _mm256_maskstore_ps(to + c, mask, _mm256_maskload_ps(from + c, mask));
  }
}

template <int K>
void Channels(const float* x, int64_t x_stride, int64_t t, int64_t channels, int64_t c_begin,
              int64_t c_end, const float* w, float* state, float* y, int64_t y_stride,
              bool round_bf16) {
  constexpr int64_t kHist = K - 1;  // rows of state
  // Row r of xx = state ++ x.
  auto xx = [&](int64_t r) {
    return r < kHist ? state + r * channels : x + (r - kHist) * x_stride;
  };
  // Groups of 8 at multiples of 8 (as PackConvTaps groups the taps); the first and last may be
  // partial when the range starts or ends inside one.
  auto lanes = [&](int64_t c0) {
    return _mm256_andnot_si256(avx2::FirstLanes(c_begin - c0), avx2::FirstLanes(c_end - c0));
  };
  const int64_t first = c_begin / kLanes * kLanes;
  const __m256i all = _mm256_set1_epi32(-1);
  for (int64_t i = 0; i < t; ++i) {
    const float* rows[K];
    for (int j = 0; j < K; ++j) rows[j] = xx(i + j);
    float* yi = y + i * y_stride;
    for (int64_t c0 = first; c0 < c_end; c0 += kLanes) {
      if (c0 >= c_begin && c0 + kLanes <= c_end) {
        Output8<K, true>(rows, w, c0, all, round_bf16, yi);
      } else {
        Output8<K, false>(rows, w, c0, lanes(c0), round_bf16, yi);
      }
    }
  }
  // The new state: the last kHist rows of xx. Upwards, a state row still to be read (t < kHist)
  // lies above the one being written.
  for (int64_t r = 0; r < kHist; ++r) {
    CopyChannels(xx(t + r), state + r * channels, c_begin, c_end);
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
