#include "core/store/gcs/credentials.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/store/gcs/encoding.h"
#include "tests/core/store/gcs/fakes.h"
#include "tests/core/store/gcs/scoped_env.h"
#include "tests/core/store/gcs/test_keys.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::tensorfs::testing::Base64UrlDecode;
using ::tensorfs::testing::Deliver;
using ::tensorfs::testing::FakeClock;
using ::tensorfs::testing::FakeHttpClient;
using ::tensorfs::testing::FakeReply;
using ::tensorfs::testing::RequestHeader;
using ::tensorfs::testing::ScopedEnv;
using ::tensorfs::testing::ServiceAccountJson;
using ::tensorfs::testing::TestKey;
using ::tensorfs::testing::VerifyJwt;
using ::tensorfs::testing::WriteKeyFile;
using nlohmann::json;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "gcs_cred_test.XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Captures what spdlog's default logger writes while it lives.
class LogCapture {
 public:
  LogCapture() : previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)));
  }
  ~LogCapture() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

FakeReply TokenReply(const std::string& token, int expires_in = 3600) {
  return FakeReply{.status = 200,
                   .body = json{{"access_token", token}, {"expires_in", expires_in}, {"token_type", "Bearer"}}.dump()};
}

// Environment with no ambient credentials: tests opt into each source.
class CredentialsTest : public ::testing::Test {
 protected:
  TempDir dir_;
  ScopedEnv gac_{"GOOGLE_APPLICATION_CREDENTIALS", std::nullopt};
  ScopedEnv cloudsdk_{"CLOUDSDK_CONFIG", std::nullopt};
  ScopedEnv home_{"HOME", dir_.path()};
  ScopedEnv metadata_{"GCE_METADATA_HOST", std::nullopt};
  ScopedEnv kubernetes_{"KUBERNETES_SERVICE_HOST", std::nullopt};
  FakeHttpClient http_;
  FakeClock clock_;
};

TEST(JwtTest, HeaderClaimsAndSignatureAreRight) {
  ServiceAccountKey key;
  key.client_email = "sa@proj.iam.gserviceaccount.com";
  key.private_key = TestKey().private_pem;
  key.private_key_id = "kid-123";
  key.token_uri = "https://oauth2.googleapis.com/token";
  key.source = "/k.json";
  const auto now = std::chrono::system_clock::time_point(std::chrono::seconds(1700000000));
  StatusOr<std::string> jwt = MakeServiceAccountJwt(key, now);
  ASSERT_TRUE(jwt.ok()) << jwt.status().ToString();
  EXPECT_EQ(jwt->find('='), std::string::npos);  // base64url without padding

  size_t d1 = jwt->find('.'), d2 = jwt->rfind('.');
  ASSERT_NE(d1, d2);
  json header = json::parse(Base64UrlDecode(jwt->substr(0, d1)));
  json claims = json::parse(Base64UrlDecode(jwt->substr(d1 + 1, d2 - d1 - 1)));
  EXPECT_EQ(header, (json{{"alg", "RS256"}, {"typ", "JWT"}, {"kid", "kid-123"}}));
  EXPECT_EQ(claims["iss"], "sa@proj.iam.gserviceaccount.com");
  EXPECT_EQ(claims["scope"], "https://www.googleapis.com/auth/devstorage.read_only");
  EXPECT_EQ(claims["aud"], "https://oauth2.googleapis.com/token");
  EXPECT_EQ(claims["iat"], 1700000000);
  EXPECT_EQ(claims["exp"], 1700003600);
  EXPECT_EQ(Base64UrlDecode(jwt->substr(d2 + 1)).size(), 256u);  // RSA-2048 signature

  EXPECT_TRUE(VerifyJwt(*jwt, TestKey().pkey));
  // A changed claim no longer verifies.
  std::string forged = Base64UrlEncode(R"({"alg":"RS256"})") + "." +
                       Base64UrlEncode(R"({"iss":"evil@x"})") + jwt->substr(d2);
  EXPECT_FALSE(VerifyJwt(forged, TestKey().pkey));
}

TEST(ParseServiceAccountKeyTest, NotJsonNamesTheFileButNotItsContents) {
  Status s = ParseServiceAccountKey("{\"private_key\": \"SECRET-MATERIAL", "/keys/k.json").status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("/keys/k.json is not valid JSON"));
  EXPECT_THAT(s.message(), Not(HasSubstr("SECRET")));
}

TEST(ParseServiceAccountKeyTest, MissingFieldIsNamed) {
  json j = ServiceAccountJson("http://x/token");
  j.erase("client_email");
  Status s = ParseServiceAccountKey(j.dump(), "/keys/k.json").status();
  EXPECT_THAT(s.message(), HasSubstr("/keys/k.json has no \"client_email\" field"));
}

TEST(ParseServiceAccountKeyTest, UnparsablePemIsReportedWithoutQuotingIt) {
  json j = ServiceAccountJson("http://x/token");
  j["private_key"] = "-----BEGIN PRIVATE KEY-----\nTOPSECRETbutnotbase64!!\n-----END PRIVATE KEY-----\n";
  Status s = ParseServiceAccountKey(j.dump(), "/keys/k.json").status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("the private_key in /keys/k.json is not a PEM private key"));
  EXPECT_THAT(s.message(), Not(HasSubstr("TOPSECRET")));
}

TEST(ParseServiceAccountKeyTest, DefaultsTheTokenUri) {
  json j = ServiceAccountJson("x");
  j.erase("token_uri");
  StatusOr<ServiceAccountKey> key = ParseServiceAccountKey(j.dump(), "/k.json");
  ASSERT_TRUE(key.ok()) << key.status().ToString();
  EXPECT_EQ(key->token_uri, "https://oauth2.googleapis.com/token");
}

TEST_F(CredentialsTest, ServiceAccountKeyIsExchangedWithASignedJwt) {
  const std::string path = dir_.File("key.json");
  WriteKeyFile(path, ServiceAccountJson("http://127.0.0.1:1/token").dump());
  http_.Push(TokenReply("tok-A"));
  LogCapture log;
  GcsOptions options;
  options.key_file = path;
  StatusOr<std::unique_ptr<CredentialsProvider>> creds = MakeCredentials(options, http_, clock_);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Describe(), "service account key " + path + " (client_email sa@proj.iam.gserviceaccount.com)");
  EXPECT_TRUE(http_.requests().empty());  // nothing is fetched until needed
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-A");
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-A");  // cached

  ASSERT_EQ(http_.requests().size(), 1u);
  const HttpRequest req = http_.requests()[0];
  EXPECT_EQ(req.method, "POST");
  EXPECT_EQ(req.url, "http://127.0.0.1:1/token");
  EXPECT_EQ(RequestHeader(req, "Content-Type"), "application/x-www-form-urlencoded");
  const std::string prefix = "grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer&assertion=";
  ASSERT_THAT(req.body, ::testing::StartsWith(prefix));
  EXPECT_TRUE(VerifyJwt(req.body.substr(prefix.size()), TestKey().pkey));

  EXPECT_THAT(log.text(), HasSubstr("refreshed access token via service account key"));
  EXPECT_THAT(log.text(), HasSubstr("expires in 3600 s"));
  EXPECT_THAT(log.text(), Not(HasSubstr("tok-A")));
  EXPECT_THAT(log.text(), Not(HasSubstr("PRIVATE KEY")));
  EXPECT_THAT(log.text(), Not(HasSubstr("readable by group")));
}

TEST_F(CredentialsTest, KeyReadableByOthersDrawsAWarningWithTheFix) {
  const std::string path = dir_.File("key.json");
  WriteKeyFile(path, ServiceAccountJson("http://127.0.0.1:1/token").dump(), 0644);
  LogCapture log;
  GcsOptions options;
  options.key_file = path;
  ASSERT_TRUE(MakeCredentials(options, http_, clock_).ok());
  EXPECT_THAT(log.text(), HasSubstr("credentials file " + path + " is readable by group or others"));
  EXPECT_THAT(log.text(), HasSubstr("chmod 600 " + path));
}

TEST_F(CredentialsTest, RejectedKeySaysWhichFileAndWhatToDo) {
  const std::string path = dir_.File("key.json");
  WriteKeyFile(path, ServiceAccountJson("http://127.0.0.1:1/token").dump());
  http_.Push(FakeReply{.status = 400,
                       .body = R"({"error":"invalid_grant","error_description":"Invalid JWT Signature."})"});
  GcsOptions options;
  options.key_file = path;
  auto creds = MakeCredentials(options, http_, clock_);
  ASSERT_TRUE(creds.ok());
  Status s = (*creds)->AuthorizationHeader().status();
  EXPECT_EQ(s.code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("service account key " + path));
  EXPECT_THAT(s.message(), HasSubstr("refused with HTTP 400 (invalid_grant: Invalid JWT Signature.)"));
  EXPECT_THAT(s.message(), HasSubstr("create a new key"));
}

TEST_F(CredentialsTest, UnreachableTokenEndpointIsTransient) {
  const std::string path = dir_.File("key.json");
  WriteKeyFile(path, ServiceAccountJson("http://127.0.0.1:1/token").dump());
  http_.Push(FakeReply{.status = 503});
  http_.Push(FakeReply{.error = TransportError::kConnectFailed, .error_message = "Connection refused"});
  GcsOptions options;
  options.key_file = path;
  auto creds = MakeCredentials(options, http_, clock_);
  ASSERT_TRUE(creds.ok());
  EXPECT_EQ((*creds)->AuthorizationHeader().status().code(), ErrorCode::kUnavailable);
  Status s = (*creds)->AuthorizationHeader().status();
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("Connection refused"));
}

TEST_F(CredentialsTest, BadKeyFilesGiveClearErrors) {
  GcsOptions options;
  options.key_file = dir_.File("missing.json");
  EXPECT_THAT(MakeCredentials(options, http_, clock_).status().message(),
              HasSubstr("cannot read credentials file " + options.key_file + " (from -o key_file)"));
  options.key_file = dir_.File("notjson.json");
  WriteKeyFile(options.key_file, "this is not json");
  EXPECT_THAT(MakeCredentials(options, http_, clock_).status().message(), HasSubstr("is not valid JSON"));
  options.key_file = dir_.File("notype.json");
  WriteKeyFile(options.key_file, R"({"client_email": "x"})");
  EXPECT_THAT(MakeCredentials(options, http_, clock_).status().message(), HasSubstr("has no \"type\" field"));
  options.key_file = dir_.File("external.json");
  WriteKeyFile(options.key_file, R"({"type": "external_account"})");
  Status s = MakeCredentials(options, http_, clock_).status();
  EXPECT_EQ(s.code(), ErrorCode::kUnimplemented);
  EXPECT_THAT(s.message(), HasSubstr("\"external_account\""));
}

TEST_F(CredentialsTest, AuthorizedUserUsesItsRefreshToken) {
  const std::string path = dir_.File("adc.json");
  WriteKeyFile(path, json{{"type", "authorized_user"},
                       {"client_id", "cid.apps.googleusercontent.com"},
                       {"client_secret", "s3cr3t"},
                       {"refresh_token", "1//refresh"}}
                      .dump());
  ScopedEnv env("GOOGLE_APPLICATION_CREDENTIALS", path);
  http_.Push(TokenReply("tok-U"));
  auto creds = MakeCredentials(GcsOptions{}, http_, clock_);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Describe(), "authorized_user credentials " + path + " (client_id cid.apps.googleusercontent.com)");
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-U");
  const HttpRequest req = http_.requests()[0];
  EXPECT_EQ(req.url, "https://oauth2.googleapis.com/token");
  EXPECT_EQ(req.body,
            "grant_type=refresh_token&client_id=cid.apps.googleusercontent.com&client_secret=s3cr3t&"
            "refresh_token=1%2F%2Frefresh");
}

TEST_F(CredentialsTest, KeyFileOptionWinsOverTheEnvironment) {
  const std::string explicit_key = dir_.File("explicit.json");
  const std::string env_key = dir_.File("env.json");
  WriteKeyFile(explicit_key, ServiceAccountJson("http://h/token", "explicit@p").dump());
  WriteKeyFile(env_key, ServiceAccountJson("http://h/token", "env@p").dump());
  ScopedEnv env("GOOGLE_APPLICATION_CREDENTIALS", env_key);
  GcsOptions options;
  options.key_file = explicit_key;
  EXPECT_THAT(MakeCredentials(options, http_, clock_).value()->Describe(), HasSubstr("explicit@p"));
  EXPECT_THAT(MakeCredentials(GcsOptions{}, http_, clock_).value()->Describe(), HasSubstr("env@p"));
}

TEST_F(CredentialsTest, EnvironmentWinsOverTheGcloudFile) {
  std::filesystem::create_directories(dir_.File(".config/gcloud"));
  WriteKeyFile(dir_.File(".config/gcloud/application_default_credentials.json"),
            ServiceAccountJson("http://h/token", "gcloud@p").dump());
  const std::string env_key = dir_.File("env.json");
  WriteKeyFile(env_key, ServiceAccountJson("http://h/token", "env@p").dump());
  {
    ScopedEnv env("GOOGLE_APPLICATION_CREDENTIALS", env_key);
    EXPECT_THAT(MakeCredentials(GcsOptions{}, http_, clock_).value()->Describe(), HasSubstr("env@p"));
  }
  EXPECT_EQ(MakeCredentials(GcsOptions{}, http_, clock_).value()->Describe(),
            "gcloud ADC file " + dir_.File(".config/gcloud/application_default_credentials.json") +
                " (service account gcloud@p)");
}

TEST_F(CredentialsTest, CloudsdkConfigLocatesTheGcloudFile) {
  std::filesystem::create_directories(dir_.File("sdk"));
  WriteKeyFile(dir_.File("sdk/application_default_credentials.json"),
            json{{"type", "authorized_user"}, {"client_id", "c"}, {"client_secret", "s"}, {"refresh_token", "r"}}
                .dump());
  ScopedEnv env("CLOUDSDK_CONFIG", dir_.File("sdk"));
  EXPECT_EQ(MakeCredentials(GcsOptions{}, http_, clock_).value()->Describe(),
            "gcloud ADC file " + dir_.File("sdk/application_default_credentials.json") +
                " (authorized_user, client_id c)");
}

TEST_F(CredentialsTest, MetadataServerIsUsedLastAndProbedOnce) {
  ScopedEnv env("GCE_METADATA_HOST", "127.0.0.1:9999");
  http_.Push(TokenReply("tok-M", 1800));
  auto creds = MakeCredentials(GcsOptions{}, http_, clock_);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Describe(), "the metadata server at 127.0.0.1:9999");
  ASSERT_EQ(http_.requests().size(), 1u);
  const HttpRequest probe = http_.requests()[0];
  EXPECT_EQ(probe.url, "http://127.0.0.1:9999/computeMetadata/v1/instance/service-accounts/default/token");
  EXPECT_EQ(RequestHeader(probe, "Metadata-Flavor"), "Google");
  EXPECT_EQ(probe.connect_timeout, std::chrono::milliseconds(1000));
  // The probe's token is used; no second request.
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-M");
  EXPECT_EQ(http_.requests().size(), 1u);
  // Refreshed 3 minutes (10% of 30) before expiry.
  clock_.Advance(std::chrono::seconds(1800 - 181));
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-M");
  clock_.Advance(std::chrono::seconds(2));
  http_.Push(TokenReply("tok-M2", 1800));
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-M2");
  EXPECT_EQ(http_.requests().size(), 2u);
}

TEST_F(CredentialsTest, NoCredentialsListsEverythingTried) {
  http_.Push(FakeReply{.error = TransportError::kTimeout, .error_message = "Connection timed out after 1000 ms"});
  Status s = MakeCredentials(GcsOptions{}, http_, clock_).status();
  EXPECT_EQ(s.code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("no Google Cloud credentials found"));
  EXPECT_THAT(s.message(), HasSubstr("GOOGLE_APPLICATION_CREDENTIALS (not set)"));
  EXPECT_THAT(s.message(), HasSubstr("gcloud ADC file " + dir_.File(".config/gcloud/application_default_credentials.json") +
                                     " (absent)"));
  EXPECT_THAT(s.message(), HasSubstr("the metadata server at 169.254.169.254 (timed out"));
  EXPECT_THAT(s.message(), HasSubstr("gcloud auth application-default login"));
  EXPECT_THAT(s.message(), HasSubstr("-o anonymous"));
  EXPECT_EQ(http_.requests()[0].url,
            "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token");
}

TEST_F(CredentialsTest, OutsideAPodAnUnreachableMetadataServerIsProbedOnce) {
  http_.SetFallback([](const HttpRequest& req) {
    return Deliver(req, FakeReply{.error = TransportError::kConnectFailed, .error_message = "Connection refused"});
  });
  EXPECT_EQ(MakeCredentials(GcsOptions{}, http_, clock_).status().code(), ErrorCode::kPermissionDenied);
  EXPECT_EQ(http_.requests().size(), 1u);
  EXPECT_TRUE(clock_.sleeps().empty());
}

// A metadata server that starts answering `delay` after the first probe, on
// the test's clock (each probe takes no time: the fake clock moves only in Sleep).
void ServeTokensAfter(FakeHttpClient& http, FakeClock& clock, std::chrono::seconds delay) {
  const Clock::TimePoint ready_at = clock.Now() + delay;
  http.SetFallback([&clock, ready_at](const HttpRequest& req) {
    if (clock.Now() < ready_at) {
      return Deliver(req, FakeReply{.error = TransportError::kConnectFailed, .error_message = "Connection refused"});
    }
    return Deliver(req, TokenReply("tok-late"));
  });
}

TEST_F(CredentialsTest, InAPodAMetadataServerFiveSecondsLateIsWaitedFor) {
  ScopedEnv pod("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  ServeTokensAfter(http_, clock_, std::chrono::seconds(5));
  auto creds = MakeCredentials(GcsOptions{}, http_, clock_);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Describe(), "the metadata server at 169.254.169.254");
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-late");
  std::chrono::milliseconds waited{0};
  for (std::chrono::milliseconds s : clock_.sleeps()) {
    EXPECT_GE(s, kMetadataProbeFirstBackoff);
    EXPECT_LE(s, kMetadataProbeMaxBackoff);
    waited += s;
  }
  // Answered at the first probe after it came up: within one backoff of 5 s.
  EXPECT_GE(waited, std::chrono::seconds(5));
  EXPECT_LE(waited, std::chrono::seconds(5) + kMetadataProbeMaxBackoff);
}

TEST_F(CredentialsTest, AMetadataHostNamedInTheEnvironmentIsWaitedFor) {
  ScopedEnv env("GCE_METADATA_HOST", "127.0.0.1:9999");
  ServeTokensAfter(http_, clock_, std::chrono::seconds(5));
  auto creds = MakeCredentials(GcsOptions{}, http_, clock_);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-late");
  EXPECT_GT(http_.requests().size(), 1u);
}

TEST_F(CredentialsTest, InAPodTheMetadataProbeGivesUpAfterItsWindow) {
  ScopedEnv pod("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  ServeTokensAfter(http_, clock_, std::chrono::hours(1));
  Status s = MakeCredentials(GcsOptions{}, http_, clock_).status();
  EXPECT_EQ(s.code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("no Google Cloud credentials found"));
  EXPECT_THAT(s.message(), HasSubstr("probes over"));
  std::chrono::milliseconds waited{0};
  for (std::chrono::milliseconds w : clock_.sleeps()) waited += w;
  EXPECT_LE(waited, kMetadataProbeWindow);
  EXPECT_GE(waited, kMetadataProbeWindow - kMetadataProbeMaxBackoff);
  EXPECT_EQ(http_.requests().size(), clock_.sleeps().size() + 1);
}

// README: in a pod the metadata server is waited for through timeouts and
// server errors alike, not only refused connections.
TEST_F(CredentialsTest, InAPodTheMetadataProbeRetriesTimeoutsAndServerErrors) {
  ScopedEnv pod("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  http_.Push(FakeReply{.error = TransportError::kTimeout, .error_message = "Connection timed out after 1000 ms"});
  http_.Push(FakeReply{.status = 503, .body = "not ready"});
  http_.Push(FakeReply{.error = TransportError::kTimeout, .error_message = "Operation timed out"});
  http_.Push(FakeReply{.status = 500, .body = "internal"});
  http_.Push(TokenReply("tok-after-errors"));
  auto creds = MakeCredentials(GcsOptions{}, http_, clock_);
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-after-errors");
  EXPECT_EQ(http_.requests().size(), 5u);
  EXPECT_EQ(clock_.sleeps().size(), 4u) << "a backoff before each retry";
}

TEST_F(CredentialsTest, InAPodARefusalIsNotRetried) {
  ScopedEnv pod("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  http_.Push(FakeReply{.status = 403, .body = R"({"error":"no service account"})"});
  Status s = MakeCredentials(GcsOptions{}, http_, clock_).status();
  EXPECT_EQ(s.code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("metadata server"));
  EXPECT_EQ(http_.requests().size(), 1u);
}

// A real metadata server on 127.0.0.1 that comes up 5 s late: its socket is
// bound at once (connects are refused) and listens only after the delay, then
// answers one token request. The test's only timeouts catch hangs.
TEST_F(CredentialsTest, InAPodARealMetadataServerFiveSecondsLateIsWaitedFor) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ScopedEnv pod("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  ScopedEnv host("GCE_METADATA_HOST", "127.0.0.1:" + std::to_string(ntohs(addr.sin_port)));
  std::atomic<bool> listening{false};
  std::thread server([fd, &listening] {
    std::this_thread::sleep_for(std::chrono::seconds(5));
    ::listen(fd, 4);
    listening = true;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 60000) != 1) return;
    const int conn = ::accept(fd, nullptr, nullptr);
    if (conn < 0) return;
    std::string request;
    char buf[4096];
    while (request.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = ::recv(conn, buf, sizeof buf, 0);
      if (n <= 0) break;
      request.append(buf, static_cast<size_t>(n));
    }
    const std::string body = json{{"access_token", "tok-real"}, {"expires_in", 3600}}.dump();
    const std::string reply = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    (void)!::send(conn, reply.data(), reply.size(), MSG_NOSIGNAL);
    ::close(conn);
  });
  StatusOr<std::unique_ptr<HttpClient>> http = MakeCurlHttpClient(CurlHttpOptions{});
  ASSERT_TRUE(http.ok());
  auto probe = std::async(std::launch::async, [&] { return MakeCredentials(GcsOptions{}, **http, SystemClock()); });
  const bool done = probe.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  server.join();
  ::close(fd);
  ASSERT_TRUE(done) << "the credentials probe hung";
  StatusOr<std::unique_ptr<CredentialsProvider>> creds = probe.get();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_TRUE(listening);
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "Authorization: Bearer tok-real");
}

TEST_F(CredentialsTest, AnonymousSendsNoHeader) {
  GcsOptions options;
  options.anonymous = true;
  auto creds = MakeCredentials(options, http_, clock_);
  ASSERT_TRUE(creds.ok());
  EXPECT_EQ((*creds)->AuthorizationHeader().value(), "");
  EXPECT_EQ((*creds)->Describe(), "anonymous access");
  EXPECT_TRUE((*creds)->anonymous());
  EXPECT_TRUE(http_.requests().empty());
}

// A fetcher whose tokens and failures the test scripts.
class ScriptedFetcher : public TokenFetcher {
 public:
  explicit ScriptedFetcher(std::function<StatusOr<AccessToken>(int call)> f) : f_(std::move(f)) {}
  StatusOr<AccessToken> Fetch() override { return f_(++calls_); }
  std::string Describe() const override { return "scripted"; }
  int calls() const { return calls_.load(); }

 private:
  std::function<StatusOr<AccessToken>(int)> f_;
  std::atomic<int> calls_{0};
};

TEST(CachingCredentialsTest, RefreshesFiveMinutesBeforeAnHourLongTokenExpires) {
  FakeClock clock;
  auto fetcher = std::make_unique<ScriptedFetcher>(
      [](int call) { return AccessToken{"t" + std::to_string(call), std::chrono::seconds(3600)}; });
  ScriptedFetcher* f = fetcher.get();
  CachingCredentials creds(std::move(fetcher), clock);
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t1");
  clock.Advance(std::chrono::seconds(3299));
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t1");
  clock.Advance(std::chrono::seconds(2));
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t2");
  EXPECT_EQ(f->calls(), 2);
}

TEST(CachingCredentialsTest, ShortLivedTokensRefreshAtNinetyPercent) {
  FakeClock clock;
  CachingCredentials creds(std::make_unique<ScriptedFetcher>([](int call) {
                             return AccessToken{"t" + std::to_string(call), std::chrono::seconds(2)};
                           }),
                           clock);
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t1");
  clock.Advance(std::chrono::milliseconds(1700));
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t1");
  clock.Advance(std::chrono::milliseconds(200));
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t2");
}

TEST(CachingCredentialsTest, InvalidateForcesARefresh) {
  FakeClock clock;
  CachingCredentials creds(std::make_unique<ScriptedFetcher>([](int call) {
                             return AccessToken{"t" + std::to_string(call), std::chrono::seconds(3600)};
                           }),
                           clock);
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t1");
  creds.Invalidate();
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t2");
  EXPECT_EQ(creds.refresh_count(), 2);
}

TEST(CachingCredentialsTest, FailedEarlyRefreshKeepsTheValidTokenThenFails) {
  FakeClock clock;
  CachingCredentials creds(std::make_unique<ScriptedFetcher>([](int call) -> StatusOr<AccessToken> {
                             if (call == 1) return AccessToken{"t1", std::chrono::seconds(100)};
                             return UnavailableError("token endpoint down");
                           }),
                           clock);
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t1");
  clock.Advance(std::chrono::seconds(95));  // inside the 10 s margin, still valid
  EXPECT_EQ(creds.AuthorizationHeader().value(), "Authorization: Bearer t1");
  clock.Advance(std::chrono::seconds(10));  // expired
  Status s = creds.AuthorizationHeader().status();
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(s.message(), "token endpoint down");
}

TEST(CachingCredentialsTest, ConcurrentCallersShareOneRefresh) {
  Mutex mu;
  CondVar cv;
  bool release = false;
  bool refreshing = false;
  auto fetcher = std::make_unique<ScriptedFetcher>([&](int call) {
    MutexLock lock(mu);
    refreshing = true;
    cv.NotifyAll();
    cv.Wait(mu, [&]() REQUIRES(mu) { return release; });
    return AccessToken{"t" + std::to_string(call), std::chrono::seconds(3600)};
  });
  ScriptedFetcher* f = fetcher.get();
  CachingCredentials creds(std::move(fetcher));
  std::vector<std::thread> threads;
  std::vector<std::string> got(16);
  size_t calling = 0;  // GUARDED_BY(mu)
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] {
      {
        MutexLock lock(mu);
        ++calling;
      }
      cv.NotifyAll();
      got[i] = creds.AuthorizationHeader().value();
    });
  }
  {  // every caller has come, and one of them holds the refresh open
    MutexLock lock(mu);
    cv.Wait(mu, [&]() REQUIRES(mu) { return refreshing && calling == got.size(); });
    release = true;
  }
  cv.NotifyAll();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(f->calls(), 1);
  for (const std::string& g : got) EXPECT_EQ(g, "Authorization: Bearer t1");
}

}  // namespace
}  // namespace tensorfs
