// Runs a shell command for the CLI tests and returns its exit status and stdout.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace cpm::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
};

inline CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline std::string Cpmserve() { return std::string(CPM_BINARY_DIR) + "/cpmserve"; }

}  // namespace cpm::testing
