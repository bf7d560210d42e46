#include "core/store/gcs/credentials.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/store/gcs/gcs_errors.h"
#include "core/store/http/encoding.h"

namespace tensorfs {
namespace {

using nlohmann::json;

constexpr std::chrono::seconds kJwtLifetime{3600};
constexpr std::chrono::milliseconds kTokenRequestTimeout{30000};
constexpr std::chrono::milliseconds kMetadataProbeConnectTimeout{1000};
constexpr std::chrono::milliseconds kMetadataConnectTimeout{5000};

std::string OpenSslError() {
  unsigned long e = ERR_get_error();
  if (e == 0) return "unknown OpenSSL error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

struct PkeyDeleter {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;

StatusOr<PkeyPtr> LoadPrivateKey(const std::string& pem, std::string_view source) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  if (bio == nullptr) return InternalError("out of memory loading the private key of " + std::string(source));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(bio, nullptr, nullptr, nullptr);
  BIO_free(bio);
  if (key == nullptr) {
    // The OpenSSL reason ("no start line", "bad base64 decode") never quotes key bytes.
    return InvalidArgumentError("the private_key in " + std::string(source) +
                                " is not a PEM private key (" + OpenSslError() +
                                "); download a new JSON key for the service account");
  }
  PkeyPtr owned(key);
  if (EVP_PKEY_get_base_id(key) != EVP_PKEY_RSA) {
    return InvalidArgumentError("the private_key in " + std::string(source) +
                                " is not an RSA key; GCS service-account keys are RSA (RS256)");
  }
  return owned;
}

// Reads a whole file. Errors name the file and the OS reason.
StatusOr<std::string> ReadFile(const std::string& path, std::string_view origin) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgumentError("cannot read credentials file " + path + " (from " + std::string(origin) +
                                "): " + std::strerror(errno));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WarnIfReadableByOthers(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    spdlog::warn("credentials file {} is readable by group or others (mode {:o}); run: chmod 600 {}", path,
                 st.st_mode & 0777, path);
  }
}

StatusOr<json> ParseJsonFile(std::string_view text, std::string_view source) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    // Only the position: the exception text may quote the file, which holds a key.
    return InvalidArgumentError("credentials file " + std::string(source) + " is not valid JSON (error at byte " +
                                std::to_string(e.byte) + ")");
  }
}

StatusOr<std::string> RequiredString(const json& j, std::string_view field, std::string_view source,
                                     std::string_view kind) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string() || it->get<std::string>().empty()) {
    return InvalidArgumentError(std::string(kind) + " file " + std::string(source) + " has no \"" +
                                std::string(field) + "\" field; download the file again");
  }
  return it->get<std::string>();
}

std::string OptionalString(const json& j, std::string_view field, std::string_view fallback) {
  auto it = j.find(field);
  if (it == j.end() || !it->is_string() || it->get<std::string>().empty()) return std::string(fallback);
  return it->get<std::string>();
}

StatusOr<AuthorizedUserCredentials> ParseAuthorizedUser(const json& j, std::string_view source) {
  AuthorizedUserCredentials c;
  constexpr std::string_view kKind = "authorized_user credentials";
  ASSIGN_OR_RETURN(c.client_id, RequiredString(j, "client_id", source, kKind));
  ASSIGN_OR_RETURN(c.client_secret, RequiredString(j, "client_secret", source, kKind));
  ASSIGN_OR_RETURN(c.refresh_token, RequiredString(j, "refresh_token", source, kKind));
  c.token_uri = OptionalString(j, "token_uri", kDefaultTokenUri);
  c.source = std::string(source);
  return c;
}

// Interprets a token endpoint's reply. `fix` says what to do when the
// credentials are refused. Messages do not say which endpoint: callers add that.
StatusOr<AccessToken> ParseTokenResponse(const HttpResponse& r, std::string_view fix) {
  if (!r.transport_ok()) {
    return r.error == TransportError::kTimeout ? DeadlineExceededError(r.Summary()) : UnavailableError(r.Summary());
  }
  std::string server = ServerErrorMessage(r.body);
  if (!server.empty()) server = " (" + server + ")";
  if (IsRetryableHttpStatus(r.status)) return UnavailableError("HTTP " + std::to_string(r.status) + server);
  if (r.status != 200) {
    return PermissionDeniedError("refused with HTTP " + std::to_string(r.status) + server + "; " + std::string(fix));
  }
  json j = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("access_token") || !j["access_token"].is_string() ||
      j["access_token"].get<std::string>().empty()) {
    return UnavailableError("the reply has no access_token");
  }
  AccessToken token;
  token.value = j["access_token"].get<std::string>();
  if (auto it = j.find("expires_in"); it != j.end() && it->is_number()) {
    token.lifetime = std::chrono::seconds(std::max<int64_t>(1, it->get<int64_t>()));
  }
  return token;
}

StatusOr<AccessToken> WithContext(StatusOr<AccessToken> r, const std::string& context) {
  if (r.ok()) return r;
  return r.status().WithContext(context);
}

StatusOr<AccessToken> FetchMetadataToken(const std::string& host, HttpClient& http,
                                         std::chrono::milliseconds connect_timeout) {
  HttpRequest req;
  req.url = "http://" + host + "/computeMetadata/v1/instance/service-accounts/default/token";
  req.headers = {"Metadata-Flavor: Google"};
  req.connect_timeout = connect_timeout;
  req.total_timeout = kTokenRequestTimeout;
  req.max_body_bytes = 1 << 20;
  HttpResponse r = http.Perform(req);
  return ParseTokenResponse(r,
                            "check that the VM or GKE workload has a service account attached with the storage "
                            "read scope, or pass -o key_file=PATH");
}

std::string FormBody(std::initializer_list<std::pair<std::string_view, std::string_view>> fields) {
  std::string body;
  for (const auto& [k, v] : fields) {
    if (!body.empty()) body += '&';
    body += PercentEncode(k);
    body += '=';
    body += PercentEncode(v);
  }
  return body;
}

class ServiceAccountFetcher : public TokenFetcher {
 public:
  ServiceAccountFetcher(ServiceAccountKey key, std::string description, HttpClient& http)
      : key_(std::move(key)), description_(std::move(description)), http_(http) {}

  StatusOr<AccessToken> Fetch() override {
    ASSIGN_OR_RETURN(std::string jwt, MakeServiceAccountJwt(key_, std::chrono::system_clock::now()));
    HttpRequest req;
    req.method = "POST";
    req.url = key_.token_uri;
    req.headers = {"Content-Type: application/x-www-form-urlencoded"};
    req.body = FormBody({{"grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer"}, {"assertion", jwt}});
    req.total_timeout = kTokenRequestTimeout;
    req.max_body_bytes = 1 << 20;
    HttpResponse r = http_.Perform(req);
    return WithContext(
        ParseTokenResponse(r,
                           "the key may have been deleted or disabled (create a new key under IAM > Service "
                           "accounts > Keys), or this machine's clock is wrong"),
        "getting an access token from " + key_.token_uri + " for " + description_);
  }
  std::string Describe() const override { return description_; }

 private:
  const ServiceAccountKey key_;
  const std::string description_;
  HttpClient& http_;
};

class AuthorizedUserFetcher : public TokenFetcher {
 public:
  AuthorizedUserFetcher(AuthorizedUserCredentials creds, std::string description, HttpClient& http)
      : creds_(std::move(creds)), description_(std::move(description)), http_(http) {}

  StatusOr<AccessToken> Fetch() override {
    HttpRequest req;
    req.method = "POST";
    req.url = creds_.token_uri;
    req.headers = {"Content-Type: application/x-www-form-urlencoded"};
    req.body = FormBody({{"grant_type", "refresh_token"},
                         {"client_id", creds_.client_id},
                         {"client_secret", creds_.client_secret},
                         {"refresh_token", creds_.refresh_token}});
    req.total_timeout = kTokenRequestTimeout;
    req.max_body_bytes = 1 << 20;
    HttpResponse r = http_.Perform(req);
    return WithContext(ParseTokenResponse(r,
                                          "the login may have expired or been revoked: run 'gcloud auth "
                                          "application-default login' again, or use a service-account key "
                                          "(-o key_file=PATH)"),
                       "getting an access token from " + creds_.token_uri + " for " + description_);
  }
  std::string Describe() const override { return description_; }

 private:
  const AuthorizedUserCredentials creds_;
  const std::string description_;
  HttpClient& http_;
};

class MetadataServerFetcher : public TokenFetcher {
 public:
  MetadataServerFetcher(std::string host, HttpClient& http, std::chrono::milliseconds connect_timeout)
      : host_(std::move(host)), http_(http), connect_timeout_(connect_timeout) {}

  StatusOr<AccessToken> Fetch() override {
    return WithContext(FetchMetadataToken(host_, http_, connect_timeout_),
                       "getting an access token from " + Describe());
  }
  std::string Describe() const override { return "the metadata server at " + host_; }

 private:
  const std::string host_;
  HttpClient& http_;
  const std::chrono::milliseconds connect_timeout_;
};

class AnonymousCredentials : public CredentialsProvider {
 public:
  StatusOr<std::string> AuthorizationHeader() override { return std::string(); }
  std::string Describe() const override { return "anonymous access"; }
  void Invalidate() override {}
  bool anonymous() const override { return true; }
};

std::string GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

CachingCredentials::CachingCredentials(std::unique_ptr<TokenFetcher> fetcher, Clock& clock)
    : fetcher_(std::move(fetcher)),
      description_(fetcher_->Describe()),
      cache_(
          [this]() -> StatusOr<ExpiringCache<std::string>::Fetched> {
            ASSIGN_OR_RETURN(AccessToken token, fetcher_->Fetch());
            return ExpiringCache<std::string>::Fetched{std::move(token.value), token.lifetime};
          },
          "access token", description_, clock) {}

StatusOr<std::string> CachingCredentials::AuthorizationHeader() {
  ASSIGN_OR_RETURN(std::string token, cache_.Get());
  return "Authorization: Bearer " + token;
}

StatusOr<ServiceAccountKey> ParseServiceAccountKey(std::string_view json_text, std::string_view source) {
  ASSIGN_OR_RETURN(json j, ParseJsonFile(json_text, source));
  if (!j.is_object()) {
    return InvalidArgumentError("credentials file " + std::string(source) + " is not a JSON object");
  }
  constexpr std::string_view kKind = "service-account key";
  ServiceAccountKey key;
  ASSIGN_OR_RETURN(key.client_email, RequiredString(j, "client_email", source, kKind));
  ASSIGN_OR_RETURN(key.private_key, RequiredString(j, "private_key", source, kKind));
  key.private_key_id = OptionalString(j, "private_key_id", "");
  key.token_uri = OptionalString(j, "token_uri", kDefaultTokenUri);
  key.source = std::string(source);
  ASSIGN_OR_RETURN(PkeyPtr pkey, LoadPrivateKey(key.private_key, source));
  (void)pkey;
  return key;
}

StatusOr<std::string> MakeServiceAccountJwt(const ServiceAccountKey& key,
                                            std::chrono::system_clock::time_point now) {
  json header = {{"alg", "RS256"}, {"typ", "JWT"}};
  if (!key.private_key_id.empty()) header["kid"] = key.private_key_id;
  const int64_t iat = std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count();
  json claims = {{"iss", key.client_email},
                 {"scope", kReadOnlyScope},
                 {"aud", key.token_uri},
                 {"iat", iat},
                 {"exp", iat + kJwtLifetime.count()}};
  const std::string signing_input = Base64UrlEncode(header.dump()) + "." + Base64UrlEncode(claims.dump());

  ASSIGN_OR_RETURN(PkeyPtr pkey, LoadPrivateKey(key.private_key, key.source));
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return InternalError("out of memory signing a JWT");
  std::string signature;
  size_t sig_len = 0;
  const auto* data = reinterpret_cast<const unsigned char*>(signing_input.data());
  bool ok = EVP_DigestSignInit(ctx, nullptr, EVP_sha256(), nullptr, pkey.get()) == 1 &&
            EVP_DigestSign(ctx, nullptr, &sig_len, data, signing_input.size()) == 1;
  if (ok) {
    signature.resize(sig_len);
    ok = EVP_DigestSign(ctx, reinterpret_cast<unsigned char*>(signature.data()), &sig_len, data,
                        signing_input.size()) == 1;
    signature.resize(sig_len);
  }
  EVP_MD_CTX_free(ctx);
  if (!ok) {
    return InvalidArgumentError("cannot sign with the private_key in " + key.source + " (" + OpenSslError() + ")");
  }
  return signing_input + "." + Base64UrlEncode(signature);
}

std::unique_ptr<TokenFetcher> MakeServiceAccountFetcher(ServiceAccountKey key, std::string description,
                                                       HttpClient& http) {
  return std::make_unique<ServiceAccountFetcher>(std::move(key), std::move(description), http);
}

std::unique_ptr<TokenFetcher> MakeAuthorizedUserFetcher(AuthorizedUserCredentials creds, std::string description,
                                                       HttpClient& http) {
  return std::make_unique<AuthorizedUserFetcher>(std::move(creds), std::move(description), http);
}

std::unique_ptr<TokenFetcher> MakeMetadataServerFetcher(std::string host, HttpClient& http,
                                                       std::chrono::milliseconds connect_timeout) {
  return std::make_unique<MetadataServerFetcher>(std::move(host), http, connect_timeout);
}

std::unique_ptr<CredentialsProvider> MakeAnonymousCredentials() { return std::make_unique<AnonymousCredentials>(); }

StatusOr<std::unique_ptr<CredentialsProvider>> MakeCredentialsFromFile(const std::string& path,
                                                                       std::string_view origin, HttpClient& http,
                                                                       Clock& clock) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path, origin));
  WarnIfReadableByOthers(path);
  ASSIGN_OR_RETURN(json j, ParseJsonFile(text, path));
  if (!j.is_object()) return InvalidArgumentError("credentials file " + path + " is not a JSON object");
  const std::string type = OptionalString(j, "type", "");
  const bool adc_file = origin == "gcloud ADC file";
  if (type == "service_account") {
    ASSIGN_OR_RETURN(ServiceAccountKey key, ParseServiceAccountKey(text, path));
    std::string description = adc_file ? "gcloud ADC file " + path + " (service account " + key.client_email + ")"
                                        : "service account key " + path + " (client_email " + key.client_email + ")";
    return std::unique_ptr<CredentialsProvider>(std::make_unique<CachingCredentials>(
        MakeServiceAccountFetcher(std::move(key), std::move(description), http), clock));
  }
  if (type == "authorized_user") {
    ASSIGN_OR_RETURN(AuthorizedUserCredentials creds, ParseAuthorizedUser(j, path));
    std::string description = (adc_file ? "gcloud ADC file " + path + " (authorized_user, client_id "
                                        : "authorized_user credentials " + path + " (client_id ") +
                              creds.client_id + ")";
    return std::unique_ptr<CredentialsProvider>(std::make_unique<CachingCredentials>(
        MakeAuthorizedUserFetcher(std::move(creds), std::move(description), http), clock));
  }
  if (type.empty()) {
    return InvalidArgumentError("credentials file " + path + " (from " + std::string(origin) +
                                ") has no \"type\" field; expected a service-account key (\"type\": "
                                "\"service_account\") or a gcloud ADC file (\"type\": \"authorized_user\")");
  }
  return UnimplementedError("credentials file " + path + " (from " + std::string(origin) + ") has type \"" + type +
                            "\", which tensorfs does not support; use a service-account key or run "
                            "'gcloud auth application-default login'");
}

StatusOr<std::unique_ptr<CredentialsProvider>> MakeCredentials(const GcsOptions& options, HttpClient& http,
                                                               Clock& clock) {
  if (options.anonymous) return MakeAnonymousCredentials();
  if (!options.key_file.empty()) return MakeCredentialsFromFile(options.key_file, "-o key_file", http, clock);

  std::vector<std::string> tried;
  if (std::string env = GetEnv("GOOGLE_APPLICATION_CREDENTIALS"); !env.empty()) {
    return MakeCredentialsFromFile(env, "GOOGLE_APPLICATION_CREDENTIALS", http, clock);
  }
  tried.push_back("GOOGLE_APPLICATION_CREDENTIALS (not set)");

  std::string config_dir = GetEnv("CLOUDSDK_CONFIG");
  if (config_dir.empty()) {
    std::string home = GetEnv("HOME");
    if (!home.empty()) config_dir = home + "/.config/gcloud";
  }
  if (!config_dir.empty()) {
    std::string adc = config_dir + "/application_default_credentials.json";
    if (FileExists(adc)) return MakeCredentialsFromFile(adc, "gcloud ADC file", http, clock);
    tried.push_back("gcloud ADC file " + adc + " (absent)");
  }

  std::string host = GetEnv("GCE_METADATA_HOST");
  if (host.empty()) host = std::string(kDefaultMetadataHost);
  auto transient = [](const StatusOr<AccessToken>& t) {
    return !t.ok() && (t.status().code() == ErrorCode::kUnavailable || t.status().code() == ErrorCode::kDeadlineExceeded);
  };
  // In a pod the metadata server may not answer yet: wait for it, within a bound.
  const bool expected = !GetEnv("KUBERNETES_SERVICE_HOST").empty() || !GetEnv("GCE_METADATA_HOST").empty();
  const Clock::TimePoint start = clock.Now();
  const Clock::TimePoint give_up = start + (expected ? kMetadataProbeWindow : std::chrono::seconds(0));
  std::chrono::milliseconds backoff = kMetadataProbeFirstBackoff;
  int probes = 1;
  StatusOr<AccessToken> token = FetchMetadataToken(host, http, kMetadataProbeConnectTimeout);
  while (transient(token) && clock.Now() + backoff <= give_up) {
    if (probes == 1) {
      spdlog::info("the metadata server at {} does not answer yet ({}); retrying for up to {} s", host,
                   token.status().message(), kMetadataProbeWindow.count());
    }
    clock.Sleep(backoff);
    backoff = std::min(2 * backoff, kMetadataProbeMaxBackoff);
    ++probes;
    token = FetchMetadataToken(host, http, kMetadataProbeConnectTimeout);
  }
  if (probes > 1 && token.ok()) {
    spdlog::info("the metadata server at {} answered after {} probes", host, probes);
  }
  if (transient(token)) {
    std::string detail = token.status().message();
    if (probes > 1) {
      detail += "; " + std::to_string(probes) + " probes over " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(clock.Now() - start).count()) + " s";
    }
    tried.push_back("the metadata server at " + host + " (" + detail + ")");
    std::string list;
    for (const std::string& t : tried) list += (list.empty() ? "" : "; ") + t;
    return PermissionDeniedError(
        "no Google Cloud credentials found. Tried: -o key_file (not given); " + list +
        ". Fix: run 'gcloud auth application-default login', set GOOGLE_APPLICATION_CREDENTIALS to a "
        "service-account key file, pass -o key_file=PATH, or pass -o anonymous for a public bucket");
  }
  if (!token.ok()) return token.status().WithContext("getting an access token from the metadata server at " + host);
  auto creds = std::make_unique<CachingCredentials>(MakeMetadataServerFetcher(host, http, kMetadataConnectTimeout),
                                                    clock);
  creds->Seed(*token);
  spdlog::info("using access tokens from {}, first expires in {} s", creds->Describe(), token->lifetime.count());
  return std::unique_ptr<CredentialsProvider>(std::move(creds));
}

}  // namespace tensorfs
