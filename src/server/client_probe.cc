#include "server/client_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <cstring>

namespace cpm {
namespace {

// The numeric address and port of a socket address, in the form httplib reports them.
bool Describe(const sockaddr_storage& a, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof(buf));
    *port = ntohs(in->sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof(buf));
    *port = ntohs(in6->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

bool Matches(int fd, int (*get)(int, sockaddr*, socklen_t*), const std::string& addr, int port) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (get(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return false;
  std::string s;
  int p = 0;
  return Describe(a, &s, &p) && p == port && s == addr;
}

}  // namespace

ClientProbe::ClientProbe(std::string remote_addr, int remote_port, std::string local_addr,
                         int local_port)
    : remote_addr_(std::move(remote_addr)),
      local_addr_(std::move(local_addr)),
      remote_port_(remote_port),
      local_port_(local_port) {}

int ClientProbe::FindSocket() const {
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return -1;
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0') continue;
    if (Matches(static_cast<int>(fd), getpeername, remote_addr_, remote_port_) &&
        Matches(static_cast<int>(fd), getsockname, local_addr_, local_port_)) {
      found = static_cast<int>(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

bool ClientProbe::Gone() {
  if (gone_) return true;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check_) return false;
  next_check_ = now + std::chrono::milliseconds(50);
  if (fd_ == -2) fd_ = FindSocket();
  if (fd_ < 0) return false;
  pollfd p{fd_, POLLRDHUP, 0};
  gone_ = poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
  return gone_;
}

}  // namespace cpm
