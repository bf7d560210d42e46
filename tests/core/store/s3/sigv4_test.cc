// SigV4 against AWS's published examples (the S3 API reference, "Signature
// Calculations for the Authorization Header: Transferring Payload in a Single
// Chunk": GET Object with a Range, PUT Object, GET Bucket Lifecycle, Get Bucket
// (List Objects), all for examplebucket in us-east-1 at 20130524T000000Z with
// the documented example keys), each with its canonical request, string to sign
// and signature; and the encodings that commonly break signatures.
#include "core/store/s3/sigv4.h"

#include <gtest/gtest.h>

#include <chrono>

namespace tensorfs {
namespace {

const SigningCredentials kExampleKeys{"AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"};
constexpr char kHost[] = "examplebucket.s3.amazonaws.com";
constexpr char kAmzDate[] = "20130524T000000Z";

std::chrono::system_clock::time_point ExampleTime() {
  // 2013-05-24T00:00:00Z
  return std::chrono::system_clock::time_point(std::chrono::seconds(1369353600));
}

TEST(Sigv4ExampleTest, GetObjectWithRange) {
  SignableRequest r;
  r.method = "GET";
  r.canonical_uri = "/test.txt";
  r.headers = {{"Host", kHost},
               {"Range", "bytes=0-9"},
               {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)},
               {"x-amz-date", kAmzDate}};
  r.payload_hash = std::string(kEmptyPayloadSha256);
  const SignatureV4 s = SignV4(r, kExampleKeys, "us-east-1", "s3", ExampleTime());
  EXPECT_EQ(s.canonical_request,
            "GET\n"
            "/test.txt\n"
            "\n"
            "host:examplebucket.s3.amazonaws.com\n"
            "range:bytes=0-9\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n"
            "\n"
            "host;range;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972");
  EXPECT_EQ(s.signature, "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
  EXPECT_EQ(s.authorization,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
            "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
            "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(Sigv4ExampleTest, PutObject) {
  const std::string payload_hash = Sha256Hex("Welcome to Amazon S3.");
  ASSERT_EQ(payload_hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  SignableRequest r;
  r.method = "PUT";
  r.canonical_uri = "/" + UriEncode("test$file.text", /*encode_slash=*/false);
  r.headers = {{"Host", kHost},
               {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
               {"x-amz-date", kAmzDate},
               {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
               {"x-amz-content-sha256", payload_hash}};
  r.payload_hash = payload_hash;
  const SignatureV4 s = SignV4(r, kExampleKeys, "us-east-1", "s3", ExampleTime());
  EXPECT_EQ(s.canonical_request,
            "PUT\n"
            "/test%24file.text\n"
            "\n"
            "date:Fri, 24 May 2013 00:00:00 GMT\n"
            "host:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072\n"
            "x-amz-date:20130524T000000Z\n"
            "x-amz-storage-class:REDUCED_REDUNDANCY\n"
            "\n"
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n"
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d");
  EXPECT_EQ(s.signature, "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

TEST(Sigv4ExampleTest, GetBucketLifecycle) {
  SignableRequest r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.query = {{"lifecycle", ""}};
  r.headers = {{"Host", kHost},
               {"x-amz-date", kAmzDate},
               {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)}};
  r.payload_hash = std::string(kEmptyPayloadSha256);
  const SignatureV4 s = SignV4(r, kExampleKeys, "us-east-1", "s3", ExampleTime());
  EXPECT_EQ(s.canonical_request,
            "GET\n"
            "/\n"
            "lifecycle=\n"
            "host:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n"
            "\n"
            "host;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca");
  EXPECT_EQ(s.signature, "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(Sigv4ExampleTest, GetBucketListObjects) {
  SignableRequest r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.query = {{"prefix", "J"}, {"max-keys", "2"}};  // out of order: the canonical form sorts them
  r.headers = {{"Host", kHost},
               {"x-amz-date", kAmzDate},
               {"x-amz-content-sha256", std::string(kEmptyPayloadSha256)}};
  r.payload_hash = std::string(kEmptyPayloadSha256);
  const SignatureV4 s = SignV4(r, kExampleKeys, "us-east-1", "s3", ExampleTime());
  EXPECT_EQ(s.canonical_request,
            "GET\n"
            "/\n"
            "max-keys=2&prefix=J\n"
            "host:examplebucket.s3.amazonaws.com\n"
            "x-amz-content-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855\n"
            "x-amz-date:20130524T000000Z\n"
            "\n"
            "host;x-amz-content-sha256;x-amz-date\n"
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(s.string_to_sign,
            "AWS4-HMAC-SHA256\n"
            "20130524T000000Z\n"
            "20130524/us-east-1/s3/aws4_request\n"
            "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7");
  EXPECT_EQ(s.signature, "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

TEST(Sigv4EncodingTest, KeysKeepSlashesAndEncodeEverythingOutsideTheUnreservedSet) {
  EXPECT_EQ(UriEncode("models/with space.safetensors", false), "models/with%20space.safetensors");
  EXPECT_EQ(UriEncode("a+b", false), "a%2Bb");  // never left as '+', which S3 would read as a space
  EXPECT_EQ(UriEncode("tilde~dash-dot.under_", false), "tilde~dash-dot.under_");
  EXPECT_EQ(UriEncode("ünï", false), "%C3%BCn%C3%AF");  // UTF-8, byte by byte, upper-case hex
  EXPECT_EQ(UriEncode("q?x#y%z=&", false), "q%3Fx%23y%25z%3D%26");
  EXPECT_EQ(UriEncode("a/b", true), "a%2Fb");
}

TEST(Sigv4EncodingTest, QueryValuesAreEncodedAndSortedByName) {
  EXPECT_EQ(CanonicalQueryString({{"prefix", "dir/with space+"},
                                  {"list-type", "2"},
                                  {"delimiter", "/"},
                                  {"continuation-token", "1/abc=="}}),
            "continuation-token=1%2Fabc%3D%3D&delimiter=%2F&list-type=2&prefix=dir%2Fwith%20space%2B");
}

TEST(Sigv4EncodingTest, HeaderValuesAreTrimmedAndInnerSpacesCollapsed) {
  SignableRequest r;
  r.method = "GET";
  r.canonical_uri = "/k";
  r.headers = {{"Host", "h"}, {"X-Amz-Meta-A", "  two   spaces  here "}, {"x-amz-date", kAmzDate}};
  r.payload_hash = std::string(kUnsignedPayload);
  const SignatureV4 s = SignV4(r, kExampleKeys, "us-east-1", "s3", ExampleTime());
  EXPECT_NE(s.canonical_request.find("\nx-amz-meta-a:two spaces here\n"), std::string::npos) << s.canonical_request;
  EXPECT_EQ(s.signed_headers, "host;x-amz-date;x-amz-meta-a");
}

TEST(Sigv4SessionTokenTest, TheSecurityTokenIsASignedHeader) {
  SignableRequest with_token;
  with_token.method = "GET";
  with_token.canonical_uri = "/k";
  with_token.headers = {{"host", kHost},
                        {"x-amz-date", kAmzDate},
                        {"x-amz-content-sha256", std::string(kUnsignedPayload)},
                        {"x-amz-security-token", "FQoGZXIvYXdzEJr"}};
  with_token.payload_hash = std::string(kUnsignedPayload);
  SignableRequest without = with_token;
  without.headers.pop_back();
  const SignatureV4 a = SignV4(with_token, kExampleKeys, "us-east-1", "s3", ExampleTime());
  const SignatureV4 b = SignV4(without, kExampleKeys, "us-east-1", "s3", ExampleTime());
  EXPECT_EQ(a.signed_headers, "host;x-amz-content-sha256;x-amz-date;x-amz-security-token");
  EXPECT_NE(a.canonical_request.find("\nx-amz-security-token:FQoGZXIvYXdzEJr\n"), std::string::npos);
  EXPECT_NE(a.signature, b.signature);
}

TEST(Sigv4ScopeTest, RegionAndServiceChangeTheSignature) {
  SignableRequest r;
  r.method = "GET";
  r.canonical_uri = "/";
  r.headers = {{"host", kHost}, {"x-amz-date", kAmzDate}};
  r.payload_hash = std::string(kUnsignedPayload);
  const SignatureV4 east = SignV4(r, kExampleKeys, "us-east-1", "s3", ExampleTime());
  const SignatureV4 west = SignV4(r, kExampleKeys, "eu-west-1", "s3", ExampleTime());
  EXPECT_NE(east.signature, west.signature);
  EXPECT_NE(west.authorization.find("Credential=AKIAIOSFODNN7EXAMPLE/20130524/eu-west-1/s3/aws4_request"),
            std::string::npos);
}

TEST(Sigv4DateTest, AmzDateIsUtcBasicFormat) {
  EXPECT_EQ(AmzDate(ExampleTime() + std::chrono::hours(13) + std::chrono::minutes(5) + std::chrono::seconds(9)),
            "20130524T130509Z");
}

}  // namespace
}  // namespace tensorfs
