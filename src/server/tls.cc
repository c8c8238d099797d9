#include "server/tls.h"

#include <httplib.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "base/log.h"

namespace cpm {
namespace {

// OpenSSL's reasons for the last failure (its error queue, emptied).
std::string OpenSslReason() {
  std::string reason;
  while (const unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!reason.empty()) reason += "; ";
    reason += buf;
  }
  return reason.empty() ? "unknown error" : reason;
}

Status FileError(const char* flag, const std::string& path, const std::string& what) {
  return InvalidArgument(std::string(flag) + ": " + path + ": " + what);
}

struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct ChainFree {
  void operator()(STACK_OF(X509) * s) const { sk_X509_pop_free(s, X509_free); }
};
struct FileClose {
  void operator()(FILE* f) const { std::fclose(f); }
};

// The server's certificate, its chain and its key, as one unit that a refresh replaces whole.
struct CertPair {
  std::unique_ptr<X509, X509Free> leaf;
  std::unique_ptr<STACK_OF(X509), ChainFree> chain;  // the certificates after the leaf
  std::unique_ptr<EVP_PKEY, KeyFree> key;
};

// Reads --ssl-certfile (the leaf first, then its chain) and the key (--ssl-keyfile, or the
// certificate file), as Python's load_cert_chain reads them, and checks that they belong together.
StatusOr<CertPair> ReadCertPair(const TlsOptions& tls) {
  CertPair pair;
  std::unique_ptr<FILE, FileClose> certs(std::fopen(tls.certfile.c_str(), "r"));
  if (!certs) return FileError("--ssl-certfile", tls.certfile, std::strerror(errno));
  pair.leaf.reset(PEM_read_X509(certs.get(), nullptr, nullptr, nullptr));
  if (!pair.leaf) {
    return FileError("--ssl-certfile", tls.certfile,
                     "no PEM certificate (" + OpenSslReason() + ")");
  }
  pair.chain.reset(sk_X509_new_null());
  while (X509* next = PEM_read_X509(certs.get(), nullptr, nullptr, nullptr)) {
    sk_X509_push(pair.chain.get(), next);
  }
  ERR_clear_error();  // the end of the file ends the loop with a "no start line" error
  const char* key_flag = tls.keyfile.empty() ? "--ssl-certfile" : "--ssl-keyfile";
  const std::string& key_path = tls.keyfile.empty() ? tls.certfile : tls.keyfile;
  std::unique_ptr<FILE, FileClose> key(std::fopen(key_path.c_str(), "r"));
  if (!key) return FileError(key_flag, key_path, std::strerror(errno));
  pair.key.reset(PEM_read_PrivateKey(key.get(), nullptr, nullptr, nullptr));
  if (!pair.key) {
    return FileError(key_flag, key_path, "no PEM private key (" + OpenSslReason() + ")");
  }
  if (X509_check_private_key(pair.leaf.get(), pair.key.get()) != 1) {
    ERR_clear_error();
    return FileError(key_flag, key_path, "the private key does not match the certificate in " +
                                             tls.certfile);
  }
  return pair;
}

// The pair a handshake is served with; a refresh swaps it while connections are served.
class CertStore {
 public:
  explicit CertStore(CertPair pair) : pair_(std::move(pair)) {}

  void Replace(CertPair pair) {
    std::lock_guard<std::mutex> lock(mu_);
    pair_ = std::move(pair);
  }
  // OpenSSL's certificate callback, at each handshake before the cipher is chosen: this
  // connection gets the current pair (SSL_use_* take their own references).
  static int Select(SSL* ssl, void* arg) {
    auto* self = static_cast<CertStore*>(arg);
    std::lock_guard<std::mutex> lock(self->mu_);
    const CertPair& p = self->pair_;
    return SSL_use_certificate(ssl, p.leaf.get()) == 1 &&
                   SSL_use_PrivateKey(ssl, p.key.get()) == 1 &&
                   SSL_set1_chain(ssl, p.chain.get()) == 1
               ? 1
               : 0;
  }

 private:
  std::mutex mu_;
  CertPair pair_;
};

// CPython's default TLS 1.2 cipher list (PY_SSL_DEFAULT_CIPHER_STRING): forward secrecy, AEAD
// or AES, no SHA-1 MACs. uvicorn serves vLLM with it unless --ssl-ciphers says otherwise.
constexpr const char* kPythonDefaultCiphers =
    "@SECLEVEL=2:ECDH+AESGCM:ECDH+CHACHA20:ECDH+AES:DHE+AES:!aNULL:!eNULL:!aDSS:!SHA1:!AESCCM";

// The context's settings beside the certificate: TLS 1.2 at least (Python's server default),
// client certificates as --ssl-cert-reqs asks, the cipher list.
Status SetUpContext(SSL_CTX& ctx, const TlsOptions& tls, CertStore* store) {
  SSL_CTX_set_min_proto_version(&ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(&ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  // Sessions are cached and resumed (a proxy's, a browser's next connection); with client
  // certificates checked OpenSSL refuses to resume a session without an id context (an
  // "internal error" alert to every resuming client). CPython sets one always, and so does this.
  static const unsigned char kSessionContext[] = "cpmserve";
  SSL_CTX_set_session_id_context(&ctx, kSessionContext, sizeof(kSessionContext) - 1);
  SSL_CTX_set_cert_cb(&ctx, &CertStore::Select, store);
  if (!tls.ca_certs.empty() &&
      SSL_CTX_load_verify_locations(&ctx, tls.ca_certs.c_str(), nullptr) != 1) {
    return FileError("--ssl-ca-certs", tls.ca_certs,
                     "no PEM CA certificates (" + OpenSslReason() + ")");
  }
  const int mode = tls.cert_reqs == 0   ? SSL_VERIFY_NONE
                   : tls.cert_reqs == 1 ? SSL_VERIFY_PEER
                                        : SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
  SSL_CTX_set_verify(&ctx, mode, nullptr);
  const std::string ciphers = tls.ciphers.empty() ? kPythonDefaultCiphers : tls.ciphers;
  if (SSL_CTX_set_cipher_list(&ctx, ciphers.c_str()) != 1) {
    return InvalidArgument("--ssl-ciphers: '" + tls.ciphers + "' names no cipher OpenSSL has (" +
                           OpenSslReason() + ")");
  }
  return OkStatus();
}

// What a rewrite of a file changes: its modification and status-change times, its size, its
// inode (a replacement renamed into place). `cp -p` keeps the first; the change time moves.
using FileStamp = std::array<int64_t, 4>;
FileStamp StampOf(const std::string& path) {
  struct stat st {};
  if (path.empty() || stat(path.c_str(), &st) != 0) return {-1, -1, -1, -1};
  return {static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
          static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec,
          static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_ino)};
}

// SSLServer that owns its certificate store and, with --enable-ssl-refresh, the thread that
// reloads it (vLLM's SSLCertRefresher): when the certificate or key file changes, the pair is
// read again and served from the next handshake on (a pair that does not load, a file still
// being written, leaves the old one in place and is tried again at the next poll); when the CA
// file changes, its certificates are added to the trusted ones.
class TlsServer : public httplib::SSLServer {
 public:
  TlsServer(const std::function<bool(SSL_CTX&)>& setup, std::shared_ptr<CertStore> store)
      : httplib::SSLServer(setup), store_(std::move(store)) {}
  ~TlsServer() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (refresher_.joinable()) refresher_.join();
  }

  void StartRefresh(const TlsOptions& tls, int poll_ms) {
    refresher_ = std::thread([this, tls, poll_ms] { Refresh(tls, poll_ms); });
  }

 private:
  void Refresh(TlsOptions tls, int poll_ms) {
    const auto pair_stamps = [&] {
      return std::array<FileStamp, 2>{StampOf(tls.certfile), StampOf(tls.keyfile)};
    };
    auto pair_seen = pair_stamps();
    FileStamp ca_seen = StampOf(tls.ca_certs);
    std::string last_warning;  // a pair that keeps failing is named once, not every poll
    std::unique_lock<std::mutex> lock(mu_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(poll_ms), [&] { return stopping_; })) {
      if (const auto now = pair_stamps(); now != pair_seen) {
        StatusOr<CertPair> pair = ReadCertPair(tls);
        if (pair.ok()) {
          store_->Replace(std::move(*pair));
          pair_seen = now;
          last_warning.clear();
          CPM_LOG_INFO("--enable-ssl-refresh: certificate reloaded from {}", tls.certfile);
        } else if (pair.status().message() != last_warning) {
          last_warning = pair.status().message();
          CPM_LOG_WARN("--enable-ssl-refresh: keeping the current certificate: {}", last_warning);
        }
      }
      // Python's load_verify_locations adds to the trusted set, as this does.
      if (const FileStamp now = StampOf(tls.ca_certs); !tls.ca_certs.empty() && now != ca_seen) {
        ca_seen = now;
        if (SSL_CTX_load_verify_locations(ssl_context(), tls.ca_certs.c_str(), nullptr) == 1) {
          CPM_LOG_INFO("--enable-ssl-refresh: CA certificates reloaded from {}", tls.ca_certs);
        } else {
          CPM_LOG_WARN("--enable-ssl-refresh: {} not reloaded ({})", tls.ca_certs, OpenSslReason());
        }
      }
    }
  }

  std::shared_ptr<CertStore> store_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread refresher_;
};

}  // namespace

Status ValidateTlsOptions(const TlsOptions& tls) {
  if (!tls.keyfile.empty() && tls.certfile.empty()) {
    return InvalidArgument("--ssl-keyfile needs --ssl-certfile (the certificate it belongs to)");
  }
  if (tls.enabled() && (tls.cert_reqs < 0 || tls.cert_reqs > 2)) {
    return InvalidArgument("--ssl-cert-reqs: " + std::to_string(tls.cert_reqs) +
                           " is not a certificate requirement (0 none, 1 optional, 2 required)");
  }
  return OkStatus();
}

std::vector<std::string> TlsFlagsWithoutHttps(const TlsOptions& tls) {
  std::vector<std::string> flags;
  if (tls.enabled()) return flags;
  if (!tls.ca_certs.empty()) flags.push_back("--ssl-ca-certs");
  if (tls.cert_reqs != 0) flags.push_back("--ssl-cert-reqs");
  if (!tls.ciphers.empty()) flags.push_back("--ssl-ciphers");
  if (tls.refresh) flags.push_back("--enable-ssl-refresh");
  return flags;
}

StatusOr<std::unique_ptr<httplib::Server>> MakeTlsServer(const TlsOptions& tls,
                                                         int refresh_poll_ms) {
  CPM_RETURN_IF_ERROR(ValidateTlsOptions(tls));
  StatusOr<CertPair> pair = ReadCertPair(tls);
  if (!pair.ok()) return pair.status();
  auto store = std::make_shared<CertStore>(std::move(*pair));
  Status setup = OkStatus();
  auto server = std::make_unique<TlsServer>(
      [&](SSL_CTX& ctx) {
        setup = SetUpContext(ctx, tls, store.get());
        return setup.ok();
      },
      store);
  if (!setup.ok()) return setup;
  if (!server->is_valid()) {
    return Internal("TLS: OpenSSL could not make a context (" + OpenSslReason() + ")");
  }
  if (tls.refresh) server->StartRefresh(tls, refresh_poll_ms);
  return std::unique_ptr<httplib::Server>(std::move(server));
}

}  // namespace cpm
