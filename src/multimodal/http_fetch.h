// HTTP(S) GET of a whole body into memory through libcurl, with the limits a server needs when
// clients name the URL: a total timeout, a size cap enforced while downloading, redirects
// followed but only to http/https.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace cpm {

struct HttpFetchLimits {
  int64_t timeout_s = 5;
  int64_t max_bytes = 64 << 20;
  // vLLM's --allowed-media-domains: when not empty, the URL's host and every redirect's must
  // be one of these (exact, case-insensitive names).
  std::vector<std::string> allowed_domains;
  // vLLM's VLLM_MEDIA_URL_ALLOW_REDIRECTS: when false a 3xx answer is a failed fetch.
  bool follow_redirects = true;
};

// The body of a 2xx response. Anything else (no connection, timeout, non-2xx status, body over
// max_bytes, a host outside allowed_domains) is InvalidArgument naming the URL and the cause.
// timeout_s covers the whole fetch, every redirect included. Thread-safe.
StatusOr<std::string> HttpGet(const std::string& url, const HttpFetchLimits& limits);

}  // namespace cpm
