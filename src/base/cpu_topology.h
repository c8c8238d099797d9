// Which CPUs the compute threads use by default: one per physical core of the CPUs this process
// may run on. The SMT siblings of a core share its vector units and caches, so a second
// compute thread there adds no bf16/f32 throughput to the compute-bound prefill and only splits
// the memory-bound decode's streams finer; it would also take the sibling from the HTTP and
// tokenizer threads. llama.cpp's default thread count is the physical cores too, and vLLM's CPU
// backend binds one OpenMP thread per physical core.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cpm {

// A kernel CPU list ("0-3,8,10-11", as in sysfs' *_list files; a trailing newline allowed) in
// ascending order; empty where the text is not such a list.
std::vector<int> ParseCpuList(std::string_view text);

struct CpuTopology {
  std::vector<int> allowed;  // the CPUs this process may run on, ascending
  // One CPU per physical core among `allowed`: the lowest allowed CPU of each core's SMT
  // siblings, in ascending order. Then the other allowed CPUs (the siblings), ascending: the
  // order in which pinned compute threads take CPUs.
  std::vector<int> core_cpus;
  std::vector<int> sibling_cpus;
};

// The topology of `allowed` as `cpu_dir` (sysfs' /sys/devices/system/cpu) describes it: each
// CPU's topology/thread_siblings_list. A CPU whose file is missing or unreadable counts as a
// core of its own (containers that hide sysfs then get one thread per allowed CPU, as before).
CpuTopology ReadCpuTopology(std::vector<int> allowed,
                            const std::string& cpu_dir = "/sys/devices/system/cpu");

// The CPUs this process may run on (sched_getaffinity), ascending; {0} where that fails.
std::vector<int> AllowedCpus();

// ReadCpuTopology(AllowedCpus()) of this machine, read once.
const CpuTopology& MachineCpuTopology();

}  // namespace cpm
