// Finding one of this process's sockets when a library keeps the descriptor to itself
// (cpp-httplib 0.11 exposes neither its listening socket nor a connection's): walks
// /proc/self/fd and returns the first descriptor `match` accepts.
#pragma once

#include <functional>
#include <string>

namespace cpm {

// The first open descriptor for which `match(fd)` is true, or -1.
int FindOwnSocket(const std::function<bool(int fd)>& match);

// The numeric address and port of a socket's local (getsockname) or peer (getpeername) end,
// spelled as httplib spells Request::local_addr / remote_addr. False if `fd` is not an
// IPv4/IPv6 socket.
bool SocketEnd(int fd, bool peer, std::string* addr, int* port);

}  // namespace cpm
