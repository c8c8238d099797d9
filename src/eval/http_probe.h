// Minimal loopback HTTP calls for the validate gates (cpp-httplib's client underneath, kept out
// of the headers so only one translation unit compiles it).
#pragma once

#include <string>

namespace cpm {

struct HttpReply {
  int status = 0;     // 0: no HTTP answer (connection refused, timeout)
  std::string body;
  std::string error;  // why there was no answer
  double seconds = 0;  // wall time of the call
};

// A non-empty `bearer` is sent as `Authorization: Bearer <bearer>` (serve's --api-key).
HttpReply HttpGet(int port, const std::string& path, double timeout_seconds,
                  const std::string& bearer = "");
HttpReply HttpPostJson(int port, const std::string& path, const std::string& json_body,
                       double timeout_seconds, const std::string& bearer = "");

}  // namespace cpm
