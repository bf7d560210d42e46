// The XML tensorfs reads from S3 and STS: ListObjectsV2 pages (objects, common
// prefixes, continuation, url-encoded names, entities) and what is refused
// (documents cut short, document type declarations and entity expansion,
// documents over the limits).
#include "core/store/s3/s3_xml.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tensorfs {
namespace {

using ::testing::HasSubstr;

constexpr char kPage[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name><Prefix>models/</Prefix><KeyCount>3</KeyCount><MaxKeys>2</MaxKeys>
  <Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>
  <Contents>
    <Key>models/a.safetensors</Key><LastModified>2024-05-01T12:34:56.789Z</LastModified>
    <ETag>&quot;5eb63bbbe01eeed093cb22bb8f5acdc3&quot;</ETag><Size>1234567890123</Size>
    <StorageClass>STANDARD</StorageClass>
  </Contents>
  <Contents>
    <Key>models/R&amp;D &lt;v2&gt;.json</Key><LastModified>2024-05-01T12:34:56.000Z</LastModified>
    <ETag>"abc-2"</ETag><Size>0</Size>
  </Contents>
  <CommonPrefixes><Prefix>models/sub/</Prefix></CommonPrefixes>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
</ListBucketResult>)";

TEST(ListObjectsV2Test, ObjectsPrefixesAndContinuation) {
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(kPage);
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 2u);
  EXPECT_EQ(page->objects[0].key, "models/a.safetensors");
  EXPECT_EQ(page->objects[0].size, 1234567890123u);
  EXPECT_EQ(page->objects[0].etag, "\"5eb63bbbe01eeed093cb22bb8f5acdc3\"");
  EXPECT_EQ(page->objects[0].last_modified, "2024-05-01T12:34:56.789Z");
  EXPECT_EQ(page->objects[1].key, "models/R&D <v2>.json");  // the predefined entities
  EXPECT_EQ(page->common_prefixes, std::vector<std::string>{"models/sub/"});
  EXPECT_TRUE(page->is_truncated);
  EXPECT_EQ(page->next_continuation_token, "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  EXPECT_EQ(page->key_count, 3);
}

TEST(ListObjectsV2Test, LastPageIsNotTruncated) {
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(
      "<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>k</Key><Size>1</Size></Contents>"
      "</ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_FALSE(page->is_truncated);
  EXPECT_EQ(page->next_continuation_token, "");
}

TEST(ListObjectsV2Test, UrlEncodedNamesAreDecodedWithPlusAsSpace) {
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(
      "<ListBucketResult><EncodingType>url</EncodingType><IsTruncated>false</IsTruncated>"
      "<Contents><Key>odd/with+space%2Bplus~%C3%BC%0A.txt</Key><Size>1</Size></Contents>"
      "<CommonPrefixes><Prefix>odd/sub+dir/</Prefix></CommonPrefixes></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  ASSERT_EQ(page->objects.size(), 1u);
  EXPECT_EQ(page->objects[0].key, "odd/with space+plus~\xC3\xBC\n.txt");
  EXPECT_EQ(page->common_prefixes, std::vector<std::string>{"odd/sub dir/"});
}

TEST(ListObjectsV2Test, CharacterReferencesAreDecoded) {
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(
      "<ListBucketResult><Contents><Key>a&#x20;b&#65;</Key><Size>1</Size></Contents></ListBucketResult>");
  ASSERT_TRUE(page.ok()) << page.status().ToString();
  EXPECT_EQ(page->objects[0].key, "a bA");
}

TEST(ListObjectsV2Test, ADocumentCutShortIsRefusedAsRetryable) {
  const std::string whole = kPage;
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(std::string_view(whole).substr(0, whole.size() / 2));
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), ErrorCode::kUnavailable);
  EXPECT_THAT(page.status().message(), HasSubstr("malformed"));
}

TEST(ListObjectsV2Test, ADocumentTypeDeclarationIsRefused) {
  // The "billion laughs": entities that expand to gigabytes.
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(
      "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"
      "<!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">"
      "<!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">]>"
      "<ListBucketResult><Contents><Key>&lol3;</Key><Size>1</Size></Contents></ListBucketResult>");
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), ErrorCode::kInternal);
  EXPECT_THAT(page.status().message(), HasSubstr("document type declaration"));
}

TEST(ListObjectsV2Test, AnExternalEntityIsRefused) {
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(
      "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>"
      "<ListBucketResult><Contents><Key>&xxe;</Key><Size>1</Size></Contents></ListBucketResult>");
  ASSERT_FALSE(page.ok());
  EXPECT_THAT(page.status().message(), HasSubstr("document type declaration"));
}

TEST(ListObjectsV2Test, AnUndeclaredEntityIsMalformed) {
  StatusOr<ListObjectsPage> page =
      ParseListObjectsV2("<ListBucketResult><Contents><Key>&nbsp;</Key><Size>1</Size></Contents></ListBucketResult>");
  ASSERT_FALSE(page.ok());
  EXPECT_THAT(page.status().message(), HasSubstr("undefined entity"));
}

TEST(ListObjectsV2Test, APageOverTheSizeLimitIsRefused) {
  XmlLimits limits;
  limits.max_bytes = 100;
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(kPage, limits);
  ASSERT_FALSE(page.ok());
  EXPECT_EQ(page.status().code(), ErrorCode::kInternal);
  EXPECT_THAT(page.status().message(), HasSubstr("over the limit of 100"));
}

TEST(ListObjectsV2Test, TooManyElementsAreRefused) {
  XmlLimits limits;
  limits.max_elements = 10;
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(kPage, limits);
  ASSERT_FALSE(page.ok());
  EXPECT_THAT(page.status().message(), HasSubstr("more than 10 elements"));
}

TEST(ListObjectsV2Test, DeepNestingIsRefused) {
  std::string deep = "<ListBucketResult>";
  for (int i = 0; i < 40; ++i) deep += "<a>";
  for (int i = 0; i < 40; ++i) deep += "</a>";
  deep += "</ListBucketResult>";
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(deep);
  ASSERT_FALSE(page.ok());
  EXPECT_THAT(page.status().message(), HasSubstr("nests deeper"));
}

TEST(ListObjectsV2Test, AnOverlongTextIsRefused) {
  XmlLimits limits;
  limits.max_text = 16;
  StatusOr<ListObjectsPage> page = ParseListObjectsV2(
      "<ListBucketResult><Contents><Key>0123456789abcdefXYZ</Key><Size>1</Size></Contents></ListBucketResult>",
      limits);
  ASSERT_FALSE(page.ok());
  EXPECT_THAT(page.status().message(), HasSubstr("longer than 16 bytes"));
}

TEST(ListObjectsV2Test, AnotherDocumentIsRefused) {
  StatusOr<ListObjectsPage> page = ParseListObjectsV2("<html><body>proxy login</body></html>");
  ASSERT_FALSE(page.ok());
  EXPECT_THAT(page.status().message(), HasSubstr("not a ListObjectsV2 result"));
}

TEST(ListObjectsV2Test, AMalformedSizeIsRefused) {
  StatusOr<ListObjectsPage> page =
      ParseListObjectsV2("<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>");
  ASSERT_FALSE(page.ok());
  EXPECT_THAT(page.status().message(), HasSubstr("'-1', not a number"));
}

TEST(AwsErrorTest, S3AndStsErrorBodies) {
  std::optional<AwsError> s3 = ParseAwsError(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>AuthorizationHeaderMalformed</Code>"
      "<Message>the region 'us-east-1' is wrong; expecting 'eu-west-1'</Message><Region>eu-west-1</Region>"
      "<RequestId>1</RequestId></Error>");
  ASSERT_TRUE(s3.has_value());
  EXPECT_EQ(s3->code, "AuthorizationHeaderMalformed");
  EXPECT_EQ(s3->region, "eu-west-1");
  std::optional<AwsError> sts = ParseAwsError(
      "<ErrorResponse><Error><Type>Sender</Type><Code>InvalidIdentityToken</Code><Message>bad</Message>"
      "</Error></ErrorResponse>");
  ASSERT_TRUE(sts.has_value());
  EXPECT_EQ(sts->code, "InvalidIdentityToken");
  EXPECT_EQ(sts->message, "bad");
  EXPECT_FALSE(ParseAwsError("").has_value());
  EXPECT_FALSE(ParseAwsError("<html>502 Bad Gateway</html>").has_value());
}

TEST(StsTest, AssumeRoleWithWebIdentityCredentials) {
  StatusOr<StsCredentials> c = ParseAssumeRoleWithWebIdentity(
      "<AssumeRoleWithWebIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">"
      "<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>ASIAX</AccessKeyId>"
      "<SecretAccessKey>secret</SecretAccessKey><SessionToken>token</SessionToken>"
      "<Expiration>2030-01-01T00:00:00Z</Expiration></Credentials></AssumeRoleWithWebIdentityResult>"
      "</AssumeRoleWithWebIdentityResponse>");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->access_key_id, "ASIAX");
  EXPECT_EQ(c->secret_access_key, "secret");
  EXPECT_EQ(c->session_token, "token");
  EXPECT_EQ(c->expiration, "2030-01-01T00:00:00Z");
  EXPECT_FALSE(ParseAssumeRoleWithWebIdentity("<AssumeRoleWithWebIdentityResponse/>").ok());
}

}  // namespace
}  // namespace tensorfs
