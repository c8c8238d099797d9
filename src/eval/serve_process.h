// A `cpmserve serve` child process for the validate gates: spawned from this binary's own path
// with its output in a log file, polled on /health until ready, stopped with SIGTERM (then
// SIGKILL). The destructor always stops it, so a failing gate never leaks a server.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace cpm {

// A TCP port on 127.0.0.1 that was free a moment ago (bind to 0, read it, close).
StatusOr<int> FindFreePort();

// This executable's path (/proc/self/exe), for spawning subcommands of the same build.
StatusOr<std::string> SelfExecutable();

class ServeProcess {
 public:
  ServeProcess() = default;
  ~ServeProcess();
  ServeProcess(const ServeProcess&) = delete;
  ServeProcess& operator=(const ServeProcess&) = delete;

  // Runs `exe args...` with stdout and stderr appended to `log_path`.
  Status Start(const std::string& exe, const std::vector<std::string>& args,
               const std::string& log_path);

  // Polls GET 127.0.0.1:`port`/health until 200. Fails early, with the exit status and the log's
  // last lines, when the process ends first; kDeadlineExceeded-like kUnavailable on timeout.
  Status WaitReady(int port, double timeout_seconds);

  // SIGTERM, up to `grace_seconds` for a clean exit, then SIGKILL. Returns the exit code
  // (128 + signal when killed); nullopt when nothing was running.
  std::optional<int> Stop(double grace_seconds = 15.0);

  bool running();  // reaps a finished child
  std::optional<int> exit_code() const { return exit_code_; }
  const std::string& log_path() const { return log_path_; }
  std::string LogText() const;
  // The last `n` lines of the log, for error messages.
  std::string LogTail(int n) const;

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
  std::string log_path_;
};

}  // namespace cpm
