// Time the hypervisor gave this VM's CPUs to someone else while they had work ("steal" in
// /proc/stat). A benchmark on a shared VM reads it around each measurement: stolen time makes
// a test slower, or a limit probe lower, than the machine is.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace cpm {

// The steal column of each "cpuN" line of /proc/stat's text, in clock ticks, indexed by N (0
// for a CPU without a line or a kernel without the column).
std::vector<int64_t> ParseStealTicks(std::string_view proc_stat);

// Stolen time counted since boot: the CPUs this process may run on (sched_getaffinity), in
// CPU-seconds. 0 where /proc/stat cannot be read.
double StolenCpuSeconds();

}  // namespace cpm
