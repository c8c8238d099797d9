#include "base/cpu_topology.h"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <set>
#include <sstream>

namespace cpm {
namespace {

// Reads a non-negative decimal at the front of `s`, consuming it; false where there is none.
bool TakeNumber(std::string_view* s, int* out) {
  const auto r = std::from_chars(s->data(), s->data() + s->size(), *out);
  if (r.ec != std::errc() || *out < 0) return false;
  s->remove_prefix(static_cast<size_t>(r.ptr - s->data()));
  return true;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::vector<int> ParseCpuList(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::set<int> cpus;
  while (!text.empty()) {
    int first = 0, last = 0;
    if (!TakeNumber(&text, &first)) return {};
    last = first;
    if (!text.empty() && text.front() == '-') {
      text.remove_prefix(1);
      if (!TakeNumber(&text, &last) || last < first) return {};
    }
    for (int c = first; c <= last; ++c) cpus.insert(c);
    if (text.empty()) break;
    if (text.front() != ',') return {};
    text.remove_prefix(1);
    if (text.empty()) return {};  // a trailing comma
  }
  return {cpus.begin(), cpus.end()};
}

CpuTopology ReadCpuTopology(std::vector<int> allowed, const std::string& cpu_dir) {
  std::sort(allowed.begin(), allowed.end());
  allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
  CpuTopology t;
  t.allowed = allowed;
  const std::set<int> allowed_set(allowed.begin(), allowed.end());
  for (const int cpu : allowed) {
    const std::vector<int> siblings = ParseCpuList(
        ReadFile(cpu_dir + "/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list"));
    // The core's representative: its lowest allowed sibling (this CPU itself where the file
    // says nothing, or lists no allowed sibling below it).
    int first = cpu;
    for (const int s : siblings) {
      if (allowed_set.count(s) != 0) {
        first = std::min(first, s);
        break;  // ascending: the first allowed one is the lowest
      }
    }
    (first == cpu ? t.core_cpus : t.sibling_cpus).push_back(cpu);
  }
  return t;
}

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {0};
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus.empty() ? std::vector<int>{0} : cpus;
}

const CpuTopology& MachineCpuTopology() {
  static const CpuTopology topology = ReadCpuTopology(AllowedCpus());
  return topology;
}

}  // namespace cpm
