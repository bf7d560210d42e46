// The AWS credential chain: which source wins (environment, shared files and
// profiles, web identity through STS, container credentials, IMDSv2), what is
// sent to each, the errors that list what was tried, and the refresh of
// temporary credentials on a fake clock. Over a scripted transport.
#include "core/store/s3/aws_credentials.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/store/s3/s3_xml.h"
#include "core/store/s3/sigv4.h"
#include "tests/core/store/http/fakes.h"
#include "tests/support/aws_env.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::tensorfs::testing::Deliver;
using ::tensorfs::testing::FakeClock;
using ::tensorfs::testing::FakeHttpClient;
using ::tensorfs::testing::FakeReply;
using ::tensorfs::testing::RequestHeader;
using ::tensorfs::testing::ScopedAwsEnvironment;

std::string Iso8601In(std::chrono::seconds from_now) {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now() + from_now);
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string JsonCredentials(const std::string& key, std::chrono::seconds lifetime = std::chrono::hours(6)) {
  return R"({"Code": "Success", "AccessKeyId": ")" + key + R"(", "SecretAccessKey": "secret-)" + key +
         R"(", "Token": "token-)" + key + R"(", "Expiration": ")" + Iso8601In(lifetime) + R"("})";
}

class AwsCredentialsTest : public ::testing::Test {
 protected:
  AwsCredentialsTest() : env_(home_.path()) {}

  void WriteHomeFile(const std::string& rel, const std::string& text) {
    testing::WriteFile(home_.path() + "/" + rel, text);
  }
  StatusOr<std::unique_ptr<AwsCredentialsProvider>> Make(AwsChainOptions options = {}) {
    return MakeAwsCredentials(options, http_, clock_);
  }

  testing::TempDir home_;
  ScopedAwsEnvironment env_;
  FakeHttpClient http_;
  FakeClock clock_;
};

TEST_F(AwsCredentialsTest, EnvironmentKeysComeFirst) {
  env_.Set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT1");
  env_.Set("AWS_SECRET_ACCESS_KEY", "env-secret");
  env_.Set("AWS_SESSION_TOKEN", "env-token");
  WriteHomeFile(".aws/credentials", "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = file\n");
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  StatusOr<AwsCredentials> c = (*creds)->Get();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->access_key_id, "AKIAENVIRONMENT1");
  EXPECT_EQ(c->secret_access_key, "env-secret");
  EXPECT_EQ(c->session_token, "env-token");
  EXPECT_THAT((*creds)->Describe(), HasSubstr("environment variables"));
  EXPECT_THAT((*creds)->Describe(), HasSubstr("AKIA...ENT1"));
  EXPECT_THAT((*creds)->Describe(), Not(HasSubstr("env-secret")));
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(AwsCredentialsTest, HalfAnEnvironmentKeyPairSaysWhatIsMissing) {
  env_.Set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT1");
  auto creds = Make();
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("AWS_SECRET_ACCESS_KEY is not"));
}

TEST_F(AwsCredentialsTest, DefaultProfileOfTheCredentialsFile) {
  WriteHomeFile(".aws/credentials",
                "# comment\n[other]\naws_access_key_id=AKIAOTHER\naws_secret_access_key=o\n"
                "[default]\naws_access_key_id = AKIADEFAULTKEY1\r\naws_secret_access_key = d-secret\n");
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Get()->access_key_id, "AKIADEFAULTKEY1");
  EXPECT_EQ((*creds)->Get()->secret_access_key, "d-secret");
  EXPECT_THAT((*creds)->Describe(), HasSubstr("profile default"));
  EXPECT_THAT((*creds)->Describe(), HasSubstr(home_.path() + "/.aws/credentials"));
}

TEST_F(AwsCredentialsTest, AwsProfileNamesAProfileOfTheConfigFile) {
  env_.Set("AWS_PROFILE", "dev");
  WriteHomeFile(".aws/config",
                "[default]\nregion = us-east-1\n[profile dev]\nregion = eu-west-1\n"
                "aws_access_key_id = AKIADEVCONFIG1\naws_secret_access_key = dev-secret\n"
                "s3 =\n  addressing_style = path\n");
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Get()->access_key_id, "AKIADEVCONFIG1");
  AwsProfile profile = LoadAwsProfile("");
  EXPECT_EQ(profile.name, "dev");
  EXPECT_EQ(profile.settings["region"], "eu-west-1");
  EXPECT_FALSE(profile.settings.contains("addressing_style")) << "nested settings are not the profile's own";
}

TEST_F(AwsCredentialsTest, AMissingNamedProfileIsAnError) {
  env_.Set("AWS_PROFILE", "nope");
  WriteHomeFile(".aws/credentials", "[default]\naws_access_key_id = A\naws_secret_access_key = B\n");
  auto creds = Make();
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("profile nope (AWS_PROFILE) is in neither"));
}

TEST_F(AwsCredentialsTest, ProfileOptionIsTheOnlySource) {
  env_.Set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT1");
  env_.Set("AWS_SECRET_ACCESS_KEY", "env-secret");
  WriteHomeFile(".aws/credentials", "[ci]\naws_access_key_id = AKIACIPROFILE1\naws_secret_access_key = ci\n");
  auto creds = Make({.profile = "ci"});
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Get()->access_key_id, "AKIACIPROFILE1");
  EXPECT_THAT((*creds)->Describe(), HasSubstr("-o profile"));
  auto missing = Make({.profile = "absent"});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("profile absent (-o profile) is in neither"));
}

TEST_F(AwsCredentialsTest, ProfileKeysAreReadAgainWhenTheirFileIsRewritten) {
  // As Mountpoint's CSI driver hands them over: a profile in files of its own.
  env_.Set("AWS_PROFILE", "pod-s3-csi");
  env_.Set("AWS_SHARED_CREDENTIALS_FILE", home_.path() + "/comm/credentials");
  env_.Set("AWS_CONFIG_FILE", home_.path() + "/comm/config");
  WriteHomeFile("comm/config", "[profile pod-s3-csi]\n");
  WriteHomeFile("comm/credentials", "[pod-s3-csi]\naws_access_key_id=AKIAFIRSTKEY01\naws_secret_access_key=one\n");
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Get()->access_key_id, "AKIAFIRSTKEY01");

  WriteHomeFile("comm/credentials",
                "[pod-s3-csi]\naws_access_key_id=AKIASECONDKEY2\naws_secret_access_key=two\naws_session_token=t2\n");
  EXPECT_EQ((*creds)->Get()->access_key_id, "AKIAFIRSTKEY01") << "looked at again only after kProfileRecheckPeriod";
  clock_.Advance(kProfileRecheckPeriod);
  StatusOr<AwsCredentials> second = (*creds)->Get();
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->access_key_id, "AKIASECONDKEY2");
  EXPECT_EQ(second->secret_access_key, "two");
  EXPECT_EQ(second->session_token, "t2");
  EXPECT_THAT((*creds)->Describe(), HasSubstr("AKIA...KEY2"));
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(AwsCredentialsTest, AProfileRewriteThatCannotBeReadKeepsTheKeysInUse) {
  env_.Set("AWS_PROFILE", "p");
  env_.Set("AWS_SHARED_CREDENTIALS_FILE", home_.path() + "/credentials");
  WriteHomeFile("credentials", "[p]\naws_access_key_id=AKIAKEPTKEY001\naws_secret_access_key=kept\n");
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  WriteHomeFile("credentials", "[p]\naws_access_key_id=AKIAHALFKEY002\n");  // caught mid-rewrite
  clock_.Advance(kProfileRecheckPeriod);
  EXPECT_EQ((*creds)->Get()->access_key_id, "AKIAKEPTKEY001");
  std::filesystem::remove(home_.path() + "/credentials");
  clock_.Advance(kProfileRecheckPeriod);
  EXPECT_EQ((*creds)->Get()->secret_access_key, "kept");
  WriteHomeFile("credentials", "[p]\naws_access_key_id=AKIAWHOLEKEY03\naws_secret_access_key=whole\n");
  clock_.Advance(kProfileRecheckPeriod);
  EXPECT_EQ((*creds)->Get()->access_key_id, "AKIAWHOLEKEY03");
}

TEST_F(AwsCredentialsTest, AnUnsupportedProfileKindSaysWhat) {
  WriteHomeFile(".aws/config", "[default]\ncredential_process = /usr/bin/get-creds\n");
  auto creds = Make();
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), ErrorCode::kUnimplemented);
  EXPECT_THAT(creds.status().message(), HasSubstr("credential_process"));
}

TEST_F(AwsCredentialsTest, WebIdentityAssumesTheRoleThroughSts) {
  WriteHomeFile("token", "eyJhbGciOiJSUzI1NiJ9.web-identity\n");
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", home_.path() + "/token");
  env_.Set("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader");
  env_.Set("AWS_ROLE_SESSION_NAME", "pod-1");
  env_.Set("AWS_ENDPOINT_URL_STS", "http://sts.test");
  http_.Push(FakeReply{.status = 200,
                       .body = "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>"
                               "<AccessKeyId>ASIASTS</AccessKeyId><SecretAccessKey>s</SecretAccessKey>"
                               "<SessionToken>t</SessionToken><Expiration>" +
                               Iso8601In(std::chrono::hours(1)) +
                               "</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
                               "</AssumeRoleWithWebIdentityResponse>"});
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  StatusOr<AwsCredentials> c = (*creds)->Get();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "ASIASTS");
  EXPECT_EQ(c->session_token, "t");
  ASSERT_EQ(http_.requests().size(), 1u);
  const HttpRequest sts = http_.requests()[0];
  EXPECT_EQ(sts.method, "POST");
  EXPECT_EQ(sts.url, "http://sts.test");
  EXPECT_THAT(sts.body, HasSubstr("Action=AssumeRoleWithWebIdentity"));
  EXPECT_THAT(sts.body, HasSubstr("RoleArn=arn%3Aaws%3Aiam%3A%3A123456789012%3Arole%2Freader"));
  EXPECT_THAT(sts.body, HasSubstr("RoleSessionName=pod-1"));
  EXPECT_THAT(sts.body, ::testing::EndsWith("&WebIdentityToken=eyJhbGciOiJSUzI1NiJ9.web-identity"));
  EXPECT_THAT((*creds)->Describe(), Not(HasSubstr("eyJhbGci")));
}

TEST_F(AwsCredentialsTest, WebIdentityRefusedNamesTheStsCode) {
  WriteHomeFile("token", "tok");
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", home_.path() + "/token");
  env_.Set("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/reader");
  env_.Set("AWS_ENDPOINT_URL_STS", "http://sts.test");
  http_.Push(FakeReply{.status = 400,
                       .body = "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>expired</Message>"
                               "</Error></ErrorResponse>"});
  auto creds = Make();
  ASSERT_TRUE(creds.ok());
  StatusOr<AwsCredentials> c = (*creds)->Get();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(c.status().message(), HasSubstr("InvalidIdentityToken: expired"));
  EXPECT_THAT(c.status().message(), HasSubstr("role arn:aws:iam::123456789012:role/reader"));
}

TEST_F(AwsCredentialsTest, WebIdentityUsesTheRegionalStsEndpoint) {
  WriteHomeFile("token", "tok");
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", home_.path() + "/token");
  env_.Set("AWS_ROLE_ARN", "arn:aws:iam::1:role/r");
  http_.Push(FakeReply{.status = 503});
  auto creds = Make({.region = "eu-central-1"});
  ASSERT_TRUE(creds.ok());
  StatusOr<AwsCredentials> c = (*creds)->Get();
  EXPECT_EQ(c.status().code(), ErrorCode::kUnavailable) << "a 503 is worth a retry";
  ASSERT_EQ(http_.requests().size(), 1u);
  EXPECT_EQ(http_.requests()[0].url, "https://sts.eu-central-1.amazonaws.com");
}

TEST_F(AwsCredentialsTest, WebIdentityTakesStsFromAwsEndpointUrl) {
  WriteHomeFile("token", "tok");
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", home_.path() + "/token");
  env_.Set("AWS_ROLE_ARN", "arn:aws:iam::1:role/r");
  env_.Set("AWS_ENDPOINT_URL", "http://localstack.test:4566/");
  http_.Push(FakeReply{.status = 503});
  auto creds = Make({.region = "eu-central-1"});
  ASSERT_TRUE(creds.ok());
  (void)(*creds)->Get();
  ASSERT_EQ(http_.requests().size(), 1u);
  EXPECT_EQ(http_.requests()[0].url, "http://localstack.test:4566");
}

TEST_F(AwsCredentialsTest, LegacyStsRegionalEndpointsUseTheGlobalEndpointInTheLegacyRegions) {
  WriteHomeFile("token", "tok");
  env_.Set("AWS_WEB_IDENTITY_TOKEN_FILE", home_.path() + "/token");
  env_.Set("AWS_ROLE_ARN", "arn:aws:iam::1:role/r");
  env_.Set("AWS_STS_REGIONAL_ENDPOINTS", "legacy");
  http_.Push(FakeReply{.status = 503});
  http_.Push(FakeReply{.status = 503});
  auto legacy = Make({.region = "eu-west-1"});
  ASSERT_TRUE(legacy.ok());
  (void)(*legacy)->Get();
  auto newer = Make({.region = "ap-east-1"});  // not one of the legacy regions
  ASSERT_TRUE(newer.ok());
  (void)(*newer)->Get();
  ASSERT_EQ(http_.requests().size(), 2u);
  EXPECT_EQ(http_.requests()[0].url, "https://sts.amazonaws.com");
  EXPECT_EQ(http_.requests()[1].url, "https://sts.ap-east-1.amazonaws.com");
}

TEST_F(AwsCredentialsTest, ContainerCredentialsWithATokenFile) {
  WriteHomeFile("pod-identity-token", "pod-token-value\n");
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://169.254.170.23/v1/credentials");
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", home_.path() + "/pod-identity-token");
  http_.Push(FakeReply{.status = 200, .body = JsonCredentials("ASIACONTAINER")});
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  StatusOr<AwsCredentials> c = (*creds)->Get();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "ASIACONTAINER");
  EXPECT_EQ(c->session_token, "token-ASIACONTAINER");
  ASSERT_EQ(http_.requests().size(), 1u);
  EXPECT_EQ(http_.requests()[0].url, "http://169.254.170.23/v1/credentials");
  EXPECT_EQ(RequestHeader(http_.requests()[0], "Authorization"), "pod-token-value");
}

TEST_F(AwsCredentialsTest, ContainerRelativeUriIsOnTheEcsAgent) {
  env_.Set("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "/v2/credentials/abc");
  env_.Set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "direct-token");
  http_.Push(FakeReply{.status = 200, .body = JsonCredentials("ASIAECS")});
  auto creds = Make();
  ASSERT_TRUE(creds.ok());
  ASSERT_TRUE((*creds)->Get().ok());
  EXPECT_EQ(http_.requests()[0].url, "http://169.254.170.2/v2/credentials/abc");
  EXPECT_EQ(RequestHeader(http_.requests()[0], "Authorization"), "direct-token");
}

TEST_F(AwsCredentialsTest, PlainHttpContainerUriToAnotherHostIsRefused) {
  env_.Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://credentials.example.com/creds");
  auto creds = Make();
  ASSERT_FALSE(creds.ok());
  EXPECT_THAT(creds.status().message(), HasSubstr("use https"));
}

TEST_F(AwsCredentialsTest, InstanceMetadataV2TokenThenRoleThenCredentials) {
  env_.Set("AWS_EC2_METADATA_DISABLED", std::nullopt);
  env_.Set("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://imds.test/");
  http_.Push(FakeReply{.status = 200, .body = "session-token-1"});
  http_.Push(FakeReply{.status = 200, .body = "reader-role\n"});
  http_.Push(FakeReply{.status = 200, .body = JsonCredentials("ASIAIMDS")});
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Get()->access_key_id, "ASIAIMDS");
  const std::vector<HttpRequest> requests = http_.requests();
  ASSERT_EQ(requests.size(), 3u) << "the probe's credentials are kept, not fetched again";
  EXPECT_EQ(requests[0].method, "PUT");
  EXPECT_EQ(requests[0].url, "http://imds.test/latest/api/token");
  EXPECT_EQ(RequestHeader(requests[0], "X-aws-ec2-metadata-token-ttl-seconds"), "21600");
  EXPECT_EQ(requests[1].url, "http://imds.test/latest/meta-data/iam/security-credentials/");
  EXPECT_EQ(RequestHeader(requests[1], "X-aws-ec2-metadata-token"), "session-token-1");
  EXPECT_EQ(requests[2].url, "http://imds.test/latest/meta-data/iam/security-credentials/reader-role");
  EXPECT_EQ(RequestHeader(requests[2], "X-aws-ec2-metadata-token"), "session-token-1");
  EXPECT_THAT((*creds)->Describe(), HasSubstr("role reader-role"));
}

TEST_F(AwsCredentialsTest, NothingFoundListsEverythingTried) {
  env_.Set("AWS_EC2_METADATA_DISABLED", std::nullopt);
  http_.SetFallback([](const HttpRequest& req) {
    return Deliver(req, FakeReply{.error = TransportError::kTimeout, .error_message = "Connection timed out"});
  });
  auto creds = Make();
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), ErrorCode::kPermissionDenied);
  const std::string m = creds.status().message();
  EXPECT_THAT(m, HasSubstr("no AWS credentials found"));
  EXPECT_THAT(m, HasSubstr("environment variables (AWS_ACCESS_KEY_ID not set)"));
  EXPECT_THAT(m, HasSubstr("profile default in " + home_.path() + "/.aws/credentials"));
  EXPECT_THAT(m, HasSubstr("web identity (AWS_WEB_IDENTITY_TOKEN_FILE not set)"));
  EXPECT_THAT(m, HasSubstr("container credentials"));
  EXPECT_THAT(m, HasSubstr("EC2 instance metadata at http://169.254.169.254"));
  EXPECT_THAT(m, HasSubstr("-o no_sign_request"));
  EXPECT_EQ(http_.requests().size(), 1u) << "off EC2 the probe is made once";
  EXPECT_TRUE(clock_.sleeps().empty());
}

TEST_F(AwsCredentialsTest, InstanceMetadataDisabledIsNotProbed) {
  env_.Set("AWS_EC2_METADATA_DISABLED", "true");
  auto creds = Make();
  ASSERT_FALSE(creds.ok());
  EXPECT_THAT(creds.status().message(), HasSubstr("AWS_EC2_METADATA_DISABLED=true"));
  EXPECT_TRUE(http_.requests().empty());
}

TEST_F(AwsCredentialsTest, InstanceMetadataIsRetriedInAPod) {
  env_.Set("AWS_EC2_METADATA_DISABLED", std::nullopt);
  env_.Set("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  for (int i = 0; i < 3; ++i) {
    http_.Push(FakeReply{.error = TransportError::kConnectFailed, .error_message = "Connection refused"});
  }
  http_.Push(FakeReply{.status = 200, .body = "tok"});
  http_.Push(FakeReply{.status = 200, .body = "role"});
  http_.Push(FakeReply{.status = 200, .body = JsonCredentials("ASIAPOD")});
  auto creds = Make();
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_EQ((*creds)->Get()->access_key_id, "ASIAPOD");
  EXPECT_EQ(clock_.sleeps().size(), 3u);
}

TEST_F(AwsCredentialsTest, InstanceMetadataWithoutARoleSaysToAttachOne) {
  env_.Set("AWS_EC2_METADATA_DISABLED", std::nullopt);
  env_.Set("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://imds.test");
  http_.Push(FakeReply{.status = 200, .body = "tok"});
  http_.Push(FakeReply{.status = 404, .body = "Not Found"});
  auto creds = Make();
  ASSERT_FALSE(creds.ok());
  EXPECT_EQ(creds.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(creds.status().message(), HasSubstr("attach an IAM role"));
}

TEST_F(AwsCredentialsTest, DeferredInstanceMetadataIsAskedAtTheFirstGet) {
  env_.Set("AWS_EC2_METADATA_DISABLED", std::nullopt);
  env_.Set("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://imds.test");
  auto creds = Make({.defer_instance_metadata = true});
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  EXPECT_TRUE(http_.requests().empty()) << "nothing is sent before the first request needs credentials";
  EXPECT_THAT((*creds)->Describe(), HasSubstr("EC2 instance metadata at http://imds.test"));
  http_.Push(FakeReply{.status = 200, .body = "tok"});
  http_.Push(FakeReply{.status = 200, .body = "node-role"});
  http_.Push(FakeReply{.status = 200, .body = JsonCredentials("ASIANODE")});
  StatusOr<AwsCredentials> c = (*creds)->Get();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "ASIANODE");
  EXPECT_EQ((*creds)->Get()->access_key_id, "ASIANODE");
  EXPECT_EQ(http_.requests().size(), 3u);
  EXPECT_THAT((*creds)->Describe(), HasSubstr("role node-role"));
}

TEST_F(AwsCredentialsTest, DeferredInstanceMetadataThatFailsListsEverythingTried) {
  env_.Set("AWS_EC2_METADATA_DISABLED", std::nullopt);
  http_.SetFallback([](const HttpRequest& req) {
    return Deliver(req, FakeReply{.error = TransportError::kConnectFailed, .error_message = "Connection refused"});
  });
  auto creds = Make({.defer_instance_metadata = true});
  ASSERT_TRUE(creds.ok()) << creds.status().ToString();
  StatusOr<AwsCredentials> c = (*creds)->Get();
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(c.status().message(), HasSubstr("no AWS credentials found"));
  EXPECT_THAT(c.status().message(), HasSubstr("web identity (AWS_WEB_IDENTITY_TOKEN_FILE not set)"));
  EXPECT_THAT(c.status().message(), HasSubstr("EC2 instance metadata at http://169.254.169.254"));
}

TEST_F(AwsCredentialsTest, NoSignRequestSendsNothing) {
  env_.Set("AWS_ACCESS_KEY_ID", "AKIAENVIRONMENT1");
  env_.Set("AWS_SECRET_ACCESS_KEY", "env-secret");
  auto creds = Make({.no_sign_request = true});
  ASSERT_TRUE(creds.ok());
  EXPECT_TRUE((*creds)->anonymous());
  EXPECT_THAT((*creds)->Describe(), HasSubstr("no_sign_request"));
}

// A fetcher whose answers the test sets, counting its calls.
class ScriptedFetcher : public AwsCredentialsFetcher {
 public:
  StatusOr<TemporaryAwsCredentials> Fetch() override {
    ++calls;
    if (!next.ok()) return next.status();
    TemporaryAwsCredentials c = *next;
    c.credentials.access_key_id += "-" + std::to_string(calls);
    return c;
  }
  std::string Describe() const override { return "scripted"; }
  int calls = 0;
  StatusOr<TemporaryAwsCredentials> next =
      TemporaryAwsCredentials{{"ASIA", "secret", "token"}, std::chrono::seconds(3600)};
};

TEST(RefreshingAwsCredentialsTest, RefreshesFiveMinutesBeforeExpiry) {
  FakeClock clock;
  auto fetcher = std::make_unique<ScriptedFetcher>();
  ScriptedFetcher* f = fetcher.get();
  RefreshingAwsCredentials creds(std::move(fetcher), clock);
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-1");
  clock.Advance(std::chrono::minutes(54));
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-1") << "shared, not fetched per request";
  EXPECT_EQ(f->calls, 1);
  clock.Advance(std::chrono::minutes(1) + std::chrono::seconds(1));
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-2");
  EXPECT_EQ(f->calls, 2);
  EXPECT_EQ(creds.refresh_count(), 2);
}

TEST(RefreshingAwsCredentialsTest, ShortLivedCredentialsRefreshAtNinetyPercent) {
  FakeClock clock;
  auto fetcher = std::make_unique<ScriptedFetcher>();
  fetcher->next = TemporaryAwsCredentials{{"ASIA", "s", "t"}, std::chrono::seconds(100)};
  RefreshingAwsCredentials creds(std::move(fetcher), clock);
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-1");
  clock.Advance(std::chrono::seconds(89));
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-1");
  clock.Advance(std::chrono::seconds(2));
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-2");
}

TEST(RefreshingAwsCredentialsTest, AFailedRefreshKeepsValidCredentialsUntilTheyExpire) {
  FakeClock clock;
  auto fetcher = std::make_unique<ScriptedFetcher>();
  ScriptedFetcher* f = fetcher.get();
  RefreshingAwsCredentials creds(std::move(fetcher), clock);
  ASSERT_TRUE(creds.Get().ok());
  f->next = UnavailableError("STS is down");
  clock.Advance(std::chrono::minutes(56));
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-1") << "still valid for 4 minutes";
  clock.Advance(std::chrono::minutes(5));
  StatusOr<AwsCredentials> expired = creds.Get();
  ASSERT_FALSE(expired.ok());
  EXPECT_THAT(expired.status().message(), HasSubstr("STS is down"));
}

TEST(RefreshingAwsCredentialsTest, InvalidateFetchesNewOnes) {
  FakeClock clock;
  auto fetcher = std::make_unique<ScriptedFetcher>();
  RefreshingAwsCredentials creds(std::move(fetcher), clock);
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-1");
  EXPECT_TRUE(creds.Invalidate());
  EXPECT_EQ(creds.Get()->access_key_id, "ASIA-2");
}

TEST(RefreshingAwsCredentialsTest, ASeededProviderFetchesOnlyWhenDue) {
  FakeClock clock;
  auto fetcher = std::make_unique<ScriptedFetcher>();
  ScriptedFetcher* f = fetcher.get();
  RefreshingAwsCredentials creds(std::move(fetcher), clock);
  creds.Seed(TemporaryAwsCredentials{{"ASIASEED", "s", "t"}, std::chrono::seconds(3600)});
  EXPECT_EQ(creds.Get()->access_key_id, "ASIASEED");
  EXPECT_EQ(f->calls, 0);
}

TEST(IniTest, SectionsKeysCommentsAndNestedSettings) {
  IniSections s = ParseIni(
      "; top comment\n[default]\nAWS_Access_Key_Id = AKIA\n  nested = skipped\n# c\n[profile x]\nregion=eu-west-1\n"
      "s3 =\n    max_concurrent_requests = 20\nkey=with=equals\n");
  EXPECT_EQ(s["default"]["aws_access_key_id"], "AKIA");
  EXPECT_FALSE(s["default"].contains("nested"));
  EXPECT_EQ(s["profile x"]["region"], "eu-west-1");
  EXPECT_EQ(s["profile x"]["key"], "with=equals");
  EXPECT_FALSE(s["profile x"].contains("max_concurrent_requests"));
}

TEST(MaskTest, ShowsOnlyTheEnds) {
  EXPECT_EQ(MaskAccessKeyId("AKIAIOSFODNN7EXAMPLE"), "AKIA...MPLE");
  EXPECT_EQ(MaskAccessKeyId("short"), "*****");
}

}  // namespace
}  // namespace tensorfs
