// The machine's limits as kernels_bench sees them (the same numbers `cpmserve bench` divides by).
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstring>

#include "base/aligned_buffer.h"
#include "bench_threads.h"
#include "kernels/cpu_features.h"
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
  if (BestIsa() == Isa::kScalar) return state.SkipWithError("needs AVX2");
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

// The probe's read (run 0: four streams a quarter of each thread's range apart) against the same
// four streams over a four-panel decode tile's runs (64 KiB panels at k = 1024, 256 KiB at 4096).
// On huge pages, as the weights; 1 KiB prefetch distance; the pool's threads, wall time.
// A Zen 5 VM (seventy-first session, 5 runs): run 0 79-82 GB/s, 64 KiB 69-74 (0.88-0.92x), 256
// KiB 66-69 (0.83-0.86x); one thread 40-41, 37-38, 34-35; runs of 1-4 MiB 0.6-0.85x, of 8-32 MiB
// level with run 0. The decode kernels do not follow the plain read there: each weight's panels
// in four runs 16 MiB apart ran a batch-1 step's matmuls at 0.976-1.001x the time (in-process,
// alternated), so the tiles' panel spacing is not what keeps batch 1 from the probe's rate.
void BM_StreamReadRuns(benchmark::State& state) {
  if (BestIsa() == Isa::kScalar) return state.SkipWithError("needs AVX2");
  const int64_t bytes = int64_t{512} << 20, run = state.range(0);
  ThreadPool pool(BenchThreads());
  AlignedBuffer buf(bytes, Pages::kHuge);
  std::memset(buf.data(), 1, bytes);
  const int threads = pool.num_threads();
  const int64_t per = bytes / threads / 4096 * 4096;
  std::atomic<uint64_t> sink{0};
  for (auto _ : state) {
    pool.ParallelFor(threads, [&](int64_t t, int) {
      sink ^= StreamReadAvx2(buf.data() + t * per, per, 1024, run);
    });
  }
  state.counters["GB/s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * per * threads / 1e9,
                         benchmark::Counter::kIsRate);
}
BENCHMARK(BM_StreamReadRuns)
    ->ArgName("run")
    ->Arg(0)
    ->Arg(64 << 10)
    ->Arg(256 << 10)
    ->MinTime(0.5)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cpm::kernels
