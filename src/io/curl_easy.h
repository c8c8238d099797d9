// libcurl's process-wide set-up and an owning easy handle, for every module that makes HTTP
// requests (request media, hub downloads). Header only; its users link libcurl.
#pragma once

#include <curl/curl.h>

#include <memory>
#include <mutex>

namespace cpm {

// curl_global_init is not thread-safe and must run once before any handle exists: one flag for
// the whole process (an inline function's static is shared by every translation unit).
inline void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};

}  // namespace cpm
