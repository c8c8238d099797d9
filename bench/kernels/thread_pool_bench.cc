// Fork/join cost of ThreadPool::ParallelFor: the fixed overhead every parallel kernel pays.
#include <benchmark/benchmark.h>

#include <atomic>

#include "base/thread_pool.h"

namespace cpm {
namespace {

// One task per thread doing nothing: the time is the publish + wake + join round trip.
void BM_ParallelForEmpty(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.ParallelFor(pool.num_threads(), [&](int64_t t, int) {
      sink.fetch_add(t, std::memory_order_relaxed);
    });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_ParallelForEmpty)->Arg(1)->Arg(2)->UseRealTime();

// Many tiny tasks: the per-task cost of the shared task counter.
void BM_ParallelFor256Tasks(benchmark::State& state) {
  ThreadPool pool(static_cast<int>(state.range(0)));
  std::atomic<int64_t> sink{0};
  for (auto _ : state) {
    pool.ParallelFor(256, [&](int64_t t, int) { sink.fetch_add(t, std::memory_order_relaxed); });
  }
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_ParallelFor256Tasks)->Arg(2)->UseRealTime();

}  // namespace
}  // namespace cpm
