#include "multimodal/http_fetch.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <memory>

#include "io/curl_easy.h"

namespace cpm {
namespace {

// aiohttp's default redirect limit, which vLLM uses.
constexpr long kMaxRedirects = 10;

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

void Configure(CURL* curl, const std::string& url, const HttpFetchLimits& limits,
               int64_t timeout_ms, Body* body, char* error) {
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // timeouts without SIGALRM: other threads run
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, timeout_ms)));
  // With allowed domains each redirect is followed by hand (HttpGet), its host checked first.
  const bool curl_follows = limits.follow_redirects && limits.allowed_domains.empty();
  curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, curl_follows ? 1L : 0L);
  curl_easy_setopt(curl, CURLOPT_MAXREDIRS, kMaxRedirects);
  // A redirect must not reach file:// or other schemes the client could not name directly.
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_MAXFILESIZE_LARGE, static_cast<curl_off_t>(limits.max_bytes));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Append);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, body);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "cpmserve");
}

// The URL's host, lowercased ("" when it has none or does not parse).
std::string HostOf(const std::string& url) {
  std::unique_ptr<CURLU, void (*)(CURLU*)> u(curl_url(), curl_url_cleanup);
  char* host = nullptr;
  if (!u || curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0) != CURLUE_OK ||
      curl_url_get(u.get(), CURLUPART_HOST, &host, 0) != CURLUE_OK) {
    return "";
  }
  std::string out(host);
  curl_free(host);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// vLLM's _assert_url_in_allowed_media_domains, its message with the list as Python prints it.
Status CheckAllowedDomain(const std::string& url, const std::vector<std::string>& allowed) {
  if (allowed.empty()) return OkStatus();
  const std::string host = HostOf(url);
  for (const std::string& d : allowed) {
    if (host == d) return OkStatus();
  }
  std::string list;
  for (const std::string& d : allowed) list += (list.empty() ? "'" : ", '") + d + "'";
  return InvalidArgument("The URL must be from one of the allowed domains: [" + list +
                         "]. Input URL domain: " + host);
}

std::string TooBig(const std::string& url, int64_t max_bytes) {
  return "fetching " + url + " failed: the response is larger than " + std::to_string(max_bytes) +
         " bytes";
}

// One GET of `url` (redirects followed by libcurl unless domains are checked; then a redirect
// leaves its target in `redirect` and an empty body).
StatusOr<std::string> GetOnce(const std::string& url, const HttpFetchLimits& limits,
                              int64_t timeout_ms, std::string* redirect) {
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (curl == nullptr) return Internal("fetching " + url + ": cannot create a libcurl handle");
  Body body{.data = {}, .max_bytes = limits.max_bytes};
  char error[CURL_ERROR_SIZE] = "";
  Configure(curl.get(), url, limits, timeout_ms, &body, error);
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
  char* location = nullptr;
  if (limits.follow_redirects && !limits.allowed_domains.empty() && status >= 300 && status < 400 &&
      curl_easy_getinfo(curl.get(), CURLINFO_REDIRECT_URL, &location) == CURLE_OK && location) {
    *redirect = location;  // followed by HttpGet once its host is checked
    return std::string();
  }
  if (status < 200 || status > 299) {
    return InvalidArgument("fetching " + url + " failed with HTTP status " + std::to_string(status));
  }
  return std::move(body.data);
}

}  // namespace

StatusOr<std::string> HttpGet(const std::string& first_url, const HttpFetchLimits& limits) {
  InitCurlOnce();
  std::string url = first_url;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(limits.timeout_s);
  for (long redirects = 0;; ++redirects) {
    CPM_RETURN_IF_ERROR(CheckAllowedDomain(url, limits.allowed_domains));
    const int64_t left_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                                deadline - std::chrono::steady_clock::now())
                                .count();
    if (left_ms <= 0) {
      return InvalidArgument("fetching " + first_url + " timed out after " +
                             std::to_string(limits.timeout_s) + " s");
    }
    std::string next;
    CPM_ASSIGN_OR_RETURN(std::string body, GetOnce(url, limits, left_ms, &next));
    if (next.empty()) return body;
    if (redirects == kMaxRedirects) {
      return InvalidArgument("fetching " + first_url + " failed: more than " +
                             std::to_string(kMaxRedirects) + " redirects");
    }
    url = std::move(next);
  }
}

}  // namespace cpm
