#include "multimodal/http_fetch.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>

namespace cpm {
namespace {

// curl_global_init is not thread-safe and must run once before any handle exists.
void InitCurlOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
};

struct Body {
  std::string data;
  int64_t max_bytes;
  bool too_big = false;
};

// libcurl's write callback. Returning less than `n` aborts the transfer (CURLE_WRITE_ERROR);
// no exception may escape into libcurl's C frames.
size_t Append(char* ptr, size_t size, size_t nmemb, void* user) {
  auto* body = static_cast<Body*>(user);
  const size_t n = size * nmemb;
  if (static_cast<int64_t>(body->data.size() + n) > body->max_bytes) {
    body->too_big = true;
    return 0;
  }
  try {
    body->data.append(ptr, n);
  } catch (...) {
    return 0;
  }
  return n;
}

void Configure(CURL* curl, const std::string& url, const HttpFetchLimits& limits, Body* body,
               char* error) {
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: other threads run
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, static_cast<long>(limits.timeout_s));
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);  // aiohttp's default, which vLLM uses
  // A redirect must not reach file:// or other schemes the client could not name directly.
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(limits.max_bytes));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "cpmserve");
}

std::string TooBig(const std::string& url, int64_t max_bytes) {
  return "fetching " + url + " failed: the response is larger than " + std::to_string(max_bytes) +
         " bytes";
}

}  // namespace

StatusOr<std::string> HttpGet(const std::string& url, const HttpFetchLimits& limits) {
  InitCurlOnce();
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (curl == nullptr) return Internal("fetching " + url + ": cannot create a libcurl handle");
  Body body{.data = {}, .max_bytes = limits.max_bytes};
  char error[CURL_ERROR_SIZE] = "";
  Configure(curl.get(), url, limits, &body, error);
  const CURLcode code = curl_easy_perform(curl.get());
  if (body.too_big || code == CURLE_FILESIZE_EXCEEDED) {
    return InvalidArgument(TooBig(url, limits.max_bytes));
  }
  if (code == CURLE_OPERATION_TIMEDOUT) {
    return InvalidArgument("fetching " + url + " timed out after " +
                           std::to_string(limits.timeout_s) + " s");
  }
  if (code != CURLE_OK) {
    return InvalidArgument("fetching " + url + " failed: " +
                           (error[0] ? error : curl_easy_strerror(code)));
  }
  long status = 0;
  curl_easy_getinfo(curl.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status < 200 || status > 299) {
    return InvalidArgument("fetching " + url + " failed with HTTP status " + std::to_string(status));
  }
  return std::move(body.data);
}

}  // namespace cpm
