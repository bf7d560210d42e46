#include "core/store/gcs/gcs_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/core/store/http/scoped_env.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::tensorfs::testing::ScopedEnv;

TEST(ParseGcsUrlTest, BucketOnlyHasEmptyPrefix) {
  StatusOr<GcsOptions> o = ParseGcsUrl("gs://my-bucket");
  ASSERT_TRUE(o.ok()) << o.status().ToString();
  EXPECT_EQ(o->bucket, "my-bucket");
  EXPECT_EQ(o->prefix, "");
  EXPECT_EQ(ParseGcsUrl("gs://my-bucket/")->prefix, "");
}

TEST(ParseGcsUrlTest, PrefixIsNormalisedToEndInSlash) {
  EXPECT_EQ(ParseGcsUrl("gs://b-1/models/llama")->prefix, "models/llama/");
  EXPECT_EQ(ParseGcsUrl("gs://b-1/models/llama/")->prefix, "models/llama/");
  EXPECT_EQ(ParseGcsUrl("gs://b-1/models/llama//")->prefix, "models/llama/");
  EXPECT_EQ(ParseGcsUrl("gs://b-1/a b/#c?")->prefix, "a b/#c?/");
}

TEST(ParseGcsUrlTest, DottedAndUnderscoreBucketNamesAreValid) {
  EXPECT_TRUE(ParseGcsUrl("gs://example.com.data").ok());
  EXPECT_TRUE(ParseGcsUrl("gs://my_bucket_01").ok());
}

TEST(ParseGcsUrlTest, NotAGsUrlSaysWhatToWrite) {
  Status s = ParseGcsUrl("s3://bucket/x").status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is not a gs:// URL"));
  EXPECT_THAT(s.message(), HasSubstr("gs://BUCKET[/PREFIX]"));
  EXPECT_THAT(ParseGcsUrl("https://storage.googleapis.com/b/o").status().message(), HasSubstr("gs:// form"));
  EXPECT_THAT(ParseGcsUrl("gs:/bucket").status().message(), HasSubstr("gs://BUCKET/PREFIX"));
  EXPECT_THAT(ParseGcsUrl("/data/ckpt").status().message(), HasSubstr("not a gs:// URL"));
}

TEST(ParseGcsUrlTest, EmptyBucketIsRejected) {
  EXPECT_THAT(ParseGcsUrl("gs://").status().message(), HasSubstr("names no bucket"));
  EXPECT_THAT(ParseGcsUrl("gs:///prefix").status().message(), HasSubstr("names no bucket"));
}

TEST(ParseGcsUrlTest, BadBucketNamesSayWhichRuleIsBroken) {
  EXPECT_THAT(ParseGcsUrl("gs://My-Bucket").status().message(), HasSubstr("upper-case"));
  EXPECT_THAT(ParseGcsUrl("gs://ab").status().message(), HasSubstr("shorter than 3"));
  EXPECT_THAT(ParseGcsUrl("gs://" + std::string(64, 'a')).status().message(), HasSubstr("too long"));
  EXPECT_THAT(ParseGcsUrl("gs://-bucket").status().message(), HasSubstr("start and end with a letter or digit"));
  EXPECT_THAT(ParseGcsUrl("gs://bucket-").status().message(), HasSubstr("start and end"));
  EXPECT_THAT(ParseGcsUrl("gs://buck$et").status().message(), HasSubstr("character '$'"));
  EXPECT_THAT(ParseGcsUrl("gs://a..b").status().message(), HasSubstr("empty dot-separated"));
  EXPECT_THAT(ParseGcsUrl("gs://192.168.1.1").status().message(), HasSubstr("IP address"));
  EXPECT_THAT(ParseGcsUrl("gs://google-x").status().message(), HasSubstr("goog"));
  // Every message points at the naming rules and quotes the URL.
  Status s = ParseGcsUrl("gs://My-Bucket/x").status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("gs://My-Bucket/x"));
  EXPECT_THAT(s.message(), HasSubstr("buckets#naming"));
}

TEST(ParseGcsUrlTest, EmptyPathSegmentsAndControlCharactersAreRejected) {
  EXPECT_THAT(ParseGcsUrl("gs://bucket//x").status().message(), HasSubstr("empty path component"));
  EXPECT_THAT(ParseGcsUrl("gs://bucket/a//b").status().message(), HasSubstr("empty path component"));
  EXPECT_THAT(ParseGcsUrl("gs://bucket/a\nb").status().message(), HasSubstr("control character"));
}

TEST(ResolveEndpointTest, DefaultIsHttpsGoogle) {
  ScopedEnv env("STORAGE_EMULATOR_HOST", std::nullopt);
  EXPECT_EQ(ResolveEndpoint(""), "https://storage.googleapis.com");
}

TEST(ResolveEndpointTest, EmulatorHostWithoutSchemeGetsHttp) {
  ScopedEnv env("STORAGE_EMULATOR_HOST", "localhost:9000");
  EXPECT_EQ(ResolveEndpoint(""), "http://localhost:9000");
}

TEST(ResolveEndpointTest, EmulatorHostWithSchemeIsKept) {
  ScopedEnv env("STORAGE_EMULATOR_HOST", "http://h:4443/");
  EXPECT_EQ(ResolveEndpoint(""), "http://h:4443");
  ScopedEnv env2("STORAGE_EMULATOR_HOST", "https://emu.example:443");
  EXPECT_EQ(ResolveEndpoint(""), "https://emu.example:443");
}

TEST(ResolveEndpointTest, ExplicitEndpointWinsOverEmulatorHost) {
  ScopedEnv env("STORAGE_EMULATOR_HOST", "localhost:9000");
  EXPECT_EQ(ResolveEndpoint("http://127.0.0.1:8080"), "http://127.0.0.1:8080");
  // Without a scheme an explicit endpoint means TLS.
  EXPECT_EQ(ResolveEndpoint("storage.example.com"), "https://storage.example.com");
}

TEST(ResolveEndpointTest, EmptyEmulatorHostIsIgnored) {
  ScopedEnv env("STORAGE_EMULATOR_HOST", "");
  EXPECT_EQ(ResolveEndpoint(""), "https://storage.googleapis.com");
}

TEST(ValidateGcsOptionsTest, AcceptsDefaults) {
  GcsOptions o;
  o.bucket = "bucket";
  EXPECT_TRUE(ValidateGcsOptions(o).ok());
}

TEST(ValidateGcsOptionsTest, RejectsContradictionsAndBadValues) {
  GcsOptions o;
  o.bucket = "bucket";
  o.anonymous = true;
  o.key_file = "/k.json";
  EXPECT_THAT(ValidateGcsOptions(o).message(), HasSubstr("contradict"));
  o = GcsOptions{.bucket = "bucket", .endpoint = "ftp://x"};
  EXPECT_THAT(ValidateGcsOptions(o).message(), HasSubstr("https://"));
  o = GcsOptions{.bucket = "bucket", .prefix = "no-slash"};
  EXPECT_THAT(ValidateGcsOptions(o).message(), HasSubstr("must end with '/'"));
  o = GcsOptions{.bucket = "bucket"};
  o.max_connections = 0;
  EXPECT_THAT(ValidateGcsOptions(o).message(), HasSubstr("max_connections"));
}

TEST(GcsUrlTest, FormatsBucketAndName) {
  EXPECT_EQ(GcsUrl("b", ""), "gs://b");
  EXPECT_EQ(GcsUrl("b", "models/llama/"), "gs://b/models/llama");
  EXPECT_EQ(GcsUrl("b", "m/x.safetensors"), "gs://b/m/x.safetensors");
}

}  // namespace
}  // namespace tensorfs
