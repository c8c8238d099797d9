// ThreadPool: persistent compute workers for data-parallel kernels. No thread is created per op.
// The calling thread takes part as worker 0, so a pool of N threads starts N-1 workers.
// Not a singleton: the engine owns one and passes it explicitly. Only one thread may call
// ParallelFor at a time (the engine thread); it is not reentrant.
//
// Latency: idle workers spin (with `pause`) for `spin_us` before sleeping on a futex, so the
// back-to-back ops of a forward step wake them in well under a microsecond. A job ends when
// its tasks are done, not when every worker has checked in: a worker that the OS descheduled
// (another process on the core) before it claimed a task does not delay the caller, who then
// runs the tasks itself; one descheduled holding a claimed task, or before reporting the tasks
// it ran, does.
//
// Cores: the pool uses `num_threads` CPUs at full speed while a job runs. Other threads of the
// process (HTTP, tokenizer) should be few and mostly blocked; size the pool to the CPUs left to
// compute (`cpmserve serve --threads`); by default one thread per physical core, so the SMT
// siblings stay free for them. With `pin_threads`, worker i (the caller is worker 0) is pinned
// to the i-th physical core's first allowed CPU (past the cores, to their siblings), which
// keeps caches warm and stops the scheduler from stacking two workers on one core; off by
// default because it is harmful when the process shares its CPUs with other busy processes.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace cpm {

struct ThreadPoolOptions {
  int num_threads = 0;       // <= 0: DefaultThreads(), one per physical core
  bool pin_threads = false;  // pin worker i (and the caller, on its first ParallelFor) to a CPU
  int spin_us = 200;         // busy-wait this long for the next job before sleeping
  // Runs on a worker each time it is about to sleep: hands back per-thread hardware state that
  // a sleeper should not carry through its context switches (kernels::ReleaseTiles: 8 KiB of
  // AMX tiles, which the kernels keep configured from call to call while the worker is busy).
  std::function<void()> before_sleep;
};

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  explicit ThreadPool(const ThreadPoolOptions& options);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task, worker) for task in [0, num_tasks), spread dynamically over the workers;
  // `worker` in [0, num_threads) selects per-thread scratch. Returns when all tasks are done.
  // At most kMaxTasks tasks per call.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t task, int worker)>& fn);

  // ParallelFor whose tasks are handed out in contiguous shares: worker w first runs the tasks of
  // [w·n/T, (w+1)·n/T) in order, then, its share done, takes the last task left of the share
  // with the most left, until none is. Each thread's tasks then follow one another in memory
  // where the caller lays them out so (a matmul's column panels: one stream for the hardware and
  // software prefetchers, where ParallelFor's interleaved claims start a cold one per task),
  // while the ends still balance as ParallelFor's do.
  void ParallelForShares(int64_t num_tasks,
                         const std::function<void(int64_t task, int worker)>& fn);

  // Splits [0, n) into about `num_threads` contiguous ranges of multiples of `grain`:
  // fn(begin, end, worker).
  void ParallelForRange(int64_t n, int64_t grain,
                        const std::function<void(int64_t begin, int64_t end, int worker)>& fn);

  // The default thread count: one per physical core of the CPUs this process may run on
  // (cpu_topology.h says why not one per CPU).
  static int DefaultThreads();

  static constexpr int64_t kMaxTasks = (int64_t{1} << 22) - 1;

 private:
  void WorkerLoop(int worker);
  // Claims and runs tasks of job `job` until none is left; returns how many it ran.
  int64_t RunTasks(uint64_t job, int worker);
  // The same for a ParallelForShares job: its own share, then the others' ends.
  void RunShares(uint64_t job, int worker);
  // Publishes a job of `num_tasks` (claimed one by one, or in shares) and runs the caller's part.
  void Run(int64_t num_tasks, const std::function<void(int64_t, int)>& fn, bool shares);
  void PinCaller();

  int num_threads_;
  ThreadPoolOptions options_;
  std::vector<std::thread> threads_;
  // The current job in one word, so a claim can never take a task of a newer job:
  // bits 44..63 job id, 22..43 task count, 0..21 next unclaimed task.
  std::atomic<uint64_t> state_{0};
  std::atomic<int64_t> done_{0};  // tasks of the current job finished
  // A ParallelForShares job's shares, one per worker on a cache line of its own:
  // bits 44..63 job id, 22..43 next task of the share, 0..21 its end.
  struct alignas(64) Share {
    std::atomic<uint64_t> word{0};
  };
  std::unique_ptr<Share[]> shares_;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  // Futex word the sleepers wait on (the low 32 bits of the job id) and how many sleep.
  std::atomic<uint32_t> wake_seq_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
  uint64_t job_ = 0;
  bool caller_pinned_ = false;
};

}  // namespace cpm
