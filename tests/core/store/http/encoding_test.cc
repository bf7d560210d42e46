#include "core/store/http/encoding.h"

#include <gtest/gtest.h>

namespace tensorfs {
namespace {

TEST(PercentEncodeTest, KeepsOnlyUnreserved) {
  EXPECT_EQ(PercentEncode("AZaz09-._~"), "AZaz09-._~");
  EXPECT_EQ(PercentEncode("models/llama 7b/model-00001.safetensors"),
            "models%2Fllama%207b%2Fmodel-00001.safetensors");
}

TEST(PercentEncodeTest, EncodesReservedAndPercent) {
  EXPECT_EQ(PercentEncode("a#b?c%d+e&f=g"), "a%23b%3Fc%25d%2Be%26f%3Dg");
  EXPECT_EQ(PercentEncode("[]@!$'()*,;:"), "%5B%5D%40%21%24%27%28%29%2A%2C%3B%3A");
}

TEST(PercentEncodeTest, EncodesUtf8ByteByByteInUpperCaseHex) {
  EXPECT_EQ(PercentEncode("\xC3\xA9"), "%C3%A9");                // é
  EXPECT_EQ(PercentEncode("\xE6\xA8\xA1\xE5\x9E\x8B"), "%E6%A8%A1%E5%9E%8B");  // 模型
  EXPECT_EQ(PercentEncode(std::string("\x00\x7F\xFF", 3)), "%00%7F%FF");
}

TEST(Base64Test, RoundTripsAndMatchesRfc4648Vectors) {
  EXPECT_EQ(Base64Encode(""), "");
  EXPECT_EQ(Base64Encode("f"), "Zg==");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("foobar"), "Zm9vYmFy");
  EXPECT_EQ(Base64Decode("Zm9vYg==").value(), "foob");
  EXPECT_EQ(Base64Decode("Zm9vYg").value(), "foob");
  EXPECT_FALSE(Base64Decode("Zm9v!").has_value());
  EXPECT_FALSE(Base64Decode("Z").has_value());
}

TEST(Base64Test, UrlVariantHasNoPaddingAndUrlAlphabet) {
  EXPECT_EQ(Base64UrlEncode("\xFB\xFF"), "-_8");
  EXPECT_EQ(Base64Encode("\xFB\xFF"), "+/8=");
  EXPECT_EQ(Base64UrlEncode("f"), "Zg");
}

TEST(Rfc3339Test, ParsesUtcWithFraction) {
  EXPECT_EQ(ParseRfc3339Nanos("1970-01-01T00:00:00Z").value(), 0);
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T12:34:56.789Z").value(), 1714566896789000000);
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T12:34:56.123456789Z").value(), 1714566896123456789);
  EXPECT_EQ(ParseRfc3339Nanos("2000-02-29T00:00:00.5Z").value(), 951782400500000000);
}

TEST(Rfc3339Test, AppliesOffsets) {
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T14:34:56+02:00").value(),
            ParseRfc3339Nanos("2024-05-01T12:34:56Z").value());
  EXPECT_EQ(ParseRfc3339Nanos("2024-05-01T07:04:56-05:30").value(),
            ParseRfc3339Nanos("2024-05-01T12:34:56Z").value());
}

TEST(Rfc3339Test, RejectsMalformed) {
  for (const char* bad : {"", "2024-05-01", "2024-05-01T12:34:56", "2024-13-01T00:00:00Z",
                          "2024-05-01T12:34:56.Z", "2024-05-01T12:34:56Zjunk", "yesterday"}) {
    EXPECT_FALSE(ParseRfc3339Nanos(bad).ok()) << bad;
  }
}

TEST(HttpDateTest, ParsesImfFixdate) {
  // 1994-11-06T08:49:37Z, RFC 9110's example.
  EXPECT_EQ(ParseHttpDateNanos("Sun, 06 Nov 1994 08:49:37 GMT").value(), int64_t{784111777} * 1'000'000'000);
  EXPECT_EQ(ParseHttpDateNanos("Wed, 12 Oct 2009 17:50:00 GMT").value(),
            ParseRfc3339Nanos("2009-10-12T17:50:00Z").value());
}

TEST(HttpDateTest, RejectsOtherForms) {
  for (const char* bad : {"", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
                          "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Foo 1994 08:49:37 GMT",
                          "Sun, 32 Nov 1994 08:49:37 GMT", "Sun, 06 Nov 1994 24:49:37 GMT"}) {
    EXPECT_FALSE(ParseHttpDateNanos(bad).ok()) << bad;
  }
}

TEST(Crc32cTest, DecodesBigEndianBase64) {
  // crc32c("hello world") = 0xC99465AA, which GCS reports as "yZRlqg==".
  EXPECT_EQ(DecodeCrc32c("yZRlqg==").value(), 0xC99465AAu);
  EXPECT_EQ(DecodeCrc32c("AAAAAQ==").value(), 1u);
  EXPECT_FALSE(DecodeCrc32c("AAAA").has_value());  // 3 bytes
  EXPECT_FALSE(DecodeCrc32c("!!!!").has_value());
}

}  // namespace
}  // namespace tensorfs
