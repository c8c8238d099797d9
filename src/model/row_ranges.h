// Row-parallel elementwise work for the model forwards: a prefill chunk's norms, activations,
// residual adds and RoPE split their rows over the compute pool, so the second core does not
// idle through them (they ran on the caller alone: ~3% of a 512-token prefill, doubled in wall
// time). A decode step's few rows stay on the caller, where a hand-off would cost more than the
// work, unless they are wide: batch-16 decode's SiluMul over 16 × 4096 elements ran on one
// core while the other waited (~3% of the step on a Zen 5), and from 8 rows of MiniCPM4's 1024
// its norms, residual adds and RoPE: `cpmserve bench --profile`, batch 16, three alternated
// runs on 2 vCPUs of a Xeon: those sections 1.34-1.48 -> 1.01-1.11 ms a step (each of the
// three lower in every run; the rows' data was last written by both threads' matmul tasks).
// Every op is row-wise, so results do not depend on the split.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace cpm {

// Runs fn(r0, r1) over contiguous ranges that cover [0, rows) of `row_elems` elements each: on
// the pool from kMinRows rows or kMinElements elements, inline below that.
template <typename Fn>
void ForRowRanges(ThreadPool& pool, int64_t rows, int64_t row_elems, Fn&& fn) {
  constexpr int64_t kMinRows = 32, kMinElements = 8 * 1024;
  const bool wide = rows >= 2 && rows * row_elems >= kMinElements;
  if ((rows < kMinRows && !wide) || pool.num_threads() == 1) {
    fn(int64_t{0}, rows);
    return;
  }
  pool.ParallelForRange(rows, rows < kMinRows ? 1 : 4,
                        [&](int64_t r0, int64_t r1, int) { fn(r0, r1); });
}

}  // namespace cpm
