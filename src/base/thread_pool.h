// ThreadPool: persistent compute workers for data-parallel kernels. No thread is created per op.
// The calling thread takes part as worker 0, so a pool of N threads starts N-1 workers.
// Not a singleton: the engine owns one and passes it explicitly. Only one thread may call
// ParallelFor at a time (the engine thread); it is not reentrant.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cpm {

class ThreadPool {
 public:
  // `num_threads` <= 0 means one per available CPU (sched_getaffinity).
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // Runs fn(task, worker) for task in [0, num_tasks), spread dynamically over the workers;
  // `worker` in [0, num_threads) selects per-thread scratch. Returns when all tasks are done.
  void ParallelFor(int64_t num_tasks, const std::function<void(int64_t task, int worker)>& fn);

  // Splits [0, n) into about `num_threads` contiguous ranges of multiples of `grain`:
  // fn(begin, end, worker).
  void ParallelForRange(int64_t n, int64_t grain,
                        const std::function<void(int64_t begin, int64_t end, int worker)>& fn);

  // Number of CPUs this process may run on.
  static int AvailableCpus();

 private:
  void WorkerLoop(int worker);
  void RunTasks(int worker);

  int num_threads_;
  std::vector<std::thread> threads_;
  // A job is published by bumping `epoch_`; workers spin briefly, then sleep on `cv_`.
  std::atomic<uint64_t> epoch_{0};
  std::atomic<int64_t> next_task_{0};
  std::atomic<int> pending_workers_{0};
  int64_t num_tasks_ = 0;
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stop_{false};
};

}  // namespace cpm
