// The machine's limits as kernels_bench sees them (the same numbers `cpmserve bench` divides by).
#include <benchmark/benchmark.h>

#include <cstring>

#include "base/aligned_buffer.h"
#include "kernels/machine_limits.h"

namespace cpm::kernels {
namespace {

void BM_MachineLimits(benchmark::State& state) {
  ThreadPool pool(0);
  MachineLimits l;
  for (auto _ : state) l = MeasureMachineLimits(pool, int64_t{512} << 20, 3);
  state.counters["read_GB/s"] = l.read_gbps;
  state.counters["read_GB/s_1t"] = l.read_gbps_1t;
  state.counters["read_prefetch_B"] = static_cast<double>(l.read_prefetch_bytes);
  state.counters["fma_GFLOP/s"] = l.f32_fma_gflops;
  state.counters["fma_GFLOP/s_1t"] = l.f32_fma_gflops_1t;
  state.counters["bf16_GFLOP/s"] = l.bf16_dot_gflops;
}
BENCHMARK(BM_MachineLimits)->Iterations(1)->Unit(benchmark::kMillisecond);

// The same limits on the calling thread, against its CPU time: on a machine shared with other
// work (builds), wall-clock peaks mostly measure the other work, while these are the ceilings
// the single-thread kernel figures of matmul_bench (also CPU time) should be divided by.
// Memory bandwidth is still shared with the other processes, so it is a floor of the real one.
void BM_FmaPeakCpuTime(benchmark::State& state) {
  double flops = 0;
  for (auto _ : state) flops += FmaPeakLoopAvx2(1 << 20);
  state.counters["GFLOP/s"] = benchmark::Counter(flops / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FmaPeakCpuTime)->MinTime(0.3);

// Arg: software-prefetch distance per stream (bytes; 0: none).
void BM_StreamReadCpuTime(benchmark::State& state) {
  const int64_t bytes = int64_t{512} << 20;
  AlignedBuffer buf(bytes);
  std::memset(buf.data(), 1, bytes);  // touch every page before timing
  uint64_t sink = 0;
  for (auto _ : state) sink ^= StreamReadAvx2(buf.data(), bytes, state.range(0));
  benchmark::DoNotOptimize(sink);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * bytes / 1e9,
                                              benchmark::Counter::kIsRate);
}
BENCHMARK(BM_StreamReadCpuTime)->Arg(0)->Arg(1024)->MinTime(0.5)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cpm::kernels
