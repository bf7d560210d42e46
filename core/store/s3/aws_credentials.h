// Credentials for S3 requests: the AWS credential chain, as the AWS SDKs walk
// it, and the cache that keeps temporary credentials fresh.
//
// MakeAwsCredentials() picks, in this order:
//   0. -o no_sign_request: none; requests go unsigned (public buckets).
//   0. -o profile=NAME: that profile only (see 2), nothing else is tried.
//   1. The environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and, for
//      temporary keys, AWS_SESSION_TOKEN.
//   2. The shared files: profile $AWS_PROFILE (else "default") in
//      $AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials, section [NAME]) and
//      $AWS_CONFIG_FILE (~/.aws/config, section [profile NAME] or [default]):
//      aws_access_key_id / aws_secret_access_key / aws_session_token, or
//      role_arn with web_identity_token_file (as 3). A profile named by
//      AWS_PROFILE that is in neither file is an error. Keys read from the
//      files are read again when the files change (checked at most every
//      kProfileRecheckPeriod), as a node plugin rewrites them in place.
//   3. Web identity (EKS IRSA): AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN
//      (AWS_ROLE_SESSION_NAME optional), exchanged with STS
//      AssumeRoleWithWebIdentity at $AWS_ENDPOINT_URL_STS, else
//      $AWS_ENDPOINT_URL, else https://sts.REGION.amazonaws.com
//      (https://sts.amazonaws.com without a region, or for the SDKs' legacy
//      regions with AWS_STS_REGIONAL_ENDPOINTS=legacy). The token file is read
//      again at each refresh (it rotates).
//   4. Container credentials (ECS, EKS Pod Identity):
//      AWS_CONTAINER_CREDENTIALS_FULL_URI, or http://169.254.170.2 +
//      AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, with the Authorization header
//      from AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE (read at each refresh) or
//      AWS_CONTAINER_AUTHORIZATION_TOKEN. A plain-http FULL_URI must name a
//      loopback address or the EKS Pod Identity agent (169.254.170.23).
//   5. EC2 instance metadata, IMDSv2 (unless AWS_EC2_METADATA_DISABLED=true):
//      PUT /latest/api/token, then the role's credentials from
//      /latest/meta-data/iam/security-credentials/ at
//      $AWS_EC2_METADATA_SERVICE_ENDPOINT, else http://169.254.169.254. It is
//      probed at start-up with a 1 s connect timeout; where instance metadata is
//      expected (in a Kubernetes pod, or with the endpoint variable set) a probe
//      that fails transiently is retried for kImdsProbeWindow, as the GCE
//      metadata server is for gs://. Elsewhere it fails fast, and the error
//      lists everything that was tried. With defer_instance_metadata the probe
//      happens at the first Get() instead (a mount of /dev/fd/N answers the
//      kernel before any network call), and fails there the same way.
//
// Temporary credentials (STS, container, instance metadata) are fetched when
// first needed, shared by every request, and fetched again when less than
// min(5 minutes, 10% of their lifetime) is left, or when S3 says they expired.
//
// Secrets (secret keys, session tokens, web identity and container tokens) are
// never logged, nor put in any Status message; descriptions show at most the
// first and last four characters of an access key ID.
//
// Thread-safety: AwsCredentialsProvider implementations are safe to call from
// many threads. RefreshingAwsCredentials refreshes one at a time; while a
// refresh is in flight, callers whose credentials are still valid keep using
// them and the rest wait for it. Its mu_ is a "store lock" in the order of
// core/util/thread_annotations.h and is never held across a network call.
#ifndef TENSORFS_CORE_STORE_S3_AWS_CREDENTIALS_H_
#define TENSORFS_CORE_STORE_S3_AWS_CREDENTIALS_H_

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "core/store/http/http.h"
#include "core/util/clock.h"
#include "core/util/status.h"
#include "core/util/expiring_cache.h"

namespace tensorfs {

inline constexpr std::string_view kDefaultImdsEndpoint = "http://169.254.169.254";
inline constexpr std::string_view kContainerCredentialsHost = "http://169.254.170.2";
inline constexpr std::chrono::seconds kImdsProbeWindow{30};
inline constexpr std::chrono::seconds kProfileRecheckPeriod{1};

struct AwsCredentials {
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;  // "" for long-term keys
};

class AwsCredentialsProvider {
 public:
  virtual ~AwsCredentialsProvider() = default;

  // The credentials to sign with, refreshed first when temporary ones are
  // close to expiry. Errors: kPermissionDenied when they are refused (names
  // the source and what to fix); kUnavailable or kDeadlineExceeded when their
  // source could not be reached (worth a retry). Never called when anonymous().
  virtual StatusOr<AwsCredentials> Get() = 0;

  // Which credentials these are, for messages: "environment variables
  // (access key AKIA...MPLE)", "profile dev in /root/.aws/credentials ...".
  // Never contains a secret.
  virtual std::string Describe() const = 0;

  // S3 answered that the credentials expired: the next Get() fetches new ones
  // (a no-op for long-term keys). True if new ones can be had.
  virtual bool Invalidate() = 0;

  // True if requests go unsigned.
  virtual bool anonymous() const { return false; }
};

// Credentials with the time they expire, from one source.
struct TemporaryAwsCredentials {
  AwsCredentials credentials;
  std::chrono::seconds lifetime{3600};  // from now
};

// Obtains temporary credentials from one source (STS, a container endpoint,
// instance metadata). One exchange per call; no caching, no retries.
//
// Thread-safety: Fetch() and Describe() may be called from any thread
// (RefreshingAwsCredentials calls Fetch() from one thread at a time).
class AwsCredentialsFetcher {
 public:
  virtual ~AwsCredentialsFetcher() = default;
  virtual StatusOr<TemporaryAwsCredentials> Fetch() = 0;
  virtual std::string Describe() const = 0;
};

// The cache over a fetcher (ExpiringCache: see the file comment for when it
// refreshes). If a refresh fails while the old credentials are still valid,
// they are used.
class RefreshingAwsCredentials : public AwsCredentialsProvider {
 public:
  explicit RefreshingAwsCredentials(std::unique_ptr<AwsCredentialsFetcher> fetcher, Clock& clock = SystemClock());

  // Puts already-fetched credentials in the cache (the instance-metadata probe).
  void Seed(const TemporaryAwsCredentials& c) { cache_.Seed(c.credentials, c.lifetime); }

  StatusOr<AwsCredentials> Get() override { return cache_.Get(); }
  std::string Describe() const override { return fetcher_->Describe(); }
  bool Invalidate() override {
    cache_.Invalidate();
    return true;
  }

  // Successful fetches so far.
  int refresh_count() const { return cache_.refresh_count(); }

 private:
  const std::unique_ptr<AwsCredentialsFetcher> fetcher_;
  ExpiringCache<AwsCredentials> cache_;
};

// "AKIA...MPLE": enough of an access key ID to tell keys apart.
std::string MaskAccessKeyId(std::string_view access_key_id);

// Long-term (or fixed temporary) keys.
std::unique_ptr<AwsCredentialsProvider> MakeStaticAwsCredentials(AwsCredentials credentials,
                                                                 std::string description);
// -o no_sign_request.
std::unique_ptr<AwsCredentialsProvider> MakeAnonymousAwsCredentials();

// Fetchers, exposed for tests. `http` must outlive them.
std::unique_ptr<AwsCredentialsFetcher> MakeWebIdentityFetcher(std::string role_arn, std::string token_file,
                                                              std::string session_name, std::string sts_endpoint,
                                                              HttpClient& http);
std::unique_ptr<AwsCredentialsFetcher> MakeContainerCredentialsFetcher(std::string url, std::string token,
                                                                       std::string token_file, HttpClient& http);
std::unique_ptr<AwsCredentialsFetcher> MakeImdsFetcher(std::string endpoint, HttpClient& http,
                                                       std::chrono::milliseconds connect_timeout);

// The sections of an INI file as the AWS CLI writes them: "[name]" headers,
// "key = value" lines (keys lower-cased), '#' and ';' comments; indented
// lines (nested settings such as "s3 =\n  addressing_style = path") skipped.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
IniSections ParseIni(std::string_view text);

// One profile's settings from the shared files, credentials file first.
struct AwsProfile {
  std::string name;
  bool found = false;
  std::map<std::string, std::string> settings;  // merged; the credentials file wins
  std::string credentials_file;  // the paths looked at, for messages
  std::string config_file;
  std::string where;  // "/root/.aws/credentials" or ".../config", where the keys are
};

// Profile `name` ("" = $AWS_PROFILE, else $AWS_DEFAULT_PROFILE, else "default")
// from $AWS_SHARED_CREDENTIALS_FILE and $AWS_CONFIG_FILE (default
// $HOME/.aws/credentials and $HOME/.aws/config).
AwsProfile LoadAwsProfile(std::string_view name);

struct AwsChainOptions {
  std::string profile;         // -o profile; "" when not given
  bool no_sign_request = false;
  std::string region;          // for the regional STS endpoint; "" if not known yet
  bool defer_instance_metadata = false;  // probe instance metadata at the first Get(), not now
};

// The chain above. The HttpClient (and clock) must outlive the provider.
StatusOr<std::unique_ptr<AwsCredentialsProvider>> MakeAwsCredentials(const AwsChainOptions& options,
                                                                     HttpClient& http,
                                                                     Clock& clock = SystemClock());

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_S3_AWS_CREDENTIALS_H_
