// Tells whether the client of an HTTP request has hung up, while its handler (or its stream's
// content provider, on the same connection thread) waits for the engine. cpp-httplib 0.11 gives
// a handler neither its socket nor a "connection closed" hook (a stream notices only a failed
// write, and may write nothing for long; a plain reply writes only at the end), so the
// probe finds the connection's socket by its address pair (getpeername/getsockname over the
// process's open sockets; the 4-tuple is unique, and the socket cannot close while its
// handler runs) and polls it for a peer hang-up (POLLRDHUP), which does not consume data.
#pragma once

#include <chrono>
#include <string>

namespace cpm {

class ClientProbe {
 public:
  ClientProbe(std::string remote_addr, int remote_port, std::string local_addr, int local_port);
  // True once the peer has closed or reset the connection. Looks at most every 50 ms.
  bool Gone();

 private:
  int FindSocket() const;  // -1 if not found

  std::string remote_addr_, local_addr_;
  int remote_port_, local_port_;
  int fd_ = -2;  // -2: not looked up yet; -1: not found (never reports gone)
  bool gone_ = false;
  std::chrono::steady_clock::time_point next_check_{};
};

}  // namespace cpm
