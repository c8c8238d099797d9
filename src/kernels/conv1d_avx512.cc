// AVX-512 causal depthwise conv1d + SiLU (Gated DeltaNet's short convolution): conv1d_avx2.cc's
// walk, token by token, on 16 channels per vector (a group's taps one zmm, PackConvTaps), in
// blocks of channels whose window of K rows stays in L1 while the block's tokens pass. Each
// lane's arithmetic is the AVX2 form's (taps in order with FMAs from zero, the shared exp
// polynomial, a divide, one rounding), so the two agree to the bit (hybrid_kernels_test), and a
// channel's result does not depend on how the channels are split. MiniCPM-V-4.6, Zen 5: against
// the AVX2 form, pp512 +0.8-1.6% and batch-16 decode 0-3.5% (2 interleaved rounds); a walk of
// one channel group over all tokens with the window in registers (each element loaded once, but
// rows 24 KiB apart) was 3.5-4% slower. Compiled with AVX-512 flags; called only when the CPU
// has them.
#include <algorithm>

#include "kernels/conv1d.h"
#include "kernels/ops_avx512.h"
#include "kernels/prefetch.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, conv1d_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {
namespace {

constexpr int64_t kLanes = kConvGroup;  // 16: a group's taps are one zmm
// Channels per block, whose window of K rows (16 KiB at K = 4) stays in L1 while the block's
// tokens pass: a token then reads one new row piece, the next in memory, and K-1 from L1.
constexpr int64_t kBlock = 1024;
// Tokens ahead whose block of x and y a token's outputs request. A token reads one new row piece
// (its own), a few KiB past the last token's in a row of the projection output 24 KiB long, so
// the hardware prefetchers, which stop at 4 KiB pages, do not fetch it: perf had put ~40% of the
// convolution's samples at that load.
constexpr int64_t kRowsAhead = 2;

// Σ_j w[j] · rows[j] on the channels [c0, c0 + 16) ∩ the lanes of m for one token, rows[K-1]
// the token's own row.
template <int K>
inline __m512 Conv16(const float* const* rows, const float* w, int64_t c0, __mmask16 m) {
  const float* wg = w + c0 / kConvGroup * K * kConvGroup;  // the group's taps (PackConvTaps)
  __m512 acc = _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int j = 0; j < K; ++j) {
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(wg + j * kConvGroup),
                          avx512::MaskzLoadu(m, rows[j] + c0), acc);
  }
  return acc;
}

// silu(a) = a / (1 + e^-a); rounding to bf16 (`round`) the convolution a and the result, as
// torch's conv1d on bf16 tensors and then SiLU round.
inline __m512 Silu(__m512 a, bool round) {
  if (round) a = avx512::RoundBf16(a);
  const __m512 s = avx512::DivOnePlusExpNeg(a, a);
  return round ? avx512::RoundBf16(s) : s;
}

// Vectors of whole channels finished together: an e^x is a chain of ~25 dependent operations,
// which the core overlaps four at a time side by side where one alone leaves it waiting on its
// latency (as SiluMulToPairsAvx512). The same arithmetic. MiniCPM-V-4.6, Zen 5, steps
// alternating with the one-vector loop in one process: pp512 0.97-0.98x the time (3 of 3),
// batch-16 decode 0.97-1.0x; eight at a time no better.
constexpr int kChains = 4;

// y[c0, c0 + 16·kChains) for one token, all lanes whole.
template <int K>
inline void OutputChains(const float* const* rows, const float* w, int64_t c0, bool round,
                         float* y) {
  __m512 a[kChains];
#pragma GCC unroll 4
  for (int i = 0; i < kChains; ++i) a[i] = Conv16<K>(rows, w, c0 + i * kLanes, 0xffff);
#pragma GCC unroll 4
  for (int i = 0; i < kChains; ++i) _mm512_storeu_ps(y + c0 + i * kLanes, Silu(a[i], round));
}

template <int K>
void Channels(const float* x, int64_t x_stride, int64_t t, int64_t channels, int64_t c_begin,
              int64_t c_end, const float* w, float* state, float* y, int64_t y_stride,
              bool round) {
  constexpr int64_t kHist = K - 1;  // rows of state
  // Row r of xx = state ++ x.
  const auto xx = [&](int64_t r) {
    return r < kHist ? state + r * channels : x + (r - kHist) * x_stride;
  };
  // Groups at multiples of 16, the first and last possibly partial.
  const int64_t first = c_begin / kLanes * kLanes;
  const auto lanes = [&](int64_t c0) {
    return static_cast<__mmask16>(avx512::FirstLanes(c_end - c0) &
                                  ~avx512::FirstLanes(c_begin - c0));
  };
  for (int64_t b0 = first; b0 < c_end; b0 += kBlock) {
    const int64_t b1 = std::min(c_end, b0 + kBlock);
    for (int64_t i = 0; i < t; ++i) {
      const float* rows[K];
      for (int j = 0; j < K; ++j) rows[j] = xx(i + j);
      float* yi = y + i * y_stride;
      // What this token's vectors request, one line each a vector (16 channels) at its
      // channel: x and y kRowsAhead tokens on; or, for the block's last token, the next block's
      // first token's K rows and y (a decode step is that one token: its state rows come from
      // memory, a few KiB at a time); or nothing.
      const float* ahead[K + 1];
      int n_ahead = 0;
      if (i + kRowsAhead < t) {
        ahead[n_ahead++] = x + (i + kRowsAhead) * x_stride;
        ahead[n_ahead++] = yi + kRowsAhead * y_stride;
      } else if (i == t - 1 && b1 < c_end) {
        for (int j = 0; j < K; ++j) ahead[n_ahead++] = xx(j) + kBlock;
        ahead[n_ahead++] = y + kBlock;
      }
      const auto request = [&](int64_t c0) {
        for (int a = 0; a < n_ahead; ++a) {
          PrefetchL1(ahead[a] + c0);
        }
      };
      const auto one = [&](int64_t c0) {  // a vector alone, maybe partial
        request(c0);
        const __mmask16 m = lanes(c0);
        avx512::MaskStoreu(yi + c0, m, Silu(Conv16<K>(rows, w, c0, m), round));
      };
      int64_t c0 = b0;
      if (c0 < c_begin) {  // a partial first group
        one(c0);
        c0 += kLanes;
      }
      for (; c0 + kChains * kLanes <= b1; c0 += kChains * kLanes) {
        for (int i = 0; i < kChains; ++i) request(c0 + i * kLanes);
        OutputChains<K>(rows, w, c0, round, yi);
      }
      for (; c0 < b1; c0 += kLanes) one(c0);
    }
  }
  // The new state: the last kHist rows of xx. Upwards, a state row still to be read (t < kHist)
  // lies above the one being written.
  for (int64_t r = 0; r < kHist; ++r) {
    const float* from = xx(t + r);
    float* to = state + r * channels;
    for (int64_t c0 = first; c0 < c_end; c0 += kLanes) {
      avx512::MaskStoreu(to + c0, lanes(c0), avx512::MaskzLoadu(lanes(c0), from + c0));
    }
  }
}

}  // namespace

bool CausalConv1dSiluAvx512(const float* x, int64_t x_stride, int64_t t, int64_t channels,
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

}  // namespace CPM_AVX512_NAMESPACE
