#include "e2e/test_certificates.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <memory>

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

}  // namespace cpm::e2e
