// For the HTTPS tests, with OpenSSL's API (no `openssl` tool needed): self-signed certificates,
// and a TLS 1.2 client whose handshake the tests inspect (session resumption, ciphers), which
// cpp-httplib's client does not show.
#pragma once

#include <string>

namespace cpm::e2e {

struct CertFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key
};

// A P-256 key and a certificate for `common_name` (127.0.0.1 and localhost its subject
// alternative names, usable as its own CA), written as `<dir>/<name>.crt` and `<dir>/<name>.key`;
// empty paths if OpenSSL failed.
CertFiles WriteSelfSignedCert(const std::string& dir, const std::string& name,
                              const std::string& common_name);

// One TLS 1.2 connection to 127.0.0.1:`port` (the server's certificate not checked) that sends
// GET /health: with `client`'s certificate if given, offering `ciphers` if not empty, resuming
// `*session` if it is set. `*session` is then the connection's session (freed by the caller's
// next call, or with FreeSession).
struct Handshake {
  bool connected = false;  // the handshake completed
  bool resumed = false;    // ... by resuming the session offered
  int status = 0;          // /health's HTTP status; 0 if no reply
};
Handshake TlsConnect(int port, const CertFiles* client, const std::string& ciphers,
                     void** session);
void FreeSession(void* session);

}  // namespace cpm::e2e
