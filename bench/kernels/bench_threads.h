// Thread count for the kernel benchmarks' pools: CPM_BENCH_THREADS, else one per physical core
// (0).
//
// Time is the calling thread's CPU time (Google Benchmark's default), not wall time: the dev
// machine is shared, and a descheduled thread would otherwise count as slow kernel time. With
// CPM_BENCH_THREADS=1 (the robust setting on a loaded machine) that is all the work; with more
// threads the caller also runs tasks a descheduled worker left, so it stays close.
#pragma once

#include <cstdlib>

namespace cpm::kernels {

inline int BenchThreads() {
  const char* s = std::getenv("CPM_BENCH_THREADS");
  return s ? std::atoi(s) : 0;
}

}  // namespace cpm::kernels
