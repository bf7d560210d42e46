#include "core/store/s3/aws_credentials.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/store/http/encoding.h"
#include "core/store/http/retry.h"
#include "core/store/s3/s3_xml.h"
#include "core/store/s3/sigv4.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {
namespace {

using nlohmann::json;

constexpr std::chrono::milliseconds kRequestTimeout{30000};
constexpr std::chrono::milliseconds kImdsProbeConnectTimeout{1000};
constexpr std::chrono::milliseconds kImdsProbeFirstBackoff{250};
constexpr std::chrono::milliseconds kImdsProbeMaxBackoff{2000};
constexpr std::string_view kImdsTokenTtl = "21600";

std::string GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

// A whole small file (a token), trimmed; errors name the file and what set it.
StatusOr<std::string> ReadTokenFile(const std::string& path, std::string_view origin) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return PermissionDeniedError("cannot read " + std::string(origin) + " " + path + ": " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  std::string token = Trim(ss.str());
  if (token.empty()) return PermissionDeniedError(std::string(origin) + " " + path + " is empty");
  return token;
}

bool IsTransient(const Status& s) {
  return s.code() == ErrorCode::kUnavailable || s.code() == ErrorCode::kDeadlineExceeded;
}

// A transport failure or a retryable status as a transient Status, else nullopt.
std::optional<Status> TransientFailure(const HttpResponse& r) {
  if (!r.transport_ok()) {
    if (r.error == TransportError::kTls) return PermissionDeniedError(r.Summary());
    return r.error == TransportError::kTimeout ? DeadlineExceededError(r.Summary()) : UnavailableError(r.Summary());
  }
  if (IsRetryableHttpStatus(r.status)) return UnavailableError("HTTP " + std::to_string(r.status));
  return std::nullopt;
}

// The lifetime of credentials expiring at `expiration` (ISO 8601), counted from now.
StatusOr<std::chrono::seconds> LifetimeUntil(std::string_view expiration) {
  ASSIGN_OR_RETURN(int64_t ns, ParseRfc3339Nanos(expiration));
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::nanoseconds(ns) - now);
  return std::max(left, std::chrono::seconds(1));
}

// Credentials in the JSON form of container and instance-metadata endpoints:
// {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"}.
StatusOr<TemporaryAwsCredentials> ParseJsonCredentials(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return UnavailableError("the reply is not a JSON object");
  auto field = [&](const char* name) {
    auto it = j.find(name);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  if (std::string code = field("Code"); !code.empty() && code != "Success") {
    return PermissionDeniedError("the reply says \"Code\": \"" + code + "\" (" + field("Message") + ")");
  }
  TemporaryAwsCredentials c;
  c.credentials.access_key_id = field("AccessKeyId");
  c.credentials.secret_access_key = field("SecretAccessKey");
  c.credentials.session_token = field("Token");
  if (c.credentials.access_key_id.empty() || c.credentials.secret_access_key.empty()) {
    return UnavailableError("the reply has no AccessKeyId and SecretAccessKey");
  }
  if (std::string expiration = field("Expiration"); !expiration.empty()) {
    StatusOr<std::chrono::seconds> lifetime = LifetimeUntil(expiration);
    if (!lifetime.ok()) return UnavailableError("the reply's Expiration '" + expiration + "' is not a time");
    c.lifetime = *lifetime;
  }
  return c;
}

class StaticAwsCredentials : public AwsCredentialsProvider {
 public:
  StaticAwsCredentials(AwsCredentials credentials, std::string description)
      : credentials_(std::move(credentials)), description_(std::move(description)) {}
  StatusOr<AwsCredentials> Get() override { return credentials_; }
  std::string Describe() const override { return description_; }
  bool Invalidate() override { return false; }

 private:
  const AwsCredentials credentials_;
  const std::string description_;
};

class AnonymousAwsCredentials : public AwsCredentialsProvider {
 public:
  StatusOr<AwsCredentials> Get() override { return AwsCredentials{}; }
  std::string Describe() const override { return "no credentials (-o no_sign_request)"; }
  bool Invalidate() override { return false; }
  bool anonymous() const override { return true; }
};

class WebIdentityFetcher : public AwsCredentialsFetcher {
 public:
  WebIdentityFetcher(std::string role_arn, std::string token_file, std::string session_name, std::string endpoint,
                     HttpClient& http)
      : role_arn_(std::move(role_arn)),
        token_file_(std::move(token_file)),
        session_name_(std::move(session_name)),
        endpoint_(std::move(endpoint)),
        http_(http) {}

  StatusOr<TemporaryAwsCredentials> Fetch() override {
    const std::string context = "getting credentials from STS at " + endpoint_ + " for " + Describe();
    StatusOr<std::string> token = ReadTokenFile(token_file_, "the web identity token file");
    if (!token.ok()) return token.status().WithContext(context);
    HttpRequest req;
    req.method = "POST";
    req.url = endpoint_;
    req.headers = {"Content-Type: application/x-www-form-urlencoded", "Accept: application/xml"};
    req.body = CanonicalQueryString({{"Action", "AssumeRoleWithWebIdentity"},
                                     {"Version", "2011-06-15"},
                                     {"RoleArn", role_arn_},
                                     {"RoleSessionName", session_name_},
                                     {"WebIdentityToken", *token}});
    req.total_timeout = kRequestTimeout;
    req.max_body_bytes = 1 << 20;
    HttpResponse r = http_.Perform(req);
    if (std::optional<Status> transient = TransientFailure(r)) return transient->WithContext(context);
    if (r.status != 200) {
      std::optional<AwsError> e = ParseAwsError(r.body);
      std::string detail = e ? e->code + ": " + e->message : "HTTP " + std::to_string(r.status);
      return PermissionDeniedError(context + ": refused (" + detail +
                                   "); check that the role's trust policy allows this identity provider and "
                                   "service account, and that AWS_ROLE_ARN names the role");
    }
    StatusOr<StsCredentials> sts = ParseAssumeRoleWithWebIdentity(r.body);
    if (!sts.ok()) return UnavailableError(context + ": " + sts.status().message());
    TemporaryAwsCredentials out;
    out.credentials = {sts->access_key_id, sts->secret_access_key, sts->session_token};
    if (!sts->expiration.empty()) {
      StatusOr<std::chrono::seconds> lifetime = LifetimeUntil(sts->expiration);
      if (!lifetime.ok()) return UnavailableError(context + ": the Expiration '" + sts->expiration + "' is not a time");
      out.lifetime = *lifetime;
    }
    return out;
  }

  std::string Describe() const override {
    return "web identity token " + token_file_ + " for role " + role_arn_;
  }

 private:
  const std::string role_arn_;
  const std::string token_file_;
  const std::string session_name_;
  const std::string endpoint_;
  HttpClient& http_;
};

class ContainerCredentialsFetcher : public AwsCredentialsFetcher {
 public:
  ContainerCredentialsFetcher(std::string url, std::string token, std::string token_file, HttpClient& http)
      : url_(std::move(url)), token_(std::move(token)), token_file_(std::move(token_file)), http_(http) {}

  StatusOr<TemporaryAwsCredentials> Fetch() override {
    const std::string context = "getting " + Describe();
    HttpRequest req;
    req.url = url_;
    req.headers = {"Accept: application/json"};
    if (!token_file_.empty()) {
      StatusOr<std::string> token = ReadTokenFile(token_file_, "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
      if (!token.ok()) return token.status().WithContext(context);
      req.headers.push_back("Authorization: " + *token);
    } else if (!token_.empty()) {
      req.headers.push_back("Authorization: " + token_);
    }
    req.total_timeout = kRequestTimeout;
    req.connect_timeout = std::chrono::milliseconds(5000);
    req.max_body_bytes = 1 << 20;
    HttpResponse r = http_.Perform(req);
    if (std::optional<Status> transient = TransientFailure(r)) return transient->WithContext(context);
    if (r.status != 200) {
      return PermissionDeniedError(context + ": refused with HTTP " + std::to_string(r.status) +
                                   "; check AWS_CONTAINER_AUTHORIZATION_TOKEN(_FILE) and the task or pod's role");
    }
    StatusOr<TemporaryAwsCredentials> c = ParseJsonCredentials(r.body);
    if (!c.ok()) return c.status().WithContext(context);
    return c;
  }

  std::string Describe() const override { return "container credentials from " + url_; }

 private:
  const std::string url_;
  const std::string token_;
  const std::string token_file_;
  HttpClient& http_;
};

// IMDSv2: a session token, then the role's name, then its credentials.
class ImdsFetcher : public AwsCredentialsFetcher {
 public:
  ImdsFetcher(std::string endpoint, HttpClient& http, std::chrono::milliseconds connect_timeout)
      : endpoint_(std::move(endpoint)), http_(http), connect_timeout_(connect_timeout) {}

  StatusOr<TemporaryAwsCredentials> Fetch() override {
    HttpRequest token_req;
    token_req.method = "PUT";
    token_req.url = endpoint_ + "/latest/api/token";
    token_req.headers = {"X-aws-ec2-metadata-token-ttl-seconds: " + std::string(kImdsTokenTtl)};
    ASSIGN_OR_RETURN(HttpResponse token, Call(token_req, "a session token"));
    const std::string session = "X-aws-ec2-metadata-token: " + Trim(token.body);

    HttpRequest role_req;
    role_req.url = endpoint_ + "/latest/meta-data/iam/security-credentials/";
    role_req.headers = {session};
    ASSIGN_OR_RETURN(HttpResponse role, Call(role_req, "the instance's IAM role"));
    std::string name = Trim(role.body.substr(0, role.body.find('\n')));
    if (name.empty()) {
      return PermissionDeniedError("EC2 instance metadata at " + endpoint_ +
                                   " lists no IAM role: attach an instance profile to the instance");
    }
    HttpRequest creds_req;
    creds_req.url = role_req.url + UriEncode(name, true);
    creds_req.headers = {session};
    ASSIGN_OR_RETURN(HttpResponse creds, Call(creds_req, "the credentials of role " + name));
    StatusOr<TemporaryAwsCredentials> c = ParseJsonCredentials(creds.body);
    if (!c.ok()) return c.status().WithContext("EC2 instance metadata at " + endpoint_ + ", role " + name);
    {
      MutexLock lock(mu_);
      role_ = name;
    }
    return c;
  }

  std::string Describe() const override {
    MutexLock lock(mu_);
    return "EC2 instance metadata at " + endpoint_ + (role_.empty() ? "" : " (role " + role_ + ")");
  }

 private:
  StatusOr<HttpResponse> Call(HttpRequest& req, const std::string& what) {
    req.connect_timeout = connect_timeout_;
    req.total_timeout = kRequestTimeout;
    req.max_body_bytes = 1 << 20;
    HttpResponse r = http_.Perform(req);
    const std::string context = "EC2 instance metadata at " + endpoint_ + " (" + what + ")";
    if (std::optional<Status> transient = TransientFailure(r)) return transient->WithContext(context);
    if (r.status == 404) {
      return PermissionDeniedError(context + ": not found (HTTP 404); attach an IAM role (instance profile) "
                                             "to the instance");
    }
    if (r.status != 200) {
      return PermissionDeniedError(context + ": refused with HTTP " + std::to_string(r.status) +
                                   (r.status == 401 || r.status == 403
                                        ? "; IMDSv2 may be disabled, or the hop limit too low for a container "
                                          "(aws ec2 modify-instance-metadata-options --http-put-response-hop-limit 2)"
                                        : ""));
    }
    return r;
  }

  const std::string endpoint_;
  HttpClient& http_;
  const std::chrono::milliseconds connect_timeout_;
  mutable Mutex mu_;
  std::string role_ GUARDED_BY(mu_);
};

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgumentError("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The regions whose STS answers at the global endpoint when
// AWS_STS_REGIONAL_ENDPOINTS=legacy, as the SDKs list them.
constexpr std::string_view kLegacyGlobalStsRegions[] = {
    "ap-northeast-1", "ap-south-1", "ap-southeast-1", "ap-southeast-2", "aws-global", "ca-central-1",
    "eu-central-1",   "eu-north-1", "eu-west-1",      "eu-west-2",      "eu-west-3",  "sa-east-1",
    "us-east-1",      "us-east-2",  "us-west-1",      "us-west-2"};

// Where the STS endpoint is: $AWS_ENDPOINT_URL_STS, else $AWS_ENDPOINT_URL
// (every service's, as the SDKs take it), else AWS's: the region's, or the
// global one without a region or for the legacy regions under
// AWS_STS_REGIONAL_ENDPOINTS=legacy.
std::string StsEndpoint(std::string_view region) {
  std::string url = GetEnv("AWS_ENDPOINT_URL_STS");
  if (url.empty()) url = GetEnv("AWS_ENDPOINT_URL");
  if (url.empty()) {
    const bool legacy = Lower(GetEnv("AWS_STS_REGIONAL_ENDPOINTS")) == "legacy" &&
                        std::find(std::begin(kLegacyGlobalStsRegions), std::end(kLegacyGlobalStsRegions), region) !=
                            std::end(kLegacyGlobalStsRegions);
    url = region.empty() || legacy ? "https://sts.amazonaws.com"
                                   : "https://sts." + std::string(region) + ".amazonaws.com";
  }
  while (url.ends_with('/') && url.size() > 8) url.pop_back();
  return url;
}

std::string DefaultSessionName() { return "tensorfs-" + std::to_string(::time(nullptr)); }

// The plain-http hosts that may serve container credentials (as the SDKs allow).
bool IsAllowedContainerHost(std::string_view url) {
  if (url.starts_with("https://")) return true;
  if (!url.starts_with("http://")) return false;
  std::string_view rest = url.substr(7);
  rest = rest.substr(0, rest.find('/'));
  std::string host(rest);
  if (host.starts_with('[')) {
    host = host.substr(1, host.find(']') - 1);
  } else {
    host = host.substr(0, host.find(':'));
  }
  return host == "localhost" || host.starts_with("127.") || host == "::1" || host == "169.254.170.2" ||
         host == "169.254.170.23" || host == "fd00:ec2::23";
}

// A file's identity and version, to tell when it was rewritten (in place or
// by a rename over it).
struct FileVersion {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  int64_t mtime_ns = 0;
  bool operator==(const FileVersion&) const = default;
};

FileVersion VersionOf(const std::string& path) {
  struct stat st;
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return {};
  return {true, st.st_dev, st.st_ino, st.st_size,
          static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

// A profile's keys (aws_access_key_id, ...), read again from its files when
// they change: a Kubernetes node plugin rewrites them when the secret they
// come from changes, and the process keeps running. Checked at most every
// kProfileRecheckPeriod; a rewrite that cannot be read (the profile gone, a
// key missing) keeps the keys in use, with a warning.
class ProfileFileCredentials : public AwsCredentialsProvider {
 public:
  ProfileFileCredentials(std::string name, std::string origin, const AwsProfile& profile, AwsCredentials credentials,
                         Clock& clock)
      : name_(std::move(name)),
        origin_(std::move(origin)),
        credentials_file_(profile.credentials_file),
        config_file_(profile.config_file),
        clock_(clock),
        credentials_(std::move(credentials)),
        description_(DescriptionOf(profile, credentials_)),
        versions_{VersionOf(credentials_file_), VersionOf(config_file_)},
        next_check_(clock_.Now() + kProfileRecheckPeriod) {}

  StatusOr<AwsCredentials> Get() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (clock_.Now() >= next_check_) Recheck();
    return credentials_;
  }

  std::string Describe() const override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return description_;
  }

  // S3 refused the keys: the files are read again at the next Get.
  bool Invalidate() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    next_check_ = clock_.Now();
    versions_ = {};
    return true;
  }

 private:
  std::string DescriptionOf(const AwsProfile& profile, const AwsCredentials& c) const {
    return "profile " + name_ + " (" + origin_ + ") in " + profile.where + " (access key " +
           MaskAccessKeyId(c.access_key_id) + ")";
  }

  void Recheck() REQUIRES(mu_) {
    next_check_ = clock_.Now() + kProfileRecheckPeriod;
    const std::array<FileVersion, 2> now{VersionOf(credentials_file_), VersionOf(config_file_)};
    if (now == versions_) return;
    versions_ = now;
    const AwsProfile profile = LoadAwsProfile(name_);
    auto get = [&](const char* key) {
      auto it = profile.settings.find(key);
      return it == profile.settings.end() ? std::string() : it->second;
    };
    AwsCredentials fresh{get("aws_access_key_id"), get("aws_secret_access_key"), get("aws_session_token")};
    if (!profile.found || fresh.access_key_id.empty() || fresh.secret_access_key.empty()) {
      spdlog::warn("could not read new AWS credentials from profile {} in {} ({}); using the current ones "
                   "(access key {})",
                   name_, credentials_file_,
                   profile.found ? "it lacks aws_access_key_id or aws_secret_access_key" : "the profile is gone",
                   MaskAccessKeyId(credentials_.access_key_id));
      return;
    }
    if (fresh.access_key_id == credentials_.access_key_id &&
        fresh.secret_access_key == credentials_.secret_access_key && fresh.session_token == credentials_.session_token) {
      return;
    }
    credentials_ = std::move(fresh);
    description_ = DescriptionOf(profile, credentials_);
    spdlog::info("read new AWS credentials from {}", description_);
  }

  const std::string name_;
  const std::string origin_;
  const std::string credentials_file_;
  const std::string config_file_;
  Clock& clock_;
  mutable Mutex mu_;
  AwsCredentials credentials_ GUARDED_BY(mu_);
  std::string description_ GUARDED_BY(mu_);
  std::array<FileVersion, 2> versions_ GUARDED_BY(mu_);
  Clock::TimePoint next_check_ GUARDED_BY(mu_);
};

// Credentials from a profile's settings; `origin` says how it was chosen.
StatusOr<std::unique_ptr<AwsCredentialsProvider>> FromProfile(const AwsProfile& profile, std::string_view origin,
                                                               const AwsChainOptions& options, HttpClient& http,
                                                               Clock& clock) {
  const auto& s = profile.settings;
  auto get = [&](const char* key) {
    auto it = s.find(key);
    return it == s.end() ? std::string() : it->second;
  };
  const std::string where = "profile " + profile.name + " (" + std::string(origin) + ") in " + profile.where;
  const std::string key_id = get("aws_access_key_id");
  const std::string secret = get("aws_secret_access_key");
  if (!key_id.empty() || !secret.empty()) {
    if (key_id.empty() || secret.empty()) {
      return PermissionDeniedError(where + " has " + (key_id.empty() ? "aws_secret_access_key but no aws_access_key_id"
                                                                     : "aws_access_key_id but no aws_secret_access_key") +
                                   "; add the missing line");
    }
    return std::unique_ptr<AwsCredentialsProvider>(std::make_unique<ProfileFileCredentials>(
        profile.name, std::string(origin), profile, AwsCredentials{key_id, secret, get("aws_session_token")}, clock));
  }
  if (!get("role_arn").empty() && !get("web_identity_token_file").empty()) {
    std::string session = get("role_session_name");
    if (session.empty()) session = DefaultSessionName();
    return std::unique_ptr<AwsCredentialsProvider>(std::make_unique<RefreshingAwsCredentials>(
        MakeWebIdentityFetcher(get("role_arn"), get("web_identity_token_file"), session,
                               StsEndpoint(options.region), http),
        clock));
  }
  for (const char* unsupported : {"credential_process", "sso_session", "sso_start_url", "source_profile",
                                  "credential_source"}) {
    if (!get(unsupported).empty()) {
      return UnimplementedError(where + " uses " + unsupported +
                                ", which tensorfs does not support; give the profile aws_access_key_id and "
                                "aws_secret_access_key (e.g. from 'aws configure export-credentials --format "
                                "env'), or role_arn with web_identity_token_file");
    }
  }
  return PermissionDeniedError(where + " has no credentials: give it aws_access_key_id and "
                                       "aws_secret_access_key, or role_arn with web_identity_token_file");
}

// The error when the chain found nothing: everything it tried, and how to fix it.
Status NoCredentialsFound(const std::vector<std::string>& tried) {
  std::string list;
  for (const std::string& t : tried) list += (list.empty() ? "" : "; ") + t;
  return PermissionDeniedError("no AWS credentials found. Tried: " + list +
                               ". Fix: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, run 'aws configure' (or "
                               "name a profile with AWS_PROFILE or -o profile=NAME), or pass -o no_sign_request for "
                               "a public bucket");
}

// The chain's last source: instance metadata at `endpoint`, probed now (with
// a 1 s connect timeout; where it is `expected`, transient failures are
// retried for kImdsProbeWindow). `tried` lists the sources before it.
StatusOr<std::unique_ptr<AwsCredentialsProvider>> ProbeInstanceMetadata(const std::string& endpoint, bool expected,
                                                                        std::vector<std::string> tried,
                                                                        HttpClient& http, Clock& clock) {
  auto probe = std::make_unique<ImdsFetcher>(endpoint, http, kImdsProbeConnectTimeout);
  const Clock::TimePoint start = clock.Now();
  const Clock::TimePoint give_up = start + (expected ? kImdsProbeWindow : std::chrono::seconds(0));
  std::chrono::milliseconds backoff = kImdsProbeFirstBackoff;
  int probes = 1;
  StatusOr<TemporaryAwsCredentials> first = probe->Fetch();
  while (!first.ok() && IsTransient(first.status()) && clock.Now() + backoff <= give_up) {
    if (probes == 1) {
      spdlog::info("EC2 instance metadata at {} does not answer yet ({}); retrying for up to {} s", endpoint,
                   first.status().message(), kImdsProbeWindow.count());
    }
    clock.Sleep(backoff);
    backoff = std::min(2 * backoff, kImdsProbeMaxBackoff);
    ++probes;
    first = probe->Fetch();
  }
  if (!first.ok()) {
    std::string detail = first.status().message();
    if (probes > 1) {
      detail += "; " + std::to_string(probes) + " probes over " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(clock.Now() - start).count()) + " s";
    }
    tried.push_back(detail);
    return NoCredentialsFound(tried);
  }
  auto creds = std::make_unique<RefreshingAwsCredentials>(std::move(probe), clock);
  creds->Seed(*first);
  spdlog::info("using credentials from {}, valid for {} s", creds->Describe(), first->lifetime.count());
  return std::unique_ptr<AwsCredentialsProvider>(std::move(creds));
}

// Instance metadata probed at the first Get rather than when the chain is
// walked, so that a mount serving /dev/fd/N answers the kernel before any
// network call. Until one probe succeeds each Get probes (one at a time) and
// fails as the probe does.
class DeferredImdsCredentials : public AwsCredentialsProvider {
 public:
  DeferredImdsCredentials(std::string endpoint, bool expected, std::vector<std::string> tried, HttpClient& http,
                          Clock& clock)
      : endpoint_(std::move(endpoint)), expected_(expected), tried_(std::move(tried)), http_(http), clock_(clock) {}

  StatusOr<AwsCredentials> Get() override EXCLUDES(mu_) {
    AwsCredentialsProvider* found = nullptr;
    {
      MutexLock lock(mu_);
      if (found_ == nullptr) {
        ASSIGN_OR_RETURN(found_, ProbeInstanceMetadata(endpoint_, expected_, tried_, http_, clock_));
      }
      found = found_.get();
    }
    return found->Get();  // never reset once set
  }

  std::string Describe() const override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return found_ != nullptr ? found_->Describe()
                             : "EC2 instance metadata at " + endpoint_ + " (asked at the first request)";
  }

  bool Invalidate() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return found_ == nullptr || found_->Invalidate();
  }

 private:
  const std::string endpoint_;
  const bool expected_;
  const std::vector<std::string> tried_;
  HttpClient& http_;
  Clock& clock_;
  mutable Mutex mu_;  // held across the probe: later callers wait for its outcome
  std::unique_ptr<AwsCredentialsProvider> found_ GUARDED_BY(mu_);
};

}  // namespace

// ---------------------------------------------------------------- the cache

RefreshingAwsCredentials::RefreshingAwsCredentials(std::unique_ptr<AwsCredentialsFetcher> fetcher, Clock& clock)
    : fetcher_(std::move(fetcher)),
      cache_(
          [this]() -> StatusOr<ExpiringCache<AwsCredentials>::Fetched> {
            ASSIGN_OR_RETURN(TemporaryAwsCredentials c, fetcher_->Fetch());
            return ExpiringCache<AwsCredentials>::Fetched{std::move(c.credentials), c.lifetime};
          },
          "AWS credentials", fetcher_->Describe(), clock) {}

// ---------------------------------------------------------------- sources

std::string MaskAccessKeyId(std::string_view id) {
  if (id.size() <= 8) return std::string(id.size(), '*');
  return std::string(id.substr(0, 4)) + "..." + std::string(id.substr(id.size() - 4));
}

std::unique_ptr<AwsCredentialsProvider> MakeStaticAwsCredentials(AwsCredentials credentials,
                                                                 std::string description) {
  return std::make_unique<StaticAwsCredentials>(std::move(credentials), std::move(description));
}

std::unique_ptr<AwsCredentialsProvider> MakeAnonymousAwsCredentials() {
  return std::make_unique<AnonymousAwsCredentials>();
}

std::unique_ptr<AwsCredentialsFetcher> MakeWebIdentityFetcher(std::string role_arn, std::string token_file,
                                                              std::string session_name, std::string sts_endpoint,
                                                              HttpClient& http) {
  return std::make_unique<WebIdentityFetcher>(std::move(role_arn), std::move(token_file), std::move(session_name),
                                              std::move(sts_endpoint), http);
}

std::unique_ptr<AwsCredentialsFetcher> MakeContainerCredentialsFetcher(std::string url, std::string token,
                                                                       std::string token_file, HttpClient& http) {
  return std::make_unique<ContainerCredentialsFetcher>(std::move(url), std::move(token), std::move(token_file),
                                                       http);
}

std::unique_ptr<AwsCredentialsFetcher> MakeImdsFetcher(std::string endpoint, HttpClient& http,
                                                       std::chrono::milliseconds connect_timeout) {
  return std::make_unique<ImdsFetcher>(std::move(endpoint), http, connect_timeout);
}

IniSections ParseIni(std::string_view text) {
  IniSections sections;
  std::string section;
  bool in_section = false;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const bool indented = !line.empty() && (line.front() == ' ' || line.front() == '\t');
    const std::string trimmed = Trim(line);
    if (trimmed.empty() || trimmed.front() == '#' || trimmed.front() == ';') continue;
    if (trimmed.front() == '[' && trimmed.back() == ']') {
      section = Trim(std::string_view(trimmed).substr(1, trimmed.size() - 2));
      in_section = true;
      sections[section];
      continue;
    }
    if (!in_section || indented) continue;  // nested settings ("s3 =" followed by indented lines)
    const size_t eq = trimmed.find('=');
    if (eq == std::string::npos) continue;
    std::string key = Lower(Trim(std::string_view(trimmed).substr(0, eq)));
    std::string value = Trim(std::string_view(trimmed).substr(eq + 1));
    if (!key.empty()) sections[section][key] = value;
  }
  return sections;
}

AwsProfile LoadAwsProfile(std::string_view name) {
  AwsProfile p;
  p.name = std::string(name);
  if (p.name.empty()) p.name = GetEnv("AWS_PROFILE");
  if (p.name.empty()) p.name = GetEnv("AWS_DEFAULT_PROFILE");
  if (p.name.empty()) p.name = "default";
  const std::string home = GetEnv("HOME");
  p.credentials_file = GetEnv("AWS_SHARED_CREDENTIALS_FILE");
  if (p.credentials_file.empty() && !home.empty()) p.credentials_file = home + "/.aws/credentials";
  p.config_file = GetEnv("AWS_CONFIG_FILE");
  if (p.config_file.empty() && !home.empty()) p.config_file = home + "/.aws/config";

  auto merge = [&](const std::string& path, const std::string& section) {
    if (path.empty() || !FileExists(path)) return;
    StatusOr<std::string> text = ReadWholeFile(path);
    if (!text.ok()) return;
    IniSections sections = ParseIni(*text);
    auto it = sections.find(section);
    if (it == sections.end()) return;
    if (!p.found || p.where.empty()) p.where = path;
    p.found = true;
    for (const auto& [k, v] : it->second) p.settings.emplace(k, v);  // earlier files win
  };
  merge(p.credentials_file, p.name);
  merge(p.config_file, p.name == "default" ? std::string("default") : "profile " + p.name);
  if (p.name == "default" && !p.found) merge(p.config_file, "profile default");
  return p;
}

StatusOr<std::unique_ptr<AwsCredentialsProvider>> MakeAwsCredentials(const AwsChainOptions& options,
                                                                     HttpClient& http, Clock& clock) {
  if (options.no_sign_request) return MakeAnonymousAwsCredentials();
  if (!options.profile.empty()) {
    AwsProfile profile = LoadAwsProfile(options.profile);
    if (!profile.found) {
      return PermissionDeniedError("profile " + profile.name + " (-o profile) is in neither " +
                                   profile.credentials_file + " nor " + profile.config_file +
                                   " (as [profile " + profile.name + "]); check the name or the files");
    }
    return FromProfile(profile, "-o profile", options, http, clock);
  }

  std::vector<std::string> tried;
  // 1. The environment.
  const std::string key_id = GetEnv("AWS_ACCESS_KEY_ID");
  const std::string secret = GetEnv("AWS_SECRET_ACCESS_KEY");
  if (!key_id.empty() || !secret.empty()) {
    if (key_id.empty() || secret.empty()) {
      return PermissionDeniedError(std::string(key_id.empty() ? "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID"
                                                              : "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY") +
                                   " is not; set both (and AWS_SESSION_TOKEN for temporary keys), or neither");
    }
    return MakeStaticAwsCredentials({key_id, secret, GetEnv("AWS_SESSION_TOKEN")},
                                    "environment variables AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY (access key " +
                                        MaskAccessKeyId(key_id) + ")");
  }
  tried.push_back("environment variables (AWS_ACCESS_KEY_ID not set)");

  // 2. The shared files.
  {
    AwsProfile profile = LoadAwsProfile("");
    const bool named = !GetEnv("AWS_PROFILE").empty() || !GetEnv("AWS_DEFAULT_PROFILE").empty();
    if (profile.found) {
      const bool has_credentials = profile.settings.contains("aws_access_key_id") ||
                                   profile.settings.contains("aws_secret_access_key") ||
                                   profile.settings.contains("role_arn") ||
                                   profile.settings.contains("credential_process") ||
                                   profile.settings.contains("sso_session") ||
                                   profile.settings.contains("sso_start_url");
      if (has_credentials || named) return FromProfile(profile, named ? "AWS_PROFILE" : "default", options, http, clock);
      tried.push_back("profile " + profile.name + " in " + profile.where + " (no credentials in it)");
    } else if (named) {
      return PermissionDeniedError("profile " + profile.name + " (AWS_PROFILE) is in neither " +
                                   profile.credentials_file + " nor " + profile.config_file +
                                   "; check the name or the files");
    } else {
      tried.push_back("profile default in " + profile.credentials_file + " and " + profile.config_file +
                      " (absent)");
    }
  }

  // 3. Web identity.
  const std::string token_file = GetEnv("AWS_WEB_IDENTITY_TOKEN_FILE");
  const std::string role_arn = GetEnv("AWS_ROLE_ARN");
  if (!token_file.empty() || !role_arn.empty()) {
    if (token_file.empty() || role_arn.empty()) {
      return PermissionDeniedError(std::string(token_file.empty() ? "AWS_ROLE_ARN is set but AWS_WEB_IDENTITY_TOKEN_FILE"
                                                                  : "AWS_WEB_IDENTITY_TOKEN_FILE is set but AWS_ROLE_ARN") +
                                   " is not; web identity credentials need both");
    }
    std::string session = GetEnv("AWS_ROLE_SESSION_NAME");
    if (session.empty()) session = DefaultSessionName();
    return std::unique_ptr<AwsCredentialsProvider>(std::make_unique<RefreshingAwsCredentials>(
        MakeWebIdentityFetcher(role_arn, token_file, session, StsEndpoint(options.region), http), clock));
  }
  tried.push_back("web identity (AWS_WEB_IDENTITY_TOKEN_FILE not set)");

  // 4. Container credentials.
  std::string container_url = GetEnv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
  if (const std::string relative = GetEnv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"); !relative.empty()) {
    container_url = std::string(kContainerCredentialsHost) + (relative.starts_with('/') ? "" : "/") + relative;
  }
  if (!container_url.empty()) {
    if (!IsAllowedContainerHost(container_url)) {
      return PermissionDeniedError("AWS_CONTAINER_CREDENTIALS_FULL_URI " + container_url +
                                   " is plain http to a host other than a loopback address or the EKS Pod "
                                   "Identity agent (169.254.170.23); use https");
    }
    return std::unique_ptr<AwsCredentialsProvider>(std::make_unique<RefreshingAwsCredentials>(
        MakeContainerCredentialsFetcher(container_url, GetEnv("AWS_CONTAINER_AUTHORIZATION_TOKEN"),
                                        GetEnv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"), http),
        clock));
  }
  tried.push_back("container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI and _RELATIVE_URI not set)");

  // 5. EC2 instance metadata.
  if (Lower(GetEnv("AWS_EC2_METADATA_DISABLED")) == "true") {
    tried.push_back("EC2 instance metadata (AWS_EC2_METADATA_DISABLED=true)");
    return NoCredentialsFound(tried);
  }
  std::string endpoint = GetEnv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
  const bool expected = !endpoint.empty() || !GetEnv("KUBERNETES_SERVICE_HOST").empty();
  if (endpoint.empty()) endpoint = std::string(kDefaultImdsEndpoint);
  while (endpoint.ends_with('/')) endpoint.pop_back();
  if (options.defer_instance_metadata) {
    return std::unique_ptr<AwsCredentialsProvider>(
        std::make_unique<DeferredImdsCredentials>(endpoint, expected, std::move(tried), http, clock));
  }
  return ProbeInstanceMetadata(endpoint, expected, std::move(tried), http, clock);
}

}  // namespace tensorfs
