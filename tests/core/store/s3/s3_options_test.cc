// s3:// URLs, bucket names and option checks: what fails says what to fix.
#include "core/store/s3/s3_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/store/http/http.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;

TEST(ParseS3UrlTest, BucketAndPrefix) {
  StatusOr<S3Options> o = ParseS3Url("s3://my-models/llama//3");
  ASSERT_FALSE(o.ok()) << "an empty path component";
  o = ParseS3Url("s3://my-models/llama/3/");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->bucket, "my-models");
  EXPECT_EQ(o->prefix, "llama/3/");
  o = ParseS3Url("s3://my-models");
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->prefix, "");
}

TEST(ParseS3UrlTest, OtherFormsSayWhatToWrite) {
  EXPECT_THAT(ParseS3Url("s3a://b/p").status().message(), HasSubstr("write it as s3://BUCKET/PREFIX"));
  EXPECT_THAT(ParseS3Url("https://b.s3.amazonaws.com/p").status().message(), HasSubstr("-o endpoint=URL"));
  EXPECT_THAT(ParseS3Url("s3:///p").status().message(), HasSubstr("names no bucket"));
}

TEST(BucketNameTest, Rules) {
  EXPECT_TRUE(ValidateS3BucketName("my-bucket.v2").ok());
  EXPECT_TRUE(ValidateS3BucketName("Legacy_Bucket").ok()) << "legacy names are reached path-style";
  EXPECT_THAT(ValidateS3BucketName("ab").message(), HasSubstr("shorter than 3"));
  EXPECT_THAT(ValidateS3BucketName("a..b").message(), HasSubstr("two adjacent periods"));
  EXPECT_THAT(ValidateS3BucketName("192.168.1.1").message(), HasSubstr("IP address"));
  EXPECT_THAT(ValidateS3BucketName("bad!name").message(), HasSubstr("the character '!'"));
  EXPECT_THAT(ValidateS3BucketName("-start").message(), HasSubstr("start and end with a letter or digit"));
}

TEST(VirtualHostTest, OnlyDnsSafeNames) {
  EXPECT_TRUE(IsVirtualHostable("my-bucket", true));
  EXPECT_FALSE(IsVirtualHostable("my.bucket", true));
  EXPECT_TRUE(IsVirtualHostable("my.bucket", false));
  EXPECT_FALSE(IsVirtualHostable("Legacy_Bucket", false));
  EXPECT_TRUE(IsIpLiteral("10.0.0.1"));
  EXPECT_TRUE(IsIpLiteral("[::1]"));
  EXPECT_FALSE(IsIpLiteral("localhost"));
}

TEST(ValidateS3OptionsTest, ValuesAreChecked) {
  S3Options o;
  o.bucket = "bkt";
  EXPECT_TRUE(ValidateS3Options(o).ok());
  o.endpoint = "ftp://x";
  EXPECT_THAT(ValidateS3Options(o).message(), HasSubstr("must start with https://"));
  o.endpoint = "";
  o.region = "EU West";
  EXPECT_THAT(ValidateS3Options(o).message(), HasSubstr("is not a region name"));
  o.region = "auto";
  EXPECT_TRUE(ValidateS3Options(o).ok());
  o.expected_bucket_owner = "12345";
  EXPECT_THAT(ValidateS3Options(o).message(), HasSubstr("not an AWS account ID (12 digits)"));
  o.expected_bucket_owner = "";
  o.ca_file = "/nonexistent/ca.pem";
  EXPECT_THAT(ValidateS3Options(o).message(), HasSubstr("cannot be read"));
  o.ca_file = "";
  o.user_agent_prefix = "line\nbreak";
  EXPECT_THAT(ValidateS3Options(o).message(), HasSubstr("user_agent_prefix holds a control character"));
}

TEST(HttpClientOptionsTest, TheUserAgentStartsWithThePrefix) {
  HttpClientOptions o;
  EXPECT_EQ(UserAgentFor(o), "tensorfs/0.1");
  o.user_agent_prefix = "s3-csi-driver/v2.7.0 credential-source#driver";
  EXPECT_EQ(UserAgentFor(o), "s3-csi-driver/v2.7.0 credential-source#driver tensorfs/0.1");
  EXPECT_EQ(CurlOptionsFor(o).user_agent, UserAgentFor(o));
}

TEST(HttpClientOptionsTest, TheSystemCaFileIsAnExistingBundle) {
  const std::string ca = SystemCaFile();
  ASSERT_FALSE(ca.empty()) << "this machine has ca-certificates (packaging/install-deps.sh)";
  EXPECT_EQ(ca, "/etc/ssl/certs/ca-certificates.crt") << "Debian's is looked for first";
}

TEST(S3UrlTest, AsUsersWriteIt) {
  EXPECT_EQ(S3Url("b", "models/"), "s3://b/models");
  EXPECT_EQ(S3Url("b", ""), "s3://b");
  EXPECT_EQ(S3Url("b", "m/x.bin"), "s3://b/m/x.bin");
}

}  // namespace
}  // namespace tensorfs
