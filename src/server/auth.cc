// Bearer-token check for /v1 routes.
#include "server/auth.h"

#include <cctype>

namespace cpm {

namespace {
// Compares without an early exit, so response time does not reveal a key's prefix.
bool SameSecret(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= a[i] ^ b[i % (b.empty() ? 1 : b.size())];
  return diff == 0 && !b.empty();
}
}  // namespace

bool IsAuthorized(const std::vector<std::string>& api_keys, const std::string& path,
                  const std::string& authorization_header) {
  if (api_keys.empty()) return true;
  if (path != "/v1" && path.rfind("/v1/", 0) != 0) return true;
  // vLLM's middleware: the scheme in any case ("bearer", "BEARER"), then the key.
  const std::string prefix = "bearer ";
  if (authorization_header.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(authorization_header[i])) != prefix[i]) {
      return false;
    }
  }
  const std::string token = authorization_header.substr(prefix.size());
  bool ok = false;
  for (const std::string& key : api_keys) ok |= SameSecret(token, key);
  return ok;
}

std::string UnauthorizedBody() { return R"({"error":"Unauthorized"})"; }

}  // namespace cpm
