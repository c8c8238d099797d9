// Child-process management for the e2e tests.
#include "e2e/server_process.h"

#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

namespace cpm {

namespace {
double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && exit_code_ < 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!log_path_.empty()) std::remove(log_path_.c_str());
}

bool ServerProcess::Start(const std::string& binary, const std::string& model_dir,
                          const std::vector<std::string>& args,
                          const std::vector<std::string>& env) {
  char tmpl[] = "/tmp/cpmserve_e2e_log_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return false;
  log_path_ = tmpl;
  std::vector<std::string> argv_s = {binary, "serve", model_dir};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  pid_ = fork();
  if (pid_ < 0) return false;
  if (pid_ == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    for (const std::string& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> argv;
    for (std::string& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(fd);
  return true;
}

std::string ServerProcess::Log() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ServerProcess::ParsePort() const {
  static const std::regex re(R"(listening on https?://[^ ]*:(\d+))");
  std::smatch m;
  const std::string log = Log();
  if (std::regex_search(log, m, re)) return std::stoi(m[1]);
  return 0;
}

int ServerProcess::Wait(double timeout_s) {
  if (exit_code_ >= 0) return exit_code_;
  const double end = Now() + timeout_s;
  while (Now() < end) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

bool ServerProcess::WaitReady(double timeout_s) {
  const double end = Now() + timeout_s;
  while (Now() < end) {
    if (Wait(0) >= 0) return false;
    if (port_ == 0) port_ = ParsePort();
    if (port_ != 0) {
      // An HTTPS server (its log says so) is asked over TLS, its certificate not checked.
      const bool https = Log().find("listening on https://") != std::string::npos;
      httplib::Client cli((https ? "https://127.0.0.1:" : "http://127.0.0.1:") +
                          std::to_string(port_));
      cli.enable_server_certificate_verification(false);
      cli.set_connection_timeout(1);
      auto res = cli.Get("/health");
      if (res && res->status == 200) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

int ServerProcess::Stop(int sig, double timeout_s) {
  if (exit_code_ >= 0) return exit_code_;
  kill(pid_, sig);
  return Wait(timeout_s);
}

}  // namespace cpm
