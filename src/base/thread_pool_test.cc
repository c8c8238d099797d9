#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace cpm {
namespace {

TEST(ThreadPoolTest, EveryTaskRunsExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      std::atomic<int> bad_worker{0};
      pool.ParallelFor(n, [&](int64_t t, int w) {
        hits[t]++;
        if (w < 0 || w >= threads) bad_worker++;
      });
      for (int64_t t = 0; t < n; ++t) EXPECT_EQ(hits[t].load(), 1) << threads << " " << t;
      EXPECT_EQ(bad_worker.load(), 0);
    }
  }
}

TEST(ThreadPoolTest, RangesCoverExactly) {
  ThreadPool pool(3);
  for (int64_t n : {1, 5, 16, 1003}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelForRange(n, 4, [&](int64_t b, int64_t e, int) {
      EXPECT_EQ(b % 4, 0);
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1);
  }
}

TEST(ThreadPoolTest, ManyBackToBackJobs) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 20000; ++i) pool.ParallelFor(2, [&](int64_t t, int) { sum += t + 1; });
  EXPECT_EQ(sum.load(), 20000 * 3);
}

TEST(ThreadPoolTest, WakesSleepingWorkers) {
  // Jobs spaced past the spin window exercise the sleep / futex wake-up path.
  ThreadPool pool(ThreadPoolOptions{.num_threads = 3, .spin_us = 10});
  std::atomic<int64_t> sum{0};
  std::atomic<int> other_workers{0};
  for (int i = 0; i < 30; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    pool.ParallelFor(64, [&](int64_t t, int w) {
      sum += t;
      if (w != 0) other_workers++;
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    });
  }
  EXPECT_EQ(sum.load(), 30 * 63 * 64 / 2);
  EXPECT_GT(other_workers.load(), 0) << "no sleeping worker ever woke up";
}

// before_sleep runs on each worker that ran tasks before it sleeps, never on the caller: the
// kernels hand back AMX tiles there.
thread_local bool t_holds_state = false;

TEST(ThreadPoolTest, BeforeSleepRunsOnWorkersBeforeTheySleep) {
  std::atomic<int> released{0}, on_caller{0};
  const std::thread::id caller = std::this_thread::get_id();
  ThreadPool pool(ThreadPoolOptions{.num_threads = 3, .spin_us = 10, .before_sleep = [&] {
                                      if (std::this_thread::get_id() == caller) on_caller++;
                                      if (t_holds_state) released++;
                                      t_holds_state = false;
                                    }});
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> holders{0};
    pool.ParallelFor(64, [&](int64_t, int w) {
      if (w != 0 && !t_holds_state) holders++;
      if (w != 0) t_holds_state = true;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    t_holds_state = false;  // the caller's, set by no task
    // Each worker that took a task sleeps within its 10 µs spin and hands the state back.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (released.load() < holders.load() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(released.load(), holders.load()) << "round " << round;
    released = 0;
  }
  EXPECT_EQ(on_caller.load(), 0);
}

TEST(ThreadPoolTest, PinnedPoolRunsEveryTask) {
  ThreadPool pool(ThreadPoolOptions{.num_threads = 2, .pin_threads = true});
  std::vector<std::atomic<int>> hits(500);
  pool.ParallelFor(500, [&](int64_t t, int) { hits[t]++; });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, VaryingTaskCountsNeverMixJobs) {
  // A worker still finishing one job must never claim tasks of the next, whose count differs.
  ThreadPool pool(4);
  for (int i = 0; i < 3000; ++i) {
    const int64_t n = 1 + (i * 7919) % 37;
    std::vector<int> hits(n, 0);
    pool.ParallelFor(n, [&](int64_t t, int) { hits[t]++; });
    for (int64_t t = 0; t < n; ++t) ASSERT_EQ(hits[t], 1) << "job " << i << " task " << t;
  }
}

TEST(ThreadPoolTest, SharesRunEveryTaskExactlyOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelForShares(n, [&](int64_t t, int) { hits[t]++; });
      for (int64_t t = 0; t < n; ++t) EXPECT_EQ(hits[t].load(), 1) << threads << " " << t;
    }
  }
}

TEST(ThreadPoolTest, SharesRunInOrderAndTheirEndsAreStolen) {
  // Worker w runs its share [w·n/T, (w+1)·n/T) from its start in order, and others' tasks only
  // from their ends, backwards. The caller's tasks are slow, so the other worker, done with its
  // own share, must take some of the caller's.
  constexpr int kThreads = 2;
  constexpr int64_t kTasks = 40;
  ThreadPool pool(kThreads);
  std::vector<std::vector<int64_t>> ran(kThreads);
  pool.ParallelForShares(kTasks, [&](int64_t t, int w) {
    ran[w].push_back(t);  // each worker appends to its own list only
    if (w == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  });
  int64_t total = 0;
  for (int w = 0; w < kThreads; ++w) {
    const int64_t begin = kTasks * w / kThreads, end = kTasks * (w + 1) / kThreads;
    int64_t own = begin;            // the next own task expected
    int64_t stolen_below = kTasks;  // stolen tasks of one share come from its end, downwards
    for (int64_t t : ran[w]) {
      if (t >= begin && t < end && t == own) {
        ++own;
      } else {
        EXPECT_TRUE(t < begin || t >= end) << "worker " << w << " ran own task " << t << " late";
        EXPECT_LT(t, stolen_below) << "worker " << w << " stole " << t << " out of order";
        stolen_below = t;
      }
    }
    total += static_cast<int64_t>(ran[w].size());
  }
  EXPECT_EQ(total, kTasks);
  const auto& worker1 = ran[1];
  EXPECT_TRUE(std::any_of(worker1.begin(), worker1.end(), [](int64_t t) { return t < kTasks / 2; }))
      << "worker 1 never took a task of the slow caller's share";
}

TEST(ThreadPoolTest, SharesAndSingleClaimsNeverMixJobs) {
  // Jobs of both kinds back to back: a worker late from one must never claim in the next.
  ThreadPool pool(4);
  for (int i = 0; i < 3000; ++i) {
    const int64_t n = 1 + (i * 7919) % 37;
    std::vector<int> hits(n, 0);
    const auto fn = [&](int64_t t, int) { hits[t]++; };
    if (i % 3 == 0) pool.ParallelFor(n, fn);
    else pool.ParallelForShares(n, fn);
    for (int64_t t = 0; t < n; ++t) ASSERT_EQ(hits[t], 1) << "job " << i << " task " << t;
  }
}

}  // namespace
}  // namespace cpm
