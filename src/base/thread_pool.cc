#include "base/thread_pool.h"

#include <sched.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cpm {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// How long a worker spins before it sleeps. A decode step issues a few hundred parallel ops
// back to back, so waking through the kernel for each would cost more than the op.
constexpr int kSpinIterations = 1 << 14;

}  // namespace

int ThreadPool::AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : AvailableCpus()) {
  for (int w = 1; w < num_threads_; ++w) threads_.emplace_back([this, w] { WorkerLoop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    epoch_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::RunTasks(int worker) {
  for (;;) {
    int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
    if (task >= num_tasks_) break;
    (*fn_)(task, worker);
  }
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t e = epoch_.load(std::memory_order_acquire);
    for (int i = 0; e == seen && i < kSpinIterations; ++i) {
      CpuRelax();
      e = epoch_.load(std::memory_order_acquire);
    }
    if (e == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return epoch_.load(std::memory_order_acquire) != seen || stop_; });
      e = epoch_.load(std::memory_order_acquire);
    }
    if (stop_) return;
    seen = e;
    RunTasks(worker);
    pending_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t task, int worker)>& fn) {
  if (num_tasks <= 0) return;
  if (num_threads_ == 1 || num_tasks == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  fn_ = &fn;
  num_tasks_ = num_tasks;
  next_task_.store(0, std::memory_order_relaxed);
  pending_workers_.store(num_threads_ - 1, std::memory_order_relaxed);
  {
    // The lock orders the publication against a worker that is about to sleep.
    std::lock_guard<std::mutex> lock(mu_);
    epoch_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  RunTasks(0);
  while (pending_workers_.load(std::memory_order_acquire) != 0) CpuRelax();
  fn_ = nullptr;
}

void ThreadPool::ParallelForRange(
    int64_t n, int64_t grain, const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t units = (n + grain - 1) / grain;
  const int64_t chunks = std::min<int64_t>(units, num_threads_);
  const int64_t per = (units + chunks - 1) / chunks;
  ParallelFor(chunks, [&](int64_t c, int worker) {
    int64_t begin = c * per * grain;
    int64_t end = std::min(n, (c + 1) * per * grain);
    if (begin < end) fn(begin, end, worker);
  });
}

}  // namespace cpm
