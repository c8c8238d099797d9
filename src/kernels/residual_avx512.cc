// AVX-512 residual updates, scaling and bf16 rounding: residual_avx2.cc's arithmetic on 16 lanes, a
// row's last dim % 16 elements under a mask. Every op is elementwise and exact (one rounding per
// product or sum, no contraction: -ffp-contract=off), so the results are the scalar reference's to
// the bit, whatever the vector width. Why 512 bits: most of a prefill's residual add's instructions
// are the bf16 rounding's integer ops (perf on a 512-token MiniCPM4 prefill), which 16 lanes halve
// (its norm and residual section 0.84-0.93x the time; memory holds the rest). Compiled with AVX-512
// flags; called only when the CPU has them.
#include "kernels/ops_avx512.h"
#include "kernels/simd_avx512.h"

// Tests also compile this file over SIMDe (CPM_EMULATE_AVX512, residual_avx512_emulated.cc).
namespace CPM_AVX512_NAMESPACE {
namespace {

using avx512::FirstLanes;
using avx512::MaskStoreu;
using avx512::MaskzLoadu;

// x[0, n) = f(x[0, n)) by vectors of 16, the last one under a mask.
template <typename F>
inline void MapInPlace(float* x, int64_t n, F&& f) {
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = FirstLanes(n - j);
    MaskStoreu(x + j, m, f(MaskzLoadu(m, x + j)));
  }
}

// A delta's lanes of m (the others 0) as f32: as stored, or widened from bf16 (exact).
inline __m512 LoadDelta(__mmask16 m, const float* d) { return MaskzLoadu(m, d); }
inline __m512 LoadDelta(__mmask16 m, const uint16_t* d) { return avx512::MaskzLoadBf16(m, d); }

// h = bf(h + bf(d · scale)) with kRound, h + d · scale without: one row.
template <bool kRound, typename D>
inline void AddScaledRow(float* h, const D* d, int64_t dim, __m512 scale) {
  for (int64_t j = 0; j < dim; j += 16) {
    const __mmask16 m = FirstLanes(dim - j);
    __m512 s = _mm512_mul_ps(LoadDelta(m, d + j), scale);
    if (kRound) s = avx512::RoundBf16(s);
    __m512 v = _mm512_add_ps(MaskzLoadu(m, h + j), s);
    if (kRound) v = avx512::RoundBf16(v);
    MaskStoreu(h + j, m, v);
  }
}

template <typename D>
void AddScaledRows(float* h, int64_t h_stride, const D* d, int64_t d_stride, int64_t rows,
                   int64_t dim, float scale, Round round) {
  const __m512 vs = _mm512_set1_ps(scale);
  for (int64_t r = 0; r < rows; ++r) {
    if (round == Round::kBf16) {
      AddScaledRow<true>(h + r * h_stride, d + r * d_stride, dim, vs);
    } else {
      AddScaledRow<false>(h + r * h_stride, d + r * d_stride, dim, vs);
    }
  }
}

}  // namespace

void AddScaledAvx512(float* h, int64_t h_stride, const float* d, int64_t d_stride, int64_t rows,
                     int64_t dim, float scale, Round round) {
  AddScaledRows(h, h_stride, d, d_stride, rows, dim, scale, round);
}

void AddScaledAvx512(float* h, int64_t h_stride, const uint16_t* d, int64_t d_stride,
                     int64_t rows, int64_t dim, float scale, Round round) {
  AddScaledRows(h, h_stride, d, d_stride, rows, dim, scale, round);
}

void ScaleAvx512(float* x, int64_t n, float scale, Round round) {
  const __m512 vs = _mm512_set1_ps(scale);
  if (round == Round::kBf16) {
    MapInPlace(x, n, [&](__m512 v) { return avx512::RoundBf16(_mm512_mul_ps(v, vs)); });
  } else {
    MapInPlace(x, n, [&](__m512 v) { return _mm512_mul_ps(v, vs); });
  }
}

void RoundBf16InPlaceAvx512(float* x, int64_t n) {
  MapInPlace(x, n, [](__m512 v) { return avx512::RoundBf16(v); });
}

}  // namespace CPM_AVX512_NAMESPACE
