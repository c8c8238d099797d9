#include "base/steal_time.h"

#include <sched.h>
#include <unistd.h>

#include <charconv>
#include <fstream>
#include <sstream>
#include <string>

namespace cpm {
namespace {

// Fields of a "cpuN" line after its name: user nice system idle iowait irq softirq steal ...
constexpr int kStealField = 7;

}  // namespace

std::vector<int64_t> ParseStealTicks(std::string_view proc_stat) {
  std::vector<int64_t> steal;
  while (!proc_stat.empty()) {
    const size_t eol = proc_stat.find('\n');
    std::string_view line = proc_stat.substr(0, eol);
    proc_stat = eol == std::string_view::npos ? std::string_view() : proc_stat.substr(eol + 1);
    // "cpu0 ..." but not the aggregate "cpu  ..." line.
    if (line.size() < 4 || line.substr(0, 3) != "cpu" || line[3] < '0' || line[3] > '9') continue;
    int cpu = 0;
    const char* p = line.data() + 3;
    const char* end = line.data() + line.size();
    auto r = std::from_chars(p, end, cpu);
    if (r.ec != std::errc() || cpu < 0) continue;
    p = r.ptr;
    int64_t value = 0;
    bool found = false;
    for (int field = 0; field <= kStealField; ++field) {
      while (p < end && *p == ' ') ++p;
      r = std::from_chars(p, end, value);
      if (r.ec != std::errc()) break;
      p = r.ptr;
      found = field == kStealField;
    }
    if (!found) continue;
    if (static_cast<size_t>(cpu) >= steal.size()) steal.resize(static_cast<size_t>(cpu) + 1, 0);
    steal[static_cast<size_t>(cpu)] = value;
  }
  return steal;
}

double StolenCpuSeconds() {
  std::ifstream in("/proc/stat");
  if (!in) return 0;
  std::stringstream text;
  text << in.rdbuf();
  const std::vector<int64_t> steal = ParseStealTicks(text.str());
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const bool have_mask = sched_getaffinity(0, sizeof(mask), &mask) == 0;
  int64_t ticks = 0;
  for (size_t cpu = 0; cpu < steal.size(); ++cpu) {
    if (!have_mask || (cpu < CPU_SETSIZE && CPU_ISSET(cpu, &mask))) ticks += steal[cpu];
  }
  const long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? static_cast<double>(ticks) / static_cast<double>(hz) : 0;
}

}  // namespace cpm
