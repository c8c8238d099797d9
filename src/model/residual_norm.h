// The decoder's residual stream between blocks, as MiniCPM4 and Qwen3.5 both run it: h [rows,
// dim] the stream, x [rows, dim] the next block's input, both row-major with stride dim (x, or
// its bf16 pair rows: NormOut). Each is a profile section of its own ("norms", "residual adds,
// norms").
#pragma once

#include <algorithm>
#include <cstdint>

#include <span>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/thread_pool.h"
#include "kernels/matmul.h"
#include "kernels/residual.h"
#include "kernels/rmsnorm.h"
#include "model/forward_profile.h"
#include "model/row_ranges.h"

namespace cpm {

// Where a norm's rows go: x as f32 rows of stride dim, or, where the next block's matmuls are
// their only reader and take them (kernels::MatMulTakesPairRows), as those matmuls' bf16 pair
// rows (kernels::RmsNormToPairs: the same values, half the bytes, nothing for the matmul to pack).
struct NormOut {
  NormOut(float* x) : x(x) {}  // NOLINT(google-explicit-constructor): the common case
  NormOut(uint32_t* pairs, int64_t pairs_stride) : pairs(pairs), pairs_stride(pairs_stride) {}
  float* x = nullptr;
  uint32_t* pairs = nullptr;
  int64_t pairs_stride = 0;
};

// Where the norms write x [rows, dim] for a forward: as pair rows in `pairs` (grown to fit;
// aligned, so that a row's tile loads start on cache lines) when the model runs bf16 (round) and
// every matmul in `ws` takes them, else the f32 rows `x`. A model decides once per forward: tests
// may lower the ISA between forwards.
inline NormOut ChooseNormOut(kernels::Round round, std::span<const kernels::LinearWeight* const> ws,
                             int64_t rows, int64_t dim, float* x, AlignedBuffer& pairs) {
  if (round != kernels::Round::kBf16 || !kernels::MatMulTakesPairRows(ws)) return x;
  const int64_t stride = kernels::PairRowsStride(dim);
  const size_t bytes = static_cast<size_t>(rows * stride) * sizeof(uint32_t);
  if (pairs.size() < bytes) pairs.Resize(bytes);
  return {pairs.as<uint32_t>(), stride};
}

// Where the o and down projections write what AddResidualAndNorm adds to h [rows, dim]: f32 rows
// of stride dim, or, where the matmul writes them from its kernel (kernels::Bf16Rows), bf16 rows
// of the same stride: the same values in half the bytes, which a prefill's matmul scatters at the
// row stride in fewer lines and the residual add reads in fewer.
struct DeltaRows {
  DeltaRows(float* x) : x(x) {}  // NOLINT(google-explicit-constructor): the common case
  explicit DeltaRows(uint16_t* bf16) : bf16(bf16) {}
  float* x = nullptr;
  uint16_t* bf16 = nullptr;
};

// Where a forward's o and down projections write: bf16 rows in `bf16` (grown to fit) when its
// norms write pair rows (`norm_out`: GatedMlp's bf16-rows form takes them) and every matmul in
// `ws` writes bf16 rows from its kernel (kernels::MatMulWritesBf16Rows), else the f32 rows `x`.
// Decided with ChooseNormOut, once per forward.
inline DeltaRows ChooseDeltaRows(const NormOut& norm_out,
                                 std::span<const kernels::LinearWeight* const> ws, int64_t rows,
                                 int64_t dim, float* x, AlignedBuffer& bf16) {
  if (norm_out.pairs == nullptr || !kernels::MatMulWritesBf16Rows(ws)) return x;
  const size_t bytes = static_cast<size_t>(rows * dim) * sizeof(uint16_t);
  if (bf16.size() < bytes) bf16.Resize(bytes);
  return DeltaRows(bf16.as<uint16_t>());
}

// out [m, dim] = x · Wᵀ in the form chosen, rounded as `round` says (bf16 rows: to bf16).
inline void MatMulToDelta(const float* x, int64_t x_stride, int64_t m,
                          const kernels::LinearWeight& w, const DeltaRows& out, int64_t dim,
                          ThreadPool& pool, kernels::Round round) {
  if (out.bf16 != nullptr) {
    kernels::MatMul(x, x_stride, m, w, kernels::Bf16Rows{out.bf16, dim}, pool);
  } else {
    kernels::MatMul(x, x_stride, m, w, out.x, dim, pool, round);
  }
}

// The matmuls that read a norm's rows x [m, dim], on the form the norm wrote them.
inline void MatMulGroupOnNorm(const NormOut& x, int64_t dim, int64_t m,
                              std::span<const kernels::LinearWeight* const> ws,
                              std::span<float* const> ys, std::span<const int64_t> y_strides,
                              ThreadPool& pool, kernels::Round round) {
  if (x.pairs != nullptr) {
    kernels::MatMulGroup(kernels::PairRows{x.pairs, x.pairs_stride}, m, ws, ys, y_strides, pool,
                         round);
  } else {
    kernels::MatMulGroup(x.x, dim, m, ws, ys, y_strides, pool, round);
  }
}

// out = down(silu(gate(x)) ⊙ up(x)) on a norm's rows x [m, dim], into out's form (its rows
// out_stride apart); `act` [m, act_stride] is the f32 path's scratch (on pair rows the activation
// goes to down as pairs, in the kernel's own).
inline void GatedMlpOnNorm(const NormOut& x, int64_t dim, int64_t m,
                           const kernels::LinearWeight& gate, const kernels::LinearWeight& up,
                           const kernels::LinearWeight& down, float* act, int64_t act_stride,
                           const DeltaRows& out, int64_t out_stride, ThreadPool& pool,
                           kernels::Round round) {
  if (out.bf16 != nullptr) {
    CPM_CHECK(x.pairs != nullptr);  // ChooseDeltaRows
    kernels::GatedMlp(kernels::PairRows{x.pairs, x.pairs_stride}, m, gate, up, down,
                      kernels::Bf16Rows{out.bf16, out_stride}, pool);
  } else if (x.pairs != nullptr) {
    kernels::GatedMlp(kernels::PairRows{x.pairs, x.pairs_stride}, m, gate, up, down, out.x,
                      out_stride, pool, round);
  } else {
    kernels::GatedMlp(x.x, dim, m, gate, up, down, act, act_stride, out.x, out_stride, pool,
                      round);
  }
}

// Rows [r0, r1) of out = RMSNorm(h) · weight.
inline void NormRowRange(const float* h, int64_t dim, const float* weight, const NormOut& out,
                         int64_t r0, int64_t r1, const kernels::RmsNormParams& params) {
  if (out.pairs != nullptr) {
    kernels::RmsNormToPairs(h + r0 * dim, dim, weight, out.pairs + r0 * out.pairs_stride,
                            out.pairs_stride, r1 - r0, dim, params);
  } else {
    kernels::RmsNorm(h + r0 * dim, dim, weight, out.x + r0 * dim, dim, r1 - r0, dim, params);
  }
}

// x = RMSNorm(h) · weight: the first layer's input norm (each later norm follows a residual
// add: AddResidualAndNorm).
inline void NormRows(ThreadPool& pool, int64_t rows, int64_t dim, const float* h,
                     const float* weight, const NormOut& x, const kernels::RmsNormParams& params) {
  ProfileScope section("norms");
  ForRowRanges(pool, rows, dim, [&](int64_t r0, int64_t r1) {
    NormRowRange(h, dim, weight, x, r0, r1, params);
  });
}

// h += scale · delta (f32 or bf16 rows of stride dim) with AddScaled's rounding (residual.h),
// then x = RMSNorm(h) · next_norm when one is given (none after the last block): one hand-off
// to the pool instead of two, and within a thread's range, a few rows at a time, so that the
// norm's two passes read h where the add left it, in L1 (a prefill's range of 256 rows × 4 KiB
// is past L2).
inline void AddResidualAndNorm(ThreadPool& pool, int64_t rows, int64_t dim, float* h,
                               const DeltaRows& delta, float scale, kernels::Round round,
                               const float* next_norm, const NormOut& x,
                               const kernels::RmsNormParams& params) {
  ProfileScope section("residual adds, norms");
  const int64_t block = std::max<int64_t>(1, 16 * 1024 / (dim * int64_t{sizeof(float)}));
  ForRowRanges(pool, rows, dim, [&](int64_t r0, int64_t r1) {
    for (int64_t b0 = r0; b0 < r1; b0 += block) {
      const int64_t b1 = std::min(r1, b0 + block);
      if (delta.bf16 != nullptr) {
        kernels::AddScaled(h + b0 * dim, dim, delta.bf16 + b0 * dim, dim, b1 - b0, dim, scale,
                           round);
      } else {
        kernels::AddScaled(h + b0 * dim, dim, delta.x + b0 * dim, dim, b1 - b0, dim, scale,
                           round);
      }
      if (next_norm != nullptr) NormRowRange(h, dim, next_norm, x, b0, b1, params);
    }
  });
}

}  // namespace cpm
