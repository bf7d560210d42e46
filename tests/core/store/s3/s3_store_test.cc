// S3Store over a scripted transport and a fake clock: what it sends (addressing,
// key encoding, SigV4 headers, If-Match, the listing's query) and what it makes
// of the answers (pages, ETags, 412, wrong regions, expired tokens, S3 errors,
// retries counted by cause).
#include "core/store/s3/s3_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>

#include "core/store/s3/sigv4.h"
#include "tests/core/store/http/fakes.h"
#include "tests/support/aws_env.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;
using ::tensorfs::testing::Deliver;
using ::tensorfs::testing::FakeClock;
using ::tensorfs::testing::FakeHttpClient;
using ::tensorfs::testing::FakeReply;
using ::tensorfs::testing::RequestHeader;

// 2024-01-02T03:04:05Z
const std::chrono::system_clock::time_point kNow{std::chrono::seconds(1704164645)};

// Fixed keys; counts Invalidate() and hands out a new session token after one.
class FakeCredentials : public AwsCredentialsProvider {
 public:
  StatusOr<AwsCredentials> Get() override {
    return AwsCredentials{"AKIDTEST", "secret", session_token + std::to_string(invalidated)};
  }
  std::string Describe() const override { return "the test's keys (access key AKID...TEST)"; }
  bool Invalidate() override {
    ++invalidated;
    return true;
  }
  std::string session_token = "token-";
  int invalidated = 0;
};

std::string Xml(std::string_view body) { return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + std::string(body); }

FakeReply S3Error(long status, std::string code, std::string extra = "") {
  return FakeReply{.status = status,
                   .headers = {{"content-type", "application/xml"}},
                   .body = Xml("<Error><Code>" + code + "</Code><Message>message of " + code + "</Message>" +
                               extra + "<RequestId>1</RequestId></Error>")};
}

// A 206 for `req` over `object` with ETag `etag`, its body cut to `deliver` bytes.
FakeHttpClient::Handler Media(std::string object, std::string etag, size_t deliver = std::string::npos) {
  return [=](const HttpRequest& req) {
    uint64_t first = 0, last = 0;
    const std::string range = RequestHeader(req, "Range");
    EXPECT_EQ(std::sscanf(range.c_str(), "bytes=%lu-%lu", &first, &last), 2) << range;
    FakeReply r;
    r.status = 206;
    r.headers["content-range"] =
        "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" + std::to_string(object.size());
    r.headers["content-length"] = std::to_string(last - first + 1);
    r.headers["etag"] = "\"" + etag + "\"";
    r.body = object.substr(first, last - first + 1);
    if (deliver != std::string::npos) r.body.resize(std::min(deliver, r.body.size()));
    return Deliver(req, r);
  };
}

class S3StoreTest : public ::testing::Test {
 protected:
  void Make(S3Options options = {}) {
    if (options.bucket.empty()) options.bucket = "bkt";
    auto http = std::make_unique<FakeHttpClient>();
    http_ = http.get();
    S3Store::Dependencies deps;
    deps.http = std::move(http);
    if (anonymous_) {
      deps.credentials = MakeAnonymousAwsCredentials();
    } else {
      auto creds = std::make_unique<FakeCredentials>();
      creds_ = creds.get();
      deps.credentials = std::move(creds);
    }
    deps.clock = &clock_;
    deps.jitter = [] { return 1.0; };
    deps.metrics = &metrics_;
    deps.wall_clock = [] { return kNow; };
    StatusOr<std::unique_ptr<S3Store>> store = S3Store::Create(options, std::move(deps));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }
  Status Read(const std::string& name, const std::string& etag, uint64_t offset, std::string& buf) {
    return store_->Read(ObjectId{name, Generation{.token = etag}}, offset, std::as_writable_bytes(std::span(buf)));
  }

  testing::TempDir home_;
  testing::ScopedAwsEnvironment env_{home_.path()};
  bool anonymous_ = false;
  FakeClock clock_;
  Metrics metrics_;
  FakeHttpClient* http_ = nullptr;
  FakeCredentials* creds_ = nullptr;
  std::unique_ptr<S3Store> store_;
};

TEST_F(S3StoreTest, AwsEndpointIsVirtualHostedInTheRegion) {
  Make({.region = "eu-west-1"});
  EXPECT_EQ(store_->BucketUrl(), "https://bkt.s3.eu-west-1.amazonaws.com");
  EXPECT_FALSE(store_->path_style());
}

TEST_F(S3StoreTest, IpEndpointsAndForcedPathStyleAddressTheBucketInThePath) {
  Make({.endpoint = "http://127.0.0.1:9000"});
  EXPECT_EQ(store_->BucketUrl(), "http://127.0.0.1:9000/bkt");
  Make({.endpoint = "https://minio.example:443", .force_path_style = true});
  EXPECT_EQ(store_->BucketUrl(), "https://minio.example/bkt") << "the default port is dropped";
  Make({.bucket = "dotted.bucket", .endpoint = "https://s3.example"});
  EXPECT_TRUE(store_->path_style()) << "a dotted bucket would not match the TLS certificate";
  Make({.endpoint = "http://localhost:9000"});
  EXPECT_EQ(store_->BucketUrl(), "http://bkt.localhost:9000");
}

TEST_F(S3StoreTest, EndpointAndRegionComeFromTheEnvironmentAsTheSdksReadThem) {
  env_.Set("AWS_ENDPOINT_URL", "http://other:1");
  env_.Set("AWS_ENDPOINT_URL_S3", "http://10.0.0.5:9000/");
  env_.Set("AWS_DEFAULT_REGION", "ap-south-1");
  env_.Set("AWS_REGION", "eu-north-1");
  Make();
  EXPECT_EQ(store_->BucketUrl(), "http://10.0.0.5:9000/bkt");
  EXPECT_EQ(store_->region(), "eu-north-1");
}

TEST_F(S3StoreTest, ProfileGivesRegionAndEndpoint) {
  testing::WriteFile(home_.path() + "/.aws/config",
                     "[profile minio]\nregion = us-west-2\nendpoint_url = http://192.168.1.9:9000\n");
  Make({.profile = "minio"});
  EXPECT_EQ(store_->region(), "us-west-2");
  EXPECT_EQ(store_->BucketUrl(), "http://192.168.1.9:9000/bkt");
}

TEST_F(S3StoreTest, AnEndpointWithAPathIsRefused) {
  auto http = std::make_unique<FakeHttpClient>();
  S3Store::Dependencies deps;
  deps.http = std::move(http);
  deps.credentials = MakeAnonymousAwsCredentials();
  StatusOr<std::unique_ptr<S3Store>> store = S3Store::Create({.bucket = "bkt", .endpoint = "https://h/s3"},
                                                             std::move(deps));
  ASSERT_FALSE(store.ok());
  EXPECT_THAT(store.status().message(), HasSubstr("has a path; give only scheme://host[:port]"));
}

TEST_F(S3StoreTest, RequestsAreSignedWithSigV4) {
  Make({.region = "eu-west-1"});
  http_->Push(FakeReply{.status = 200, .headers = {{"content-length", "5"}, {"etag", "\"abc\""}}});
  ASSERT_TRUE(store_->Stat("m.safetensors").ok());
  const HttpRequest req = http_->requests().at(0);
  EXPECT_EQ(req.method, "HEAD");
  EXPECT_EQ(req.url, "https://bkt.s3.eu-west-1.amazonaws.com/m.safetensors");
  EXPECT_EQ(RequestHeader(req, "x-amz-date"), "20240102T030405Z");
  EXPECT_EQ(RequestHeader(req, "x-amz-content-sha256"), "UNSIGNED-PAYLOAD");
  EXPECT_EQ(RequestHeader(req, "x-amz-security-token"), "token-0");
  // The signature is SignV4's over exactly what was sent.
  SignableRequest expected{"HEAD", "/m.safetensors", {},
                           {{"x-amz-date", "20240102T030405Z"},
                            {"x-amz-content-sha256", "UNSIGNED-PAYLOAD"},
                            {"x-amz-security-token", "token-0"},
                            {"host", "bkt.s3.eu-west-1.amazonaws.com"}},
                           "UNSIGNED-PAYLOAD"};
  EXPECT_EQ(RequestHeader(req, "Authorization"),
            SignV4(expected, {"AKIDTEST", "secret"}, "eu-west-1", "s3", kNow).authorization);
  EXPECT_THAT(RequestHeader(req, "Authorization"),
              StartsWith("AWS4-HMAC-SHA256 Credential=AKIDTEST/20240102/eu-west-1/s3/aws4_request,"
                         "SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"));
}

TEST_F(S3StoreTest, UnsignedRequestsCarryNoAuthorization) {
  anonymous_ = true;
  Make({.region = "us-east-1"});
  http_->Push(FakeReply{.status = 200, .headers = {{"content-length", "5"}}});
  ASSERT_TRUE(store_->Stat("k").ok());
  EXPECT_EQ(RequestHeader(http_->requests().at(0), "Authorization"), "");
  EXPECT_EQ(RequestHeader(http_->requests().at(0), "x-amz-date"), "");
}

TEST_F(S3StoreTest, KeysAreUriEncodedUnderThePrefix) {
  StatusOr<S3Options> options = ParseS3Url("s3://bkt/models dir/");
  ASSERT_TRUE(options.ok());
  options->endpoint = "http://127.0.0.1:9000";
  Make(*options);
  http_->Push(FakeReply{.status = 200, .headers = {{"content-length", "1"}}});
  ASSERT_TRUE(store_->Stat("a b+c~\xC3\xBC?#%.bin").ok());
  EXPECT_EQ(http_->requests().at(0).url,
            "http://127.0.0.1:9000/bkt/models%20dir/a%20b%2Bc~%C3%BC%3F%23%25.bin");
}

TEST_F(S3StoreTest, RequesterPaysAndTheExpectedOwnerAreSentAndSigned) {
  Make({.region = "us-east-1", .requester_pays = true, .expected_bucket_owner = "123456789012"});
  http_->Push(FakeReply{.status = 200, .headers = {{"content-length", "1"}}});
  ASSERT_TRUE(store_->Stat("k").ok());
  const HttpRequest req = http_->requests().at(0);
  EXPECT_EQ(RequestHeader(req, "x-amz-request-payer"), "requester");
  EXPECT_EQ(RequestHeader(req, "x-amz-expected-bucket-owner"), "123456789012");
  EXPECT_THAT(RequestHeader(req, "Authorization"),
              HasSubstr("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-expected-bucket-owner;"
                        "x-amz-request-payer;x-amz-security-token,"));
}

TEST_F(S3StoreTest, StatGivesSizeEtagAndModificationTime) {
  Make({.region = "us-east-1"});
  http_->Push(FakeReply{.status = 200,
                        .headers = {{"content-length", "1234"},
                                    {"etag", "\"9b2cf535f27731c974343645a3985328\""},
                                    {"last-modified", "Wed, 12 Oct 2009 17:50:00 GMT"}}});
  StatusOr<ObjectInfo> info = store_->Stat("k");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->size, 1234u);
  EXPECT_EQ(info->generation.token, "9b2cf535f27731c974343645a3985328");
  EXPECT_EQ(info->mtime_ns, int64_t{1255369800} * 1'000'000'000);
}

TEST_F(S3StoreTest, ListFollowsEveryPageAndNamesAreRelativeToThePrefix) {
  StatusOr<S3Options> options = ParseS3Url("s3://bkt/models");
  ASSERT_TRUE(options.ok());
  options->region = "us-east-1";
  Make(*options);
  http_->Push(FakeReply{.status = 200,
                        .body = Xml("<ListBucketResult><EncodingType>url</EncodingType>"
                                    "<Contents><Key>models/a+b.json</Key><Size>3</Size><ETag>\"e1\"</ETag>"
                                    "<LastModified>2024-05-01T12:34:56.000Z</LastModified></Contents>"
                                    "<Contents><Key>models/folder/</Key><Size>0</Size></Contents>"
                                    "<CommonPrefixes><Prefix>models/sub/</Prefix></CommonPrefixes>"
                                    "<IsTruncated>true</IsTruncated>"
                                    "<NextContinuationToken>tok/1==</NextContinuationToken></ListBucketResult>")});
  http_->Push(FakeReply{.status = 200,
                        .body = Xml("<ListBucketResult><Contents><Key>models/c</Key><Size>7</Size>"
                                    "<ETag>&quot;e2&quot;</ETag></Contents><IsTruncated>false</IsTruncated>"
                                    "</ListBucketResult>")});
  StatusOr<Listing> listing = store_->List("", "/");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->objects.size(), 2u) << "the folder placeholder is left out";
  EXPECT_EQ(listing->objects[0].name, "a b.json");
  EXPECT_EQ(listing->objects[0].generation.token, "e1");
  EXPECT_EQ(listing->objects[1].name, "c");
  EXPECT_EQ(listing->objects[1].size, 7u);
  EXPECT_EQ(listing->objects[1].generation.token, "e2");
  EXPECT_EQ(listing->prefixes, std::vector<std::string>{"sub/"});
  const std::vector<HttpRequest> requests = http_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].url,
            "https://bkt.s3.us-east-1.amazonaws.com/"
            "?delimiter=%2F&encoding-type=url&list-type=2&max-keys=1000&prefix=models%2F");
  EXPECT_THAT(requests[1].url, HasSubstr("continuation-token=tok%2F1%3D%3D&"));
}

TEST_F(S3StoreTest, ATruncatedPageWithoutAContinuationTokenIsAnError) {
  Make({.region = "us-east-1"});
  http_->Push(FakeReply{.status = 200, .body = Xml("<ListBucketResult><IsTruncated>true</IsTruncated>"
                                                   "</ListBucketResult>")});
  StatusOr<Listing> listing = store_->List("", "/");
  ASSERT_FALSE(listing.ok());
  EXPECT_THAT(listing.status().message(), HasSubstr("no NextContinuationToken"));
}

TEST_F(S3StoreTest, AHostileListingIsRefusedWithoutRetrying) {
  Make({.region = "us-east-1"});
  http_->Push(FakeReply{.status = 200, .body = "<!DOCTYPE x [<!ENTITY a \"aaaa\">]><ListBucketResult/>"});
  StatusOr<Listing> listing = store_->List("", "/");
  ASSERT_FALSE(listing.ok());
  EXPECT_THAT(listing.status().message(), HasSubstr("document type declaration"));
  EXPECT_EQ(http_->requests().size(), 1u);
}

TEST_F(S3StoreTest, ReadSendsRangeAndIfMatchAndFillsTheBuffer) {
  Make({.region = "us-east-1"});
  const std::string object = "0123456789abcdefghij";
  http_->Push(Media(object, "etag-1"));
  std::string buf(8, '\0');
  ASSERT_TRUE(Read("w", "etag-1", 4, buf).ok());
  EXPECT_EQ(buf, "456789ab");
  const HttpRequest req = http_->requests().at(0);
  EXPECT_EQ(RequestHeader(req, "Range"), "bytes=4-11");
  EXPECT_EQ(RequestHeader(req, "If-Match"), "\"etag-1\"");
  EXPECT_THAT(RequestHeader(req, "Authorization"), HasSubstr("SignedHeaders=host;if-match;range;"));
}

TEST_F(S3StoreTest, ACutShortBodyResumesFromItsFirstMissingByte) {
  Make({.region = "us-east-1"});
  const std::string object = "0123456789abcdefghij";
  http_->Push(Media(object, "e", 3));
  http_->Push(Media(object, "e"));
  std::string buf(10, '\0');
  ASSERT_TRUE(Read("w", "e", 5, buf).ok());
  EXPECT_EQ(buf, object.substr(5, 10));
  EXPECT_EQ(RequestHeader(http_->requests().at(1), "Range"), "bytes=8-14");
  EXPECT_EQ(metrics_.retries.resumed_bytes.load(), 3u);
}

TEST_F(S3StoreTest, PreconditionFailedIsStaleNamingTheNewEtag) {
  Make({.region = "us-east-1"});
  http_->Push(S3Error(412, "PreconditionFailed"));
  http_->Push(FakeReply{.status = 200, .headers = {{"content-length", "20"}, {"etag", "\"etag-2\""}}});
  std::string buf(4, '\0');
  Status s = Read("w", "etag-1", 0, buf);
  EXPECT_EQ(s.code(), ErrorCode::kStale);
  EXPECT_THAT(s.message(), HasSubstr("s3://bkt/w changed while mounted (ETag etag-1 is gone; now ETag etag-2)"));
}

TEST_F(S3StoreTest, ADeletedObjectIsNotFound) {
  Make({.region = "us-east-1"});
  http_->Push(S3Error(412, "PreconditionFailed"));
  http_->Push(FakeReply{.status = 404});
  std::string buf(4, '\0');
  Status s = Read("w", "etag-1", 0, buf);
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("was deleted while mounted"));
}

TEST_F(S3StoreTest, BytesOfAnotherEtagAreNeverTaken) {
  Make({.region = "us-east-1"});
  http_->Push(Media("0123456789", "other"));
  http_->SetFallback([](const HttpRequest& req) {
    return Deliver(req, FakeReply{.status = 200, .headers = {{"content-length", "10"}, {"etag", "\"other\""}}});
  });
  std::string buf(4, 'x');
  Status s = Read("w", "mine", 0, buf);
  EXPECT_EQ(s.code(), ErrorCode::kStale) << s.ToString();
  EXPECT_EQ(buf, "xxxx");
}

TEST_F(S3StoreTest, AnUnpinnedReadIsPinnedToTheEtagOfItsFirstBytes) {
  Make({.region = "us-east-1"});
  const std::string object = "0123456789";
  http_->Push(Media(object, "first", 2));
  http_->Push(Media(object, "first"));
  std::string buf(6, '\0');
  ASSERT_TRUE(Read("w", "", 0, buf).ok());
  EXPECT_EQ(RequestHeader(http_->requests().at(0), "If-Match"), "");
  EXPECT_EQ(RequestHeader(http_->requests().at(1), "If-Match"), "\"first\"");
}

TEST_F(S3StoreTest, SlowDownIsRetriedAndCountedByCause) {
  Make({.region = "us-east-1"});
  const std::string object = "0123456789";
  http_->Push(S3Error(503, "SlowDown"));
  http_->Push(S3Error(500, "InternalError"));
  http_->Push(Media(object, "e"));
  std::string buf(10, '\0');
  ASSERT_TRUE(Read("w", "e", 0, buf).ok());
  EXPECT_EQ(buf, object);
  EXPECT_EQ(metrics_.retries.by_http_status[503].load(), 1u);
  EXPECT_EQ(metrics_.retries.by_http_status[500].load(), 1u);
  EXPECT_EQ(store_->counters().retries, 2u);
}

TEST_F(S3StoreTest, APersistentSlowDownGivesUpWithTheCode) {
  S3Options options{.region = "us-east-1"};
  options.retry_deadline = std::chrono::seconds(2);
  Make(options);
  http_->SetFallback([](const HttpRequest& req) { return Deliver(req, S3Error(503, "SlowDown")); });
  std::string buf(10, '\0');
  Status s = Read("w", "e", 0, buf);
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("gave up after"));
  EXPECT_THAT(s.message(), HasSubstr("HTTP 503 (SlowDown: message of SlowDown)"));
}

TEST_F(S3StoreTest, AWrongRegionAnswerSwitchesRegionAndRetriesThereOnce) {
  Make();
  EXPECT_EQ(store_->region(), "us-east-1");
  http_->Push([](const HttpRequest& req) {
    FakeReply r = S3Error(400, "AuthorizationHeaderMalformed", "<Region>eu-central-1</Region>");
    r.headers["x-amz-bucket-region"] = "eu-central-1";
    return Deliver(req, r);
  });
  http_->Push(FakeReply{.status = 200, .headers = {{"content-length", "3"}}});
  ASSERT_TRUE(store_->Stat("k").ok());
  const std::vector<HttpRequest> requests = http_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].url, "https://bkt.s3.eu-central-1.amazonaws.com/k");
  EXPECT_THAT(RequestHeader(requests[1], "Authorization"), HasSubstr("/eu-central-1/s3/aws4_request"));
  EXPECT_EQ(store_->region(), "eu-central-1");
  EXPECT_EQ(store_->BucketUrl(), "https://bkt.s3.eu-central-1.amazonaws.com");
}

TEST_F(S3StoreTest, AHeadToTheWrongRegionIsFollowedByItsHeader) {
  Make();
  http_->Push(FakeReply{.status = 301, .headers = {{"x-amz-bucket-region", "ap-northeast-1"}}});
  http_->Push(FakeReply{.status = 301, .headers = {{"x-amz-bucket-region", "sa-east-1"}}});
  StatusOr<ObjectInfo> info = store_->Stat("k");
  ASSERT_FALSE(info.ok()) << "retried in the new region once, not again";
  EXPECT_EQ(http_->requests().size(), 2u);
  EXPECT_EQ(info.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(info.status().message(), HasSubstr("-o region=REGION"));
}

TEST_F(S3StoreTest, ExpiredCredentialsAreFetchedAgainOnce) {
  Make({.region = "us-east-1"});
  http_->Push(S3Error(400, "ExpiredToken"));
  http_->Push(FakeReply{.status = 200, .headers = {{"content-length", "3"}}});
  ASSERT_TRUE(store_->Stat("k").ok());
  EXPECT_EQ(creds_->invalidated, 1);
  EXPECT_EQ(RequestHeader(http_->requests().at(1), "x-amz-security-token"), "token-1");
}

TEST_F(S3StoreTest, RefusedCredentialsNameTheSourceAndTheCode) {
  Make({.region = "us-east-1"});
  http_->Push(S3Error(403, "SignatureDoesNotMatch"));
  StatusOr<Listing> listing = store_->List("", "/");
  ASSERT_FALSE(listing.ok());
  EXPECT_EQ(listing.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(listing.status().message(),
              HasSubstr("access denied (HTTP 403 SignatureDoesNotMatch) to s3://bkt using the test's keys"));
  EXPECT_THAT(listing.status().message(), HasSubstr("check the secret"));
  EXPECT_EQ(http_->requests().size(), 1u) << "not retried";
}

TEST_F(S3StoreTest, AccessDeniedSaysWhichPermissionsToGrant) {
  Make({.region = "us-east-1"});
  http_->Push(S3Error(403, "AccessDenied"));
  StatusOr<Listing> listing = store_->List("", "/");
  ASSERT_FALSE(listing.ok());
  EXPECT_THAT(listing.status().message(), HasSubstr("s3:ListBucket on arn:aws:s3:::bkt"));
}

TEST_F(S3StoreTest, AMissingBucketIsNotFound) {
  Make({.region = "us-east-1"});
  http_->Push(S3Error(404, "NoSuchBucket"));
  StatusOr<Listing> listing = store_->List("", "/");
  ASSERT_FALSE(listing.ok());
  EXPECT_EQ(listing.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(listing.status().message(), HasSubstr("bucket s3://bkt not found (HTTP 404) (NoSuchBucket"));
}

TEST(NormalizeEtagTest, QuotesAndWeakPrefixAreDropped) {
  EXPECT_EQ(NormalizeEtag("\"abc\""), "abc");
  EXPECT_EQ(NormalizeEtag("W/\"abc-3\""), "abc-3");
  EXPECT_EQ(NormalizeEtag("bare"), "bare");
}

}  // namespace
}  // namespace tensorfs
