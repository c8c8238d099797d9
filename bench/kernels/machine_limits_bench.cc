// The machine's limits as kernels_bench sees them (the same numbers `cpmserve bench` divides by).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <vector>

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
// four streams over a four-panel decode tile's runs (64 KiB panels at k = 1024, 256 KiB at 4096):
// what the weights' layout alone costs the batch-1 matmuls, apart from their kernel. On huge
// pages, as the weights; 1 KiB prefetch distance; the pool's threads, wall time.
// A Zen 5 VM (seventy-first session, 5 runs): run 0 79-82 GB/s, 64 KiB 69-74 (0.88-0.92x), 256
// KiB 66-69 (0.83-0.86x); one thread 40-41, 37-38, 34-35. Other run lengths there (1-4 MiB:
// 0.6-0.85x) say it is where the four streams fall in DRAM, not how often they restart.
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

// A MiniCPM4-0.5B batch-1 decode step's weight reads without the arithmetic, in two layouts of
// the same 868 MB, alternated step by step: per matrix (q/k/v, o, gate, up, down of each layer,
// then the head) one ParallelForShares call of four-panel tasks, as the decode matmuls make, each
// reading its panels in lockstep (StreamRead4Avx2, 2 KiB ahead per stream: the tiles' 8 KiB over
// four). Panels are 32 columns of k (64 KiB at k = 1024, 256 KiB at 4096). Layout "packed": each
// matrix's panels in order, as PackLinear lays them (a task's streams 64 or 256 KiB apart);
// "regions": four regions a quarter of a buffer apart, panel p of every matrix in region p % 4
// (a task's streams ~217 MB apart, as the probe's). Counters: each layout's GB/s over all its
// steps and the median of the steps' time ratios, regions / packed.
// A Zen 5 VM (seventy-first session, a standalone copy, 24 pairs a run, six runs with the two
// layouts' halves of one buffer swapped in three): median ratio 0.93-0.97, GB/s 64-69 against
// 68-73 (BM_StreamReadRuns: four streams 8 MiB or more apart read at the probe's rate there,
// 64 KiB to 4 MiB apart 8-40% slower).
void BM_DecodeStepReadLayouts(benchmark::State& state) {
  if (BestIsa() == Isa::kScalar) return state.SkipWithError("needs AVX2");
  struct Matrix {
    int64_t panels, panel_bytes;
  };
  std::vector<Matrix> step;
  for (int layer = 0; layer < 24; ++layer) {
    for (const int64_t n : {1280, 1024, 4096, 4096}) step.push_back({n / 32, 64 << 10});
    step.push_back({1024 / 32, 256 << 10});  // down: k = 4096
  }
  step.push_back({(73448 + 31) / 32, 64 << 10});  // the tied head
  int64_t bytes = 0;
  for (const Matrix& m : step) bytes += m.panels * m.panel_bytes;
  // Each region holds its quarter of every matrix's panels (rounded up). Both layouts address the
  // same buffer, so that they read the same pages (two copies of the weights differ by where
  // their pages fall, by up to 5% on the Zen 5 VM).
  const int64_t region = bytes / 4 + static_cast<int64_t>(step.size()) * (256 << 10);
  AlignedBuffer buf(4 * region, Pages::kHuge);
  std::memset(buf.data(), 1, 4 * region);
  // Each layout's panel addresses, matrix by matrix.
  std::vector<std::vector<const std::byte*>> packed(step.size()), regions(step.size());
  int64_t packed_at = 0, region_at[4] = {0, 0, 0, 0};
  for (size_t i = 0; i < step.size(); ++i) {
    const Matrix& m = step[i];
    for (int64_t p = 0; p < m.panels; ++p) {
      packed[i].push_back(buf.data() + packed_at + p * m.panel_bytes);
      regions[i].push_back(buf.data() + (p % 4) * region + region_at[p % 4] +
                           (p / 4) * m.panel_bytes);
    }
    packed_at += m.panels * m.panel_bytes;
    for (int r = 0; r < 4; ++r) region_at[r] += (m.panels + 3 - r) / 4 * m.panel_bytes;
  }
  ThreadPool pool(BenchThreads());
  std::atomic<uint64_t> sink{0};
  const auto run_step = [&](const std::vector<std::vector<const std::byte*>>& panels) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < step.size(); ++i) {
      const int64_t n = step[i].panels;
      pool.ParallelForShares((n + 3) / 4, [&](int64_t t, int) {
        const void* streams[4];
        for (int q = 0; q < 4; ++q) streams[q] = panels[i][std::min(4 * t + q, n - 1)];
        sink.fetch_xor(StreamRead4Avx2(streams, step[i].panel_bytes, 2048),
                       std::memory_order_relaxed);
      });
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  run_step(packed);
  run_step(regions);
  double packed_s = 0, regions_s = 0;
  std::vector<double> ratios;
  for (auto _ : state) {
    const bool regions_first = ratios.size() % 2 == 1;
    const double first = run_step(regions_first ? regions : packed);
    const double second = run_step(regions_first ? packed : regions);
    const double p = regions_first ? second : first, r = regions_first ? first : second;
    packed_s += p;
    regions_s += r;
    ratios.push_back(r / p);
  }
  std::sort(ratios.begin(), ratios.end());
  const double steps = static_cast<double>(state.iterations());
  state.counters["packed_GB/s"] = steps * bytes / packed_s / 1e9;
  state.counters["regions_GB/s"] = steps * bytes / regions_s / 1e9;
  state.counters["regions/packed_time"] = ratios[ratios.size() / 2];
}
BENCHMARK(BM_DecodeStepReadLayouts)->Iterations(24)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace cpm::kernels
