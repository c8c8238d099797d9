// HTTPS as `vllm serve` offers it through uvicorn: --ssl-certfile / --ssl-keyfile (PEM), client
// certificates checked against --ssl-ca-certs as --ssl-cert-reqs asks (Python's ssl.CERT_NONE,
// CERT_OPTIONAL, CERT_REQUIRED), --ssl-ciphers (OpenSSL's cipher list for TLS 1.2, Python's
// default list when not given), and
// --enable-ssl-refresh (a renewed certificate and key are served from the next handshake on,
// without a restart). Served by cpp-httplib's SSLServer (Debian's is built with OpenSSL) over
// an OpenSSL context set up here.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"

namespace httplib {
class Server;
}

namespace cpm {

struct TlsOptions {
  std::string certfile;   // PEM certificate chain, the server's first
  std::string keyfile;    // PEM private key; "" when the certificate file holds it
  std::string ca_certs;   // PEM CA certificates that client certificates are checked against
  int64_t cert_reqs = 0;  // 0: no client certificate asked; 1: checked if sent; 2: required
  std::string ciphers;    // "": Python's default list (what uvicorn serves with)
  bool refresh = false;   // reload the certificate and key when their files change

  bool enabled() const { return !certfile.empty() || !keyfile.empty(); }
};

// The flags' combinations (no file is read): a key file needs a certificate file (uvicorn's
// rule) and --ssl-cert-reqs is 0, 1 or 2.
Status ValidateTlsOptions(const TlsOptions& tls);

// The TLS flags given without a certificate (--ssl-ca-certs, ...): vLLM serves plain HTTP and
// ignores them, so cpmserve names them in a log line and does the same.
std::vector<std::string> TlsFlagsWithoutHttps(const TlsOptions& tls);

// An HTTPS server with the certificate, key, CA certificates and ciphers loaded; an unreadable
// or mismatched file is an error naming its flag and path, with OpenSSL's reason. With
// `refresh`, a thread looks at the files (times, size, inode) every `refresh_poll_ms` and swaps
// in the new pair once it loads (a half-written pair is kept out until it does); the thread
// ends with the server.
StatusOr<std::unique_ptr<httplib::Server>> MakeTlsServer(const TlsOptions& tls,
                                                         int refresh_poll_ms = 1000);

}  // namespace cpm
