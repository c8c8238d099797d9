#include "e2e/tls_test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

namespace cpm::e2e {
namespace {

bool AddExtension(X509* cert, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (!ext) return false;
  const bool ok = X509_add_ext(cert, ext, -1) == 1;
  X509_EXTENSION_free(ext);
  return ok;
}

template <typename T, typename Write>
bool WritePem(const std::string& path, T* object, Write write) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const bool ok = write(f, object) == 1;
  return std::fclose(f) == 0 && ok;
}

}  // namespace

CertFiles WriteSelfSignedCert(const std::string& dir, const std::string& name,
                              const std::string& common_name) {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(EVP_EC_gen("P-256"), EVP_PKEY_free);
  std::unique_ptr<X509, decltype(&X509_free)> cert(X509_new(), X509_free);
  if (!key || !cert) return {};
  X509* x = cert.get();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
  X509_gmtime_adj(X509_getm_notBefore(x), -3600);
  X509_gmtime_adj(X509_getm_notAfter(x), 24 * 3600);
  X509_set_pubkey(x, key.get());
  X509_NAME* subject = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(common_name.c_str()), -1, -1,
                             0);
  X509_set_issuer_name(x, subject);
  if (!AddExtension(x, NID_basic_constraints, "critical,CA:TRUE") ||
      !AddExtension(x, NID_key_usage, "critical,digitalSignature,keyCertSign") ||
      !AddExtension(x, NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost") ||
      X509_sign(x, key.get(), EVP_sha256()) == 0) {
    return {};
  }
  const CertFiles files{dir + "/" + name + ".crt", dir + "/" + name + ".key"};
  const bool ok =
      WritePem(files.cert, x, [](FILE* f, X509* c) { return PEM_write_X509(f, c); }) &&
      WritePem(files.key, key.get(), [](FILE* f, EVP_PKEY* k) {
        return PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr);
      });
  return ok ? files : CertFiles{};
}

Handshake TlsConnect(int port, const CertFiles* client, const std::string& ciphers,
                     void** session) {
  Handshake out;
  std::unique_ptr<SSL_CTX, decltype(&SSL_CTX_free)> ctx(SSL_CTX_new(TLS_client_method()),
                                                        SSL_CTX_free);
  if (!ctx) return out;
  SSL_CTX_set_max_proto_version(ctx.get(), TLS1_2_VERSION);
  if (!ciphers.empty() && SSL_CTX_set_cipher_list(ctx.get(), ciphers.c_str()) != 1) return out;
  if (client && (SSL_CTX_use_certificate_file(ctx.get(), client->cert.c_str(), SSL_FILETYPE_PEM) != 1 ||
                 SSL_CTX_use_PrivateKey_file(ctx.get(), client->key.c_str(), SSL_FILETYPE_PEM) != 1)) {
    return out;
  }
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    if (fd >= 0) close(fd);
    return out;
  }
  SSL* ssl = SSL_new(ctx.get());
  SSL_set_fd(ssl, fd);
  if (*session) SSL_set_session(ssl, static_cast<SSL_SESSION*>(*session));
  if (SSL_connect(ssl) == 1) {
    out.connected = true;
    out.resumed = SSL_session_reused(ssl) == 1;
    const std::string request = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
    if (SSL_write(ssl, request.data(), static_cast<int>(request.size())) > 0) {
      char reply[256] = {};
      const int n = SSL_read(ssl, reply, sizeof(reply) - 1);
      if (n > 12 && std::string(reply, 9) == "HTTP/1.1 ") out.status = std::atoi(reply + 9);
    }
    FreeSession(*session);
    *session = SSL_get1_session(ssl);
    SSL_shutdown(ssl);
  }
  SSL_free(ssl);
  close(fd);
  return out;
}

void FreeSession(void* session) {
  if (session) SSL_SESSION_free(static_cast<SSL_SESSION*>(session));
}

}  // namespace cpm::e2e
