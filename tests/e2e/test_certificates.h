// Self-signed certificates for the HTTPS tests, made with OpenSSL's API (no `openssl` tool
// needed): a P-256 key and a certificate for `common_name` (with 127.0.0.1 and localhost as its
// subject alternative names, usable as its own CA), written as PEM files.
#pragma once

#include <string>

namespace cpm::e2e {

struct CertFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key
};

// Writes `<dir>/<name>.crt` and `<dir>/<name>.key`; empty paths if OpenSSL failed.
CertFiles WriteSelfSignedCert(const std::string& dir, const std::string& name,
                              const std::string& common_name);

}  // namespace cpm::e2e
