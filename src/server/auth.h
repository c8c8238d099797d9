// --api-key: requests to /v1/* must carry `Authorization: Bearer <key>` for one of the keys;
// everything else (/health, /metrics, /tokenize, ...) stays open, as in vLLM.
#pragma once

#include <string>
#include <vector>

namespace cpm {

// True when `path` needs no key, no keys are configured, or the header names a valid key.
bool IsAuthorized(const std::vector<std::string>& api_keys, const std::string& path,
                  const std::string& authorization_header);

// The 401 body vLLM's middleware sends.
std::string UnauthorizedBody();

}  // namespace cpm
