#include "server/client_probe.h"

#include <poll.h>

#include "server/socket_scan.h"

namespace cpm {

ClientProbe::ClientProbe(std::string remote_addr, int remote_port, std::string local_addr,
                         int local_port)
    : remote_addr_(std::move(remote_addr)),
      local_addr_(std::move(local_addr)),
      remote_port_(remote_port),
      local_port_(local_port) {}

int ClientProbe::FindSocket() const {
  return FindOwnSocket([&](int fd) {
    std::string addr;
    int port = 0;
    return SocketEnd(fd, /*peer=*/true, &addr, &port) && port == remote_port_ &&
           addr == remote_addr_ && SocketEnd(fd, /*peer=*/false, &addr, &port) &&
           port == local_port_ && addr == local_addr_;
  });
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
