#include "kernels/matmul.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul_impl.h"

namespace cpm::kernels {
namespace {

// Output rows per task: large enough to amortise scheduling, small enough to balance threads.
constexpr int64_t kRowsPerTask = 64;

using RowKernel = void (*)(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
                           int64_t row_begin, int64_t row_end, float* y, int64_t y_stride);

RowKernel SelectKernel(const LinearWeight& w) {
  switch (ActiveIsa()) {
    case Isa::kAvx512:
    case Isa::kAvx2:
      return &MatMulRowsAvx2;
    default:
      return &MatMulRef;
  }
}

}  // namespace

void PrepareLinear(LinearWeight* w) { (void)w; }

void MatMul(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w, float* y,
            int64_t y_stride, ThreadPool& pool) {
  const LinearWeight* ws[] = {&w};
  float* ys[] = {y};
  const int64_t strides[] = {y_stride};
  MatMulGroup(x, x_stride, m, ws, ys, strides, pool);
}

void MatMulGroup(const float* x, int64_t x_stride, int64_t m,
                 std::span<const LinearWeight* const> ws, std::span<float* const> ys,
                 std::span<const int64_t> y_strides, ThreadPool& pool) {
  CPM_CHECK(ws.size() == ys.size() && ws.size() == y_strides.size());
  if (m == 0) return;
  // Tasks enumerate row blocks of every weight in turn, so one parallel region covers them all.
  std::vector<int64_t> first_task(ws.size() + 1, 0);
  for (size_t i = 0; i < ws.size(); ++i) {
    first_task[i + 1] = first_task[i] + (ws[i]->out_features + kRowsPerTask - 1) / kRowsPerTask;
  }
  pool.ParallelFor(first_task.back(), [&](int64_t task, int) {
    size_t i = std::upper_bound(first_task.begin(), first_task.end(), task) - first_task.begin() - 1;
    const LinearWeight& w = *ws[i];
    int64_t begin = (task - first_task[i]) * kRowsPerTask;
    int64_t end = std::min(w.out_features, begin + kRowsPerTask);
    SelectKernel(w)(x, x_stride, m, w, begin, end, ys[i], y_strides[i]);
  });
}

void MatMulRef(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
               int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  const int64_t k = w.in_features;
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * x_stride;
      float acc = 0.0f;
      if (w.dtype == DType::kBF16) {
        const uint16_t* wr = static_cast<const uint16_t*>(w.data) + r * k;
        for (int64_t j = 0; j < k; ++j) acc += xi[j] * Bf16ToF32(wr[j]);
      } else {
        const float* wr = static_cast<const float*>(w.data) + r * k;
        for (int64_t j = 0; j < k; ++j) acc += xi[j] * wr[j];
      }
      y[i * y_stride + r] = acc;
    }
  }
}

}  // namespace cpm::kernels
