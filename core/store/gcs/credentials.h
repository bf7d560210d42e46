// Credentials for GCS requests: which identity a request carries, and the
// access-token cache behind it.
//
// MakeCredentials() picks, in this order (Application Default Credentials, as
// Google's client libraries do, plus the two explicit options):
//   1. -o anonymous: no Authorization header.
//   2. -o key_file=PATH: a service-account key or authorized_user JSON file.
//   3. $GOOGLE_APPLICATION_CREDENTIALS naming such a file.
//   4. gcloud's ADC file: $CLOUDSDK_CONFIG/application_default_credentials.json,
//      else ~/.config/gcloud/application_default_credentials.json.
//   5. The GCE/GKE metadata server ($GCE_METADATA_HOST, else 169.254.169.254),
//      probed with a short connect timeout. On a machine where no metadata
//      server is expected the probe is made once, so it fails fast with a
//      message listing everything that was tried. Where one is expected (in a
//      Kubernetes pod, $KUBERNETES_SERVICE_HOST set, or $GCE_METADATA_HOST
//      naming one) a probe that fails transiently (refused, timed out, 5xx) is
//      retried for kMetadataProbeWindow: GKE's metadata server does not answer
//      in a pod's first seconds.
//
// Service-account keys are exchanged for tokens with a self-signed RS256 JWT
// (the OAuth 2.0 jwt-bearer grant); authorized_user files with their refresh
// token; the metadata server hands tokens out directly.
//
// Tokens and keys are never logged, nor put in any Status message.
//
// Thread-safety: CredentialsProvider implementations are safe to call from many
// threads. The token cache refreshes one at a time: while a refresh is in flight,
// callers whose token is still valid keep using it and the rest wait for the
// refresh. The cache's mu_ is a "store lock" in the order of
// core/util/thread_annotations.h and is never held across a network call.
#ifndef TENSORFS_CORE_STORE_GCS_CREDENTIALS_H_
#define TENSORFS_CORE_STORE_GCS_CREDENTIALS_H_

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "core/store/gcs/gcs_options.h"
#include "core/store/http/http.h"
#include "core/store/http/retry.h"
#include "core/util/expiring_cache.h"
#include "core/util/status.h"
#include "core/util/clock.h"

namespace tensorfs {

inline constexpr std::string_view kReadOnlyScope = "https://www.googleapis.com/auth/devstorage.read_only";
inline constexpr std::string_view kDefaultTokenUri = "https://oauth2.googleapis.com/token";
inline constexpr std::string_view kDefaultMetadataHost = "169.254.169.254";
// How long the metadata-server probe keeps retrying where a metadata server is
// expected (see above); the waits between probes grow from 250 ms to 2 s.
inline constexpr std::chrono::seconds kMetadataProbeWindow{30};
inline constexpr std::chrono::milliseconds kMetadataProbeFirstBackoff{250};
inline constexpr std::chrono::milliseconds kMetadataProbeMaxBackoff{2000};

class CredentialsProvider {
 public:
  virtual ~CredentialsProvider() = default;

  // The header line to send: "" for anonymous access, else
  // "Authorization: Bearer <token>", refreshing the token first when it is
  // missing or close to expiry. Errors: kPermissionDenied when the credentials
  // are refused (names the file or source and what to fix); kUnavailable or
  // kDeadlineExceeded when the token endpoint could not be reached (worth a retry).
  virtual StatusOr<std::string> AuthorizationHeader() = 0;

  // Which credentials these are, for messages: "anonymous access",
  // "service account key /k.json (client_email x@y)", "the metadata server at
  // 169.254.169.254", "gcloud ADC file /home/u/.config/gcloud/... (authorized_user,
  // client_id ...)". Never contains a secret.
  virtual std::string Describe() const = 0;

  // Drops the cached token (the server answered 401), so the next
  // AuthorizationHeader() fetches a new one.
  virtual void Invalidate() = 0;

  // True if no Authorization header is ever sent.
  virtual bool anonymous() const { return false; }
};

// A freshly issued access token.
struct AccessToken {
  std::string value;
  std::chrono::seconds lifetime{3600};  // expires_in
};

// Obtains new access tokens from one source (a token endpoint, the metadata
// server). One network exchange per call; no caching and no retries.
//
// Thread-safety: Fetch() may be called from any thread (CachingCredentials calls
// it from one thread at a time).
class TokenFetcher {
 public:
  virtual ~TokenFetcher() = default;
  virtual StatusOr<AccessToken> Fetch() = 0;
  virtual std::string Describe() const = 0;
};

// A CredentialsProvider over a TokenFetcher: caches the token and refreshes it
// before it expires (ExpiringCache: min(5 minutes, 10% of its lifetime)
// early); if a refresh fails while the old token is still valid, the old
// token is used.
class CachingCredentials : public CredentialsProvider {
 public:
  explicit CachingCredentials(std::unique_ptr<TokenFetcher> fetcher, Clock& clock = SystemClock());

  // Puts an already-fetched token in the cache (the metadata-server probe).
  void Seed(const AccessToken& token) { cache_.Seed(token.value, token.lifetime); }

  StatusOr<std::string> AuthorizationHeader() override;
  std::string Describe() const override { return description_; }
  void Invalidate() override { cache_.Invalidate(); }

  // Number of successful fetches so far (for tests and stats).
  int refresh_count() const { return cache_.refresh_count(); }

 private:
  const std::unique_ptr<TokenFetcher> fetcher_;
  const std::string description_;
  ExpiringCache<std::string> cache_;
};

// The contents of a service-account key file (type "service_account").
struct ServiceAccountKey {
  std::string client_email;
  std::string private_key;  // PEM
  std::string private_key_id;
  std::string token_uri;    // kDefaultTokenUri when the file has none
  std::string source;       // the file it came from, for messages
};

// The contents of an authorized_user file (gcloud auth application-default login).
struct AuthorizedUserCredentials {
  std::string client_id;
  std::string client_secret;
  std::string refresh_token;
  std::string token_uri;  // kDefaultTokenUri when the file has none
  std::string source;
};

// Parses a service-account key; checks the required fields and that the private
// key is an RSA key in PEM form. `source` names the file in error messages.
StatusOr<ServiceAccountKey> ParseServiceAccountKey(std::string_view json_text, std::string_view source);

// The signed assertion for the jwt-bearer grant: base64url(header) "."
// base64url(claims) "." base64url(RS256 signature), no padding. Header
// {"alg":"RS256","typ":"JWT","kid":private_key_id}; claims {"iss": client_email,
// "scope": read-only storage, "aud": token_uri, "iat": now, "exp": now + 3600}.
StatusOr<std::string> MakeServiceAccountJwt(const ServiceAccountKey& key, std::chrono::system_clock::time_point now);

// Fetchers, exposed for tests.
std::unique_ptr<TokenFetcher> MakeServiceAccountFetcher(ServiceAccountKey key, std::string description,
                                                       HttpClient& http);
std::unique_ptr<TokenFetcher> MakeAuthorizedUserFetcher(AuthorizedUserCredentials creds, std::string description,
                                                       HttpClient& http);
// `host` is host[:port] of the metadata server. `connect_timeout` bounds each connect.
std::unique_ptr<TokenFetcher> MakeMetadataServerFetcher(std::string host, HttpClient& http,
                                                       std::chrono::milliseconds connect_timeout);

// Anonymous access: no Authorization header.
std::unique_ptr<CredentialsProvider> MakeAnonymousCredentials();

// Credentials from a JSON file (service_account or authorized_user). `origin`
// says how the file was chosen, for messages ("-o key_file",
// "GOOGLE_APPLICATION_CREDENTIALS", "gcloud ADC file"). A file readable by group
// or others draws a warning naming the chmod that fixes it.
StatusOr<std::unique_ptr<CredentialsProvider>> MakeCredentialsFromFile(const std::string& path,
                                                                       std::string_view origin, HttpClient& http,
                                                                       Clock& clock = SystemClock());

// Application Default Credentials with the explicit options, in the order above.
// The HttpClient (and clock) must outlive the provider.
StatusOr<std::unique_ptr<CredentialsProvider>> MakeCredentials(const GcsOptions& options, HttpClient& http,
                                                               Clock& clock = SystemClock());

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_GCS_CREDENTIALS_H_
