// ThreadPool: one atomic word publishes a job and hands out its tasks; see thread_pool.h.
#include "base/thread_pool.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>

#include "base/check.h"
#include "base/cpu_topology.h"

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

constexpr int kJobShift = 44, kCountShift = 22;
constexpr uint64_t kFieldMask = (uint64_t{1} << 22) - 1;

inline uint64_t JobOf(uint64_t s) { return s >> kJobShift; }
inline int64_t CountOf(uint64_t s) { return static_cast<int64_t>((s >> kCountShift) & kFieldMask); }
inline int64_t NextOf(uint64_t s) { return static_cast<int64_t>(s & kFieldMask); }
// A share's word: the job id, then its next task where state_ has the count, its end below.
inline int64_t ShareNext(uint64_t s) { return CountOf(s); }
inline int64_t ShareEnd(uint64_t s) { return NextOf(s); }
inline uint64_t ShareWord(uint64_t job, int64_t next, int64_t end) {
  return (job << kJobShift) | (static_cast<uint64_t>(next) << kCountShift) |
         static_cast<uint64_t>(end);
}

// The CPU that worker i is pinned to: the physical cores first, one CPU each, then their SMT
// siblings (MachineCpuTopology), wrapping around past the last.
int NthPinCpu(int i) {
  const CpuTopology& t = MachineCpuTopology();
  const size_t n = t.core_cpus.size() + t.sibling_cpus.size();
  if (n == 0) return -1;
  const size_t k = static_cast<size_t>(i) % n;
  return k < t.core_cpus.size() ? t.core_cpus[k] : t.sibling_cpus[k - t.core_cpus.size()];
}

void PinTo(std::thread::native_handle_type handle, int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(handle, sizeof(set), &set);  // best effort
}

}  // namespace

int ThreadPool::DefaultThreads() {
  return std::max<int>(1, static_cast<int>(MachineCpuTopology().core_cpus.size()));
}

ThreadPool::ThreadPool(int num_threads) : ThreadPool(ThreadPoolOptions{.num_threads = num_threads}) {}

ThreadPool::ThreadPool(const ThreadPoolOptions& options)
    : num_threads_(options.num_threads > 0 ? options.num_threads : DefaultThreads()),
      options_(options),
      shares_(std::make_unique<Share[]>(static_cast<size_t>(num_threads_))) {
  for (int w = 1; w < num_threads_; ++w) {
    threads_.emplace_back([this, w] { WorkerLoop(w); });
    if (options_.pin_threads) PinTo(threads_.back().native_handle(), NthPinCpu(w));
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_seq_cst);
  wake_seq_.fetch_add(1, std::memory_order_seq_cst);
  wake_seq_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::PinCaller() {
  caller_pinned_ = true;
  PinTo(pthread_self(), NthPinCpu(0));
}

int64_t ThreadPool::RunTasks(uint64_t job, int worker) {
  int64_t ran = 0;
  uint64_t s = state_.load(std::memory_order_acquire);
  for (;;) {
    if (JobOf(s) != job || NextOf(s) >= CountOf(s)) break;
    // A successful claim proves the job is still current: it cannot end before this task does,
    // so fn_ stays valid until we report it done.
    if (!state_.compare_exchange_weak(s, s + 1, std::memory_order_acquire,
                                      std::memory_order_acquire)) {
      continue;
    }
    (*fn_)(NextOf(s), worker);
    ++ran;
    s = state_.load(std::memory_order_acquire);
  }
  // Reported once, not per task: the caller spins reading done_, so each add is a transfer of
  // its cache line (perf: ~0.9% of a batch-1 decode step's samples at one add per task).
  if (ran > 0) done_.fetch_add(ran, std::memory_order_release);
  return ran;
}

void ThreadPool::RunShares(uint64_t job, int worker) {
  // A claim is a compare-exchange of the share's word that still carries `job`, so it can never
  // take a task of a newer job; the owner advances its next, a thief lowers its end.
  const auto claim = [&](int w, bool from_end) -> int64_t {
    std::atomic<uint64_t>& word = shares_[w].word;
    uint64_t s = word.load(std::memory_order_acquire);
    for (;;) {
      const int64_t next = ShareNext(s), end = ShareEnd(s);
      if (JobOf(s) != job || next >= end) return -1;
      const uint64_t claimed = from_end ? ShareWord(job, next, end - 1)
                                        : ShareWord(job, next + 1, end);
      if (word.compare_exchange_weak(s, claimed, std::memory_order_acquire,
                                     std::memory_order_acquire)) {
        return from_end ? end - 1 : next;
      }
    }
  };
  int64_t ran = 0;  // reported when this thread finds no task left, as in RunTasks
  const auto run = [&](int64_t task) {
    (*fn_)(task, worker);
    ++ran;
  };
  for (int64_t t; (t = claim(worker, false)) >= 0;) run(t);
  for (;;) {
    int victim = -1;
    int64_t most = 0;
    for (int w = 0; w < num_threads_; ++w) {
      const uint64_t s = shares_[w].word.load(std::memory_order_acquire);
      const int64_t left = ShareEnd(s) - ShareNext(s);
      if (JobOf(s) == job && left > most) victim = w, most = left;
    }
    if (victim < 0) break;
    if (const int64_t t = claim(victim, true); t >= 0) run(t);
  }
  if (ran > 0) done_.fetch_add(ran, std::memory_order_release);
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;  // last job this worker looked at
  const auto spin = std::chrono::microseconds(options_.spin_us);
  for (;;) {
    uint64_t job = JobOf(state_.load(std::memory_order_acquire));
    if (job == seen && !stop_.load(std::memory_order_relaxed)) {
      // Spin for the next job, checking the clock only every 64 pauses.
      const auto start = std::chrono::steady_clock::now();
      for (int i = 1; job == seen; ++i) {
        CpuRelax();
        job = JobOf(state_.load(std::memory_order_acquire));
        if ((i & 63) == 0 && std::chrono::steady_clock::now() - start > spin) break;
      }
    }
    if (job == seen && options_.before_sleep) options_.before_sleep();
    while (job == seen && !stop_.load(std::memory_order_seq_cst)) {
      // Sleep. The seq_cst increment of sleepers_ before re-reading wake_seq_, against the
      // publisher's seq_cst store of wake_seq_ before reading sleepers_, means one of the two
      // always sees the other: no lost wake-up.
      const uint32_t seq = wake_seq_.load(std::memory_order_seq_cst);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      if (JobOf(state_.load(std::memory_order_seq_cst)) == seen &&
          !stop_.load(std::memory_order_seq_cst)) {
        wake_seq_.wait(seq, std::memory_order_seq_cst);
      }
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
      job = JobOf(state_.load(std::memory_order_acquire));
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = job;
    RunTasks(job, worker);
    RunShares(job, worker);
  }
}

void ThreadPool::ParallelFor(int64_t num_tasks,
                             const std::function<void(int64_t task, int worker)>& fn) {
  Run(num_tasks, fn, /*shares=*/false);
}

void ThreadPool::ParallelForShares(int64_t num_tasks,
                                   const std::function<void(int64_t task, int worker)>& fn) {
  Run(num_tasks, fn, /*shares=*/true);
}

void ThreadPool::Run(int64_t num_tasks, const std::function<void(int64_t, int)>& fn,
                     bool shares) {
  if (num_tasks <= 0) return;
  CPM_CHECK(num_tasks <= kMaxTasks);
  if (options_.pin_threads && !caller_pinned_) PinCaller();
  if (num_threads_ == 1 || num_tasks == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) fn(t, 0);
    return;
  }
  fn_ = &fn;
  done_.store(0, std::memory_order_relaxed);
  job_ = (job_ + 1) & ((uint64_t{1} << (64 - kJobShift)) - 1);
  if (job_ == 0) job_ = 1;  // 0 is "no job yet" for the workers
  // A job of shares leaves nothing to claim one by one (next = count): the workers find their
  // shares, tagged with the job id, which the store of state_ below publishes.
  for (int w = 0; shares && w < num_threads_; ++w) {
    const int64_t begin = num_tasks * w / num_threads_, end = num_tasks * (w + 1) / num_threads_;
    shares_[w].word.store(ShareWord(job_, begin, end), std::memory_order_relaxed);
  }
  const uint64_t next = shares ? static_cast<uint64_t>(num_tasks) : 0;
  state_.store((job_ << kJobShift) | (static_cast<uint64_t>(num_tasks) << kCountShift) | next,
               std::memory_order_seq_cst);
  wake_seq_.store(static_cast<uint32_t>(job_), std::memory_order_seq_cst);
  if (sleepers_.load(std::memory_order_seq_cst) > 0) wake_seq_.notify_all();
  RunTasks(job_, 0);
  RunShares(job_, 0);
  while (done_.load(std::memory_order_acquire) != num_tasks) CpuRelax();
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
