// The machine's limits as kernels_bench sees them (the same numbers `cpmserve bench` divides by).
#include <benchmark/benchmark.h>

#include "kernels/machine_limits.h"

namespace cpm::kernels {
namespace {

void BM_MachineLimits(benchmark::State& state) {
  ThreadPool pool(0);
  MachineLimits l;
  for (auto _ : state) l = MeasureMachineLimits(pool, int64_t{512} << 20, 3);
  state.counters["read_GB/s"] = l.read_gbps;
  state.counters["read_GB/s_1t"] = l.read_gbps_1t;
  state.counters["fma_GFLOP/s"] = l.f32_fma_gflops;
  state.counters["fma_GFLOP/s_1t"] = l.f32_fma_gflops_1t;
  state.counters["bf16_GFLOP/s"] = l.bf16_dot_gflops;
}
BENCHMARK(BM_MachineLimits)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cpm::kernels
