// Process metrics from /proc/self, as prometheus_client's ProcessCollector reads them.
#include "server/process_metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "server/metrics.h"

namespace cpm {
namespace {

// The system's boot time (/proc/stat's btime), seconds since the epoch; 0 if unknown.
double BootTime() {
  std::ifstream in("/proc/stat");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("btime ", 0) == 0) return std::stod(line.substr(6));
  }
  return 0;
}

// Entries of /proc/self/fd, the one this count opens aside.
int OpenFds() {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return 0;
  int n = 0;
  while (const dirent* e = readdir(dir)) n += e->d_name[0] != '.';
  closedir(dir);
  return n - 1;
}

}  // namespace

std::string ProcessMetricsText() {
  std::ifstream in("/proc/self/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  // Fields after the command name (in parentheses, which may hold spaces): state is field 3.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 2));
  std::vector<std::string> f(1, "");  // f[i] is field i + 2: f[1] the state
  for (std::string x; rest >> x;) f.push_back(x);
  if (f.size() < 23) return "";
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  const double utime = std::stod(f[12]), stime = std::stod(f[13]);  // fields 14, 15
  const double start = std::stod(f[20]);                             // field 22
  const double vsize = std::stod(f[21]), rss = std::stod(f[22]);    // fields 23, 24
  rlimit fds{};
  getrlimit(RLIMIT_NOFILE, &fds);
  std::string out;
  const auto series = [&](const char* name, const char* type, const char* help, double v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name,
                       PythonFloat(v));
  };
  series("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", vsize);
  series("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         rss * page);
  series("process_start_time_seconds", "gauge",
         "Start time of the process since unix epoch in seconds.", BootTime() + start / ticks);
  series("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
         (utime + stime) / ticks);
  series("process_open_fds", "gauge", "Number of open file descriptors.", OpenFds());
  series("process_max_fds", "gauge", "Maximum number of open file descriptors.",
         static_cast<double>(fds.rlim_cur));
  return out;
}

}  // namespace cpm
