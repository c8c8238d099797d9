// Runs `cpmserve serve` as a child process for end-to-end tests: starts it on a free port
// (--port 0, the port read back from its log), waits for /health, sends signals, and collects
// its exit status and log.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cpm {

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();  // SIGKILL if still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts `binary serve model_dir args...` with stderr+stdout into a log file. Extra
  // environment entries ("NAME=value") are added to the child's.
  bool Start(const std::string& binary, const std::string& model_dir,
             const std::vector<std::string>& args, const std::vector<std::string>& env = {});
  // Waits until /health answers 200 (true) or the process exits / time runs out (false).
  bool WaitReady(double timeout_s = 60);
  // Sends `sig` and waits for the exit; returns the exit code (128+signal if killed, -1 on
  // timeout).
  int Stop(int sig, double timeout_s = 30);
  // Waits for the process to exit on its own; exit code or -1 on timeout.
  int Wait(double timeout_s);
  std::string Log() const;
  int port() const { return port_; }
  pid_t pid() const { return pid_; }

 private:
  int ParsePort() const;

  pid_t pid_ = -1;
  int port_ = 0;
  std::string log_path_;
  int exit_code_ = -1;
};

}  // namespace cpm
