#include "base/cpu_topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "base/thread_pool.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;

TEST(CpuTopology, ParsesKernelCpuLists) {
  EXPECT_EQ(ParseCpuList("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(ParseCpuList("5"), (std::vector<int>{5}));
  EXPECT_EQ(ParseCpuList("64,0"), (std::vector<int>{0, 64}));
  for (const char* bad : {"", "\n", "a", "1-", "3-1", "1,", ",1", "1;2", "-1", "1--2"}) {
    EXPECT_EQ(ParseCpuList(bad), std::vector<int>{}) << bad;
  }
}

// A sysfs cpu directory: each CPU's topology/thread_siblings_list (none for a CPU not in it).
class FakeSysfs {
 public:
  explicit FakeSysfs(const std::map<int, std::string>& siblings)
      : dir_(fs::temp_directory_path() /
             ("cpm_topology_" + std::to_string(getpid()) + "_" + std::to_string(next_++))) {
    for (const auto& [cpu, list] : siblings) {
      const fs::path topo = dir_ / ("cpu" + std::to_string(cpu)) / "topology";
      fs::create_directories(topo);
      std::ofstream(topo / "thread_siblings_list") << list << "\n";
    }
  }
  ~FakeSysfs() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }

 private:
  static inline int next_ = 0;
  fs::path dir_;
};

TEST(CpuTopology, OneCpuPerCoreWhereSiblingsAreNumberedApart) {
  // A 4-core, 8-thread part as most x86 servers number it: CPU c and c + 4 share core c.
  FakeSysfs sys({{0, "0,4"}, {1, "1,5"}, {2, "2,6"}, {3, "3,7"},
                 {4, "0,4"}, {5, "1,5"}, {6, "2,6"}, {7, "3,7"}});
  const CpuTopology t = ReadCpuTopology({0, 1, 2, 3, 4, 5, 6, 7}, sys.path());
  EXPECT_EQ(t.core_cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(t.sibling_cpus, (std::vector<int>{4, 5, 6, 7}));
}

TEST(CpuTopology, OneCpuPerCoreWhereSiblingsAreAdjacent) {
  // CPUs 2c and 2c + 1 share core c (as some firmware numbers them).
  FakeSysfs sys({{0, "0-1"}, {1, "0-1"}, {2, "2-3"}, {3, "2-3"}, {4, "4-5"}, {5, "4-5"}});
  const CpuTopology t = ReadCpuTopology({5, 4, 3, 2, 1, 0}, sys.path());
  EXPECT_EQ(t.allowed, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(t.core_cpus, (std::vector<int>{0, 2, 4}));
  EXPECT_EQ(t.sibling_cpus, (std::vector<int>{1, 3, 5}));
}

TEST(CpuTopology, AnAffinityMaskThatLeavesOutASiblingKeepsTheOther) {
  // taskset -c 1,2,3: core 0 is represented by CPU 1 alone, core 1 by CPU 2 (3 its sibling).
  FakeSysfs sys({{0, "0-1"}, {1, "0-1"}, {2, "2-3"}, {3, "2-3"}});
  const CpuTopology t = ReadCpuTopology({1, 2, 3}, sys.path());
  EXPECT_EQ(t.core_cpus, (std::vector<int>{1, 2}));
  EXPECT_EQ(t.sibling_cpus, (std::vector<int>{3}));
}

TEST(CpuTopology, WithoutSysfsEveryCpuIsACore) {
  // A container that hides the topology (or a garbled file) keeps one thread per CPU.
  FakeSysfs sys({{1, "garbage"}});
  const CpuTopology t = ReadCpuTopology({0, 1, 2}, sys.path());
  EXPECT_EQ(t.core_cpus, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(t.sibling_cpus.empty());
}

TEST(CpuTopology, ThisMachineHasACoreForEveryDefaultThread) {
  const CpuTopology& t = MachineCpuTopology();
  ASSERT_FALSE(t.allowed.empty());
  EXPECT_EQ(t.core_cpus.size() + t.sibling_cpus.size(), t.allowed.size());
  EXPECT_EQ(ThreadPool::DefaultThreads(), static_cast<int>(t.core_cpus.size()));
  EXPECT_EQ(ThreadPool(0).num_threads(), ThreadPool::DefaultThreads());
}

}  // namespace
}  // namespace cpm
