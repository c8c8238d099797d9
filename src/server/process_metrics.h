// The process collector's series that every Prometheus Python client exports first (and so
// vLLM's /metrics): memory, CPU time, start time and file descriptors of this process, read
// from /proc, for the memory, restart and fd alerts written against vLLM pods.
#pragma once

#include <string>

namespace cpm {

// process_virtual_memory_bytes, process_resident_memory_bytes, process_start_time_seconds,
// process_cpu_seconds_total, process_open_fds and process_max_fds in the exposition format;
// "" where /proc cannot be read (not Linux).
std::string ProcessMetricsText();

}  // namespace cpm
