// RSA keys made at test time (never checked in) and service-account key files
// built from them, for the credential tests.
//
// Thread-safety: TestKey() initialises once, thread-safely; the rest are pure
// or touch only the files they are given.
#ifndef TENSORFS_TESTS_CORE_STORE_GCS_TEST_KEYS_H_
#define TENSORFS_TESTS_CORE_STORE_GCS_TEST_KEYS_H_

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <sys/stat.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/store/gcs/encoding.h"
#include "tests/support/test_util.h"

namespace tensorfs::testing {


struct RsaTestKey {
  EVP_PKEY* pkey = nullptr;    // owns the key for the process lifetime
  std::string private_pem;     // PKCS#8 "PRIVATE KEY", as in real key files
  std::string public_pem;      // "PUBLIC KEY"
};

inline std::string BioToString(BIO* bio) {
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string s(data, static_cast<size_t>(n));
  BIO_free(bio);
  return s;
}

// One 2048-bit key per test process.
inline const RsaTestKey& TestKey() {
  static const RsaTestKey key = [] {
    RsaTestKey k;
    k.pkey = EVP_RSA_gen(2048);
    BIO* priv = BIO_new(BIO_s_mem());
    PEM_write_bio_PrivateKey(priv, k.pkey, nullptr, nullptr, 0, nullptr, nullptr);
    k.private_pem = BioToString(priv);
    BIO* pub = BIO_new(BIO_s_mem());
    PEM_write_bio_PUBKEY(pub, k.pkey);
    k.public_pem = BioToString(pub);
    return k;
  }();
  return key;
}

inline nlohmann::json ServiceAccountJson(const std::string& token_uri,
                                         const std::string& email = "sa@proj.iam.gserviceaccount.com") {
  return {{"type", "service_account"},
          {"project_id", "proj"},
          {"private_key_id", "kid-123"},
          {"private_key", TestKey().private_pem},
          {"client_email", email},
          {"client_id", "1234567890"},
          {"token_uri", token_uri}};
}

// Writes a credentials file as gcloud does: mode 0600 unless told otherwise.
inline void WriteKeyFile(const std::string& path, const std::string& text, mode_t mode = 0600) {
  WriteFile(path, text, mode);
}

// base64url (no padding) to bytes.
inline std::string Base64UrlDecode(std::string s) {
  for (char& c : s) {
    if (c == '-') c = '+';
    if (c == '_') c = '/';
  }
  return Base64Decode(s).value_or("<bad base64url>");
}

// Checks an RS256 JWT's signature against `pkey`.
inline bool VerifyJwt(const std::string& jwt, EVP_PKEY* pkey) {
  size_t dot2 = jwt.rfind('.');
  if (dot2 == std::string::npos) return false;
  std::string signing_input = jwt.substr(0, dot2);
  std::string sig = Base64UrlDecode(jwt.substr(dot2 + 1));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  bool ok = EVP_DigestVerifyInit(ctx, nullptr, EVP_sha256(), nullptr, pkey) == 1 &&
            EVP_DigestVerify(ctx, reinterpret_cast<const unsigned char*>(sig.data()), sig.size(),
                             reinterpret_cast<const unsigned char*>(signing_input.data()), signing_input.size()) == 1;
  EVP_MD_CTX_free(ctx);
  return ok;
}

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_CORE_STORE_GCS_TEST_KEYS_H_
