// Small helpers shared by the e2e tests: JSON posts, SSE streams, metric lookup, and the end
// of a suite's shared server.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <csignal>

#include <functional>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "e2e/server_process.h"

namespace cpm::e2e {

using Json = nlohmann::ordered_json;

// Ends a suite's shared server: SIGTERM must make it exit cleanly (0); the process object is
// deleted and the pointer cleared.
inline void StopSuiteServer(ServerProcess*& server) {
  if (server != nullptr) {
    EXPECT_EQ(server->Stop(SIGTERM), 0) << server->Log();
  }
  delete server;
  server = nullptr;
}

struct Reply {
  int status = 0;
  std::string body;
  Json json() const { return Json::parse(body, nullptr, false); }
};

inline Reply Post(int port, const std::string& path, const std::string& body,
                  const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120);
  auto r = cli.Post(path, headers, body, "application/json");
  if (!r) return {0, "httplib error: " + httplib::to_string(r.error())};
  return {r->status, r->body};
}

// Sends `request` as it is on a fresh connection and returns what comes back within
// `timeout_s` seconds (the bytes so far if the server is slower), for requests no client
// library would send (no Content-Length on a POST, ...).
inline std::string RawHttp(int port, const std::string& request, int timeout_s) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return {};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{timeout_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::send(fd, request.data(), request.size(), 0) == static_cast<ssize_t>(request.size())) {
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
      out.append(buf, static_cast<size_t>(n));
      if (out.find("\r\n\r\n") != std::string::npos) break;  // the head is enough
    }
  }
  ::close(fd);
  return out;
}

inline Reply Get(int port, const std::string& path, const httplib::Headers& headers = {}) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60);
  auto r = cli.Get(path, headers);
  if (!r) return {};
  return {r->status, r->body};
}

// Posts and reads the SSE body as it arrives; `on_data` sees all text so far and returns
// false to hang up (a client disconnect).
inline Reply PostStream(int port, const std::string& path, const std::string& body,
                        const std::function<bool(const std::string&)>& on_data = nullptr) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string all;
  req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
    all.append(d, n);
    return on_data ? on_data(all) : true;
  };
  httplib::Response res;
  httplib::Error err;
  cli.send(req, res, err);
  return {res.status, all};
}

// The `data:` payloads of an SSE body; `framing_ok` is false on any malformed event.
inline std::vector<std::string> SseData(const std::string& sse, bool* framing_ok) {
  std::vector<std::string> out;
  *framing_ok = true;
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    if (end == std::string::npos) {
      *framing_ok = false;
      break;
    }
    const std::string line = sse.substr(pos, end - pos);
    if (line.rfind("data: ", 0) != 0 || line.find('\n') != std::string::npos) *framing_ok = false;
    out.push_back(line.substr(6));
    pos = end + 2;
  }
  return out;
}

// Value of the first sample of `metric` whose line contains `label` ("" for any).
inline double Metric(const std::string& text, const std::string& metric,
                     const std::string& label = "") {
  size_t pos = 0;
  while ((pos = text.find(metric, pos)) != std::string::npos) {
    const size_t eol = text.find('\n', pos);
    const std::string line = text.substr(pos, eol - pos);
    const bool line_start = pos == 0 || text[pos - 1] == '\n';  // not inside # HELP / # TYPE
    pos = eol;
    if (line_start && line.size() > metric.size() && (line[metric.size()] == '{' || line[metric.size()] == ' ') &&
        line.find(label) != std::string::npos) {
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return -1;
}

// The substring of `s` from about `at` covering `chars` whole UTF-8 code points.
inline std::string Utf8Piece(const std::string& s, size_t at, int chars) {
  auto lead = [&](size_t i) { return (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80; };
  while (at < s.size() && !lead(at)) ++at;
  size_t end = at;
  for (int c = 0; c < chars && end < s.size(); ++c) {
    ++end;
    while (end < s.size() && !lead(end)) ++end;
  }
  return s.substr(at, end - at);
}

}  // namespace cpm::e2e
