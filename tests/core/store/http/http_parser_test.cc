// HttpResponseParser over bytes alone: what it accepts (and how it frames the
// body), and each malformed response it refuses, with the message naming what
// was wrong. Also: such a response is a retryable error for the retry policy.
#include "core/store/http/http_parser.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/store/http/retry.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;

ParsedHttpResponse Parse(std::string_view bytes, bool closed = false) { return ParseHttpResponse(bytes, closed); }

std::string WithLength(std::string_view length_field, std::string_view body = "0123456789") {
  return "HTTP/1.1 206 Partial Content\r\n" + std::string(length_field) + "\r\n\r\n" + std::string(body);
}

// Expects `bytes` refused with a message containing `what`.
void ExpectRefused(std::string_view bytes, std::string_view what) {
  const ParsedHttpResponse r = Parse(bytes, /*closed=*/true);
  EXPECT_FALSE(r.complete) << bytes;
  EXPECT_THAT(r.error, HasSubstr(std::string(what))) << bytes;
}

// ------------------------------------------------------------------ accepted

TEST(HttpParserTest, ContentLengthBodyWithFieldsKeyedByLowerCaseName) {
  const ParsedHttpResponse r = Parse(WithLength("Content-Length: 10\r\nX-Goog-Generation:  7 "));
  ASSERT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.status, 206);
  EXPECT_EQ(r.body, "0123456789");
  EXPECT_EQ(r.headers.at("x-goog-generation"), "7");
  EXPECT_EQ(r.headers.at("content-length"), "10");
  EXPECT_TRUE(r.keep_alive);
}

TEST(HttpParserTest, ChunkedBodyWithExtensionsAndTrailers) {
  const ParsedHttpResponse r = Parse(
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n"
      "4;a\r\n0123\r\n3 ; b = c\r\n456\r\n3;q=\"x\\\"y;z\"\r\n789\r\n0\r\nX-Checksum: 1\r\n\r\n");
  ASSERT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.body, "0123456789");
  EXPECT_TRUE(r.keep_alive);
  EXPECT_EQ(r.headers.count("x-checksum"), 0u);  // trailers are read and dropped
}

TEST(HttpParserTest, RepeatedFieldsAreJoinedNotReplaced) {
  const ParsedHttpResponse r = Parse(WithLength("Content-Length: 10\r\nx-goog-generation: 7\r\nx-goog-generation: 8"));
  ASSERT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.headers.at("x-goog-generation"), "7, 8");
}

TEST(HttpParserTest, EmptyReasonPhraseIsAccepted) {
  EXPECT_TRUE(Parse("HTTP/1.1 204 \r\n\r\n").complete);
}

TEST(HttpParserTest, NoBodyAfter204And304) {
  EXPECT_TRUE(Parse("HTTP/1.1 204 No Content\r\n\r\n").complete);
  const ParsedHttpResponse r = Parse("HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\n");
  EXPECT_TRUE(r.complete) << r.error;
  EXPECT_TRUE(r.body.empty());
}

TEST(HttpParserTest, BodyWithoutFramingRunsToTheCloseAndEndsTheConnection) {
  EXPECT_FALSE(Parse("HTTP/1.1 200 OK\r\n\r\n0123").complete);
  const ParsedHttpResponse r = Parse("HTTP/1.1 200 OK\r\n\r\n0123", /*closed=*/true);
  ASSERT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.body, "0123");
  EXPECT_FALSE(r.keep_alive);
}

TEST(HttpParserTest, ConnectionFieldDecidesReuse) {
  EXPECT_FALSE(Parse(WithLength("Content-Length: 10\r\nConnection: Keep-Alive, close")).keep_alive);
  EXPECT_FALSE(Parse("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nab").keep_alive);
  EXPECT_TRUE(Parse("HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nab").keep_alive);
}

TEST(HttpParserTest, FewInterimResponsesAreSkipped) {
  const ParsedHttpResponse r =
      Parse("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" +
            WithLength("Content-Length: 10"));
  ASSERT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.interim, 2);
  EXPECT_EQ(r.status, 206);
  EXPECT_EQ(r.headers.count("link"), 0u);  // the interim response's fields are not the final one's
}

TEST(HttpParserTest, FedOneByteAtATimeItFramesAsInOneGo) {
  const std::string bytes =
      "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "4;a=b\r\n0123\r\n6\r\n456789\r\n0\r\nT: 1\r\n\r\n";
  HttpResponseParser parser;
  std::string buffer;
  std::string body;
  for (char c : bytes) {
    buffer += c;
    buffer.erase(0, parser.Consume(buffer));
    while (parser.body_wanted() > 0 && !buffer.empty()) {
      const size_t take = std::min<size_t>(parser.body_wanted(), buffer.size());
      body += buffer.substr(0, take);
      buffer.erase(0, take);
      parser.BodyTaken(take);
      buffer.erase(0, parser.Consume(buffer));
    }
    ASSERT_FALSE(parser.failed()) << parser.error();
  }
  EXPECT_TRUE(parser.done());
  EXPECT_TRUE(buffer.empty());
  EXPECT_EQ(body, "0123456789");
}

// ------------------------------------------------------------------ refused

TEST(HttpParserTest, NegativeContentLengthIsRefused) {
  ExpectRefused(WithLength("Content-Length: -1"), "Content-Length '-1' is not a decimal number");
}

TEST(HttpParserTest, ContentLengthWithSignHexOrSpacesIsRefused) {
  ExpectRefused(WithLength("Content-Length: +10"), "Content-Length '+10'");
  ExpectRefused(WithLength("Content-Length: 0xa"), "Content-Length '0xa'");
  ExpectRefused(WithLength("Content-Length: 1 0"), "Content-Length '1 0'");
  ExpectRefused(WithLength("Content-Length: 10, 10"), "Content-Length '10, 10'");
  ExpectRefused(WithLength("Content-Length: ten"), "Content-Length 'ten'");
  ExpectRefused(WithLength("Content-Length:"), "Content-Length ''");
}

TEST(HttpParserTest, ContentLengthThatOverflowsIsRefused) {
  ExpectRefused(WithLength("Content-Length: 18446744073709551616"), "Content-Length '18446744073709551616'");
  ExpectRefused(WithLength("Content-Length: 9223372036854775808"), "below 2^63");
}

TEST(HttpParserTest, TwoContentLengthsAreRefusedEqualOrNot) {
  ExpectRefused(WithLength("Content-Length: 10\r\nContent-Length: 4"), "more than one Content-Length");
  ExpectRefused(WithLength("Content-Length: 10\r\ncontent-length: 10"), "more than one Content-Length");
}

TEST(HttpParserTest, StatusCodeOtherThanThreeDigitsIsRefused) {
  ExpectRefused("HTTP/1.1 2000 OK\r\n\r\n", "status line 'HTTP/1.1 2000 OK' is not 'HTTP/1.x SP 3DIGIT SP reason'");
  ExpectRefused("HTTP/1.1 20 OK\r\n\r\n", "is not 'HTTP/1.x SP 3DIGIT SP reason'");
  ExpectRefused("HTTP/1.1 2x0 OK\r\n\r\n", "is not 'HTTP/1.x SP 3DIGIT SP reason'");
  ExpectRefused("HTTP/1.1 099 Odd\r\n\r\n", "status code 99 outside 100-599");
  ExpectRefused("HTTP/1.1 600 Odd\r\n\r\n", "status code 600 outside 100-599");
}

TEST(HttpParserTest, StatusLineOfAnotherShapeIsRefused) {
  ExpectRefused("HTTP/1.1 200\r\n\r\n", "is not 'HTTP/1.x SP 3DIGIT SP reason'");  // SP before the reason
  ExpectRefused("HTTP/1.1 200OK\r\n\r\n", "is not 'HTTP/1.x SP 3DIGIT SP reason'");
  ExpectRefused("HTTP/2.0 200 OK\r\n\r\n", "is not 'HTTP/1.x SP 3DIGIT SP reason'");
  ExpectRefused("HTTP/1.1  200 OK\r\n\r\n", "is not 'HTTP/1.x SP 3DIGIT SP reason'");
  ExpectRefused("http/1.1 200 OK\r\n\r\n", "is not 'HTTP/1.x SP 3DIGIT SP reason'");
  ExpectRefused("HTTP/1.1 200 O\x01K\r\n\r\n", "a control character in the status line");
}

TEST(HttpParserTest, RandomBytesAreRefusedNamingThem) {
  ExpectRefused(std::string("\x16\x03\x01\x02\x00\x01\r\n", 8), "status line '\\x16\\x03\\x01\\x02\\x00\\x01'");
}

TEST(HttpParserTest, ChunkSizeOtherThanHexDigitsIsRefused) {
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  ExpectRefused(head + "-1\r\nx\r\n0\r\n\r\n", "chunk size line '-1' does not start with a hex number");
  ExpectRefused(head + "+1\r\nx\r\n0\r\n\r\n", "chunk size line '+1'");
  ExpectRefused(head + " 1\r\nx\r\n0\r\n\r\n", "chunk size line ' 1'");
  ExpectRefused(head + "\r\n", "chunk size line ''");
  ExpectRefused(head + "0x1\r\nx\r\n0\r\n\r\n", "bad chunk extension in '0x1'");
  ExpectRefused(head + "1g\r\nx\r\n0\r\n\r\n", "bad chunk extension in '1g'");
}

TEST(HttpParserTest, ChunkSizeThatOverflowsIsRefused) {
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  ExpectRefused(head + "10000000000000001\r\nx\r\n", "does not fit in 63 bits");
  ExpectRefused(head + "8000000000000000\r\nx\r\n", "does not fit in 63 bits");
  // The largest that fits is framed (and then cut short).
  EXPECT_THAT(Parse(head + "7fffffffffffffff\r\nx", true).error, HasSubstr("closed inside a chunked body"));
}

TEST(HttpParserTest, MalformedChunkExtensionIsRefused) {
  const std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const char* line : {"1;", "1;=v", "1 x", "1;a=", "1;a=\"open", "1;a b", "1 ", "1;a ", "1;a=\"x\"y"}) {
    ExpectRefused(head + line + "\r\nx\r\n0\r\n\r\n", "bad chunk extension");
  }
}

TEST(HttpParserTest, ChunkDataNotFollowedByCrlfIsRefused) {
  ExpectRefused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n",
                "chunk data not followed by CRLF");
}

TEST(HttpParserTest, TransferEncodingWithContentLengthIsRefused) {
  ExpectRefused("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nabcde\r\n0\r\n\r\n",
                "both Transfer-Encoding and Content-Length");
}

TEST(HttpParserTest, TransferEncodingOtherThanChunkedAloneIsRefused) {
  for (const char* coding : {"xchunked", "gzip, chunked", "chunked, gzip", "identity", "chunked;q=1"}) {
    ExpectRefused("HTTP/1.1 200 OK\r\nTransfer-Encoding: " + std::string(coding) + "\r\n\r\n0\r\n\r\n",
                  "only 'chunked' alone is accepted");
  }
  ExpectRefused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                "more than one Transfer-Encoding");
}

TEST(HttpParserTest, TransferEncodingInAnHttp10ResponseIsRefused) {
  ExpectRefused("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                "Transfer-Encoding in an HTTP/1.0 response");
}

TEST(HttpParserTest, ObsFoldIsRefused) {
  ExpectRefused(WithLength("Content-Length: 10\r\nX-Long: a\r\n  b"), "obs-fold");
  ExpectRefused(WithLength("Content-Length: 10\r\nX-Long: a\r\n\tb"), "obs-fold");
}

TEST(HttpParserTest, MalformedFieldLinesAreRefused) {
  ExpectRefused(WithLength("Content-Length : 10"), "whitespace between the field name 'Content-Length' and its colon");
  ExpectRefused(WithLength("Content-Length: 10\r\nNo colon here"), "a field line without a colon");
  ExpectRefused(WithLength("Content-Length: 10\r\n: empty name"), "field name '' is not a token");
  ExpectRefused(WithLength("Content-Length: 10\r\nX(y): z"), "field name 'X(y)' is not a token");
  ExpectRefused(WithLength(std::string("Content-Length: 10\r\nX: a\0b", 26)), "a control character in the value");
}

TEST(HttpParserTest, LinesNotEndedByCrlfAreRefused) {
  ExpectRefused("HTTP/1.1 200 OK\nContent-Length: 0\n\n", "a line ended by a bare LF");
  ExpectRefused("HTTP/1.1 200 OK\r\nX: a\rb\r\nContent-Length: 0\r\n\r\n", "a bare CR inside the line");
}

TEST(HttpParserTest, HeaderLineOverTheLimitIsRefusedBeforeItEnds) {
  // A 1 MiB field line is refused once 8 KiB of it have come, without waiting for its end.
  HttpResponseParser parser;
  const std::string start = "HTTP/1.1 200 OK\r\nX-Big: " + std::string(9 << 10, 'a');
  parser.Consume(start);
  ASSERT_TRUE(parser.failed());
  EXPECT_EQ(parser.error(), "a status or field line longer than 8192 bytes");
  ExpectRefused(WithLength("Content-Length: 10\r\nX-Big: " + std::string(1 << 20, 'a')), "longer than 8192 bytes");
}

TEST(HttpParserTest, HeadOverTheLimitIsRefused) {
  std::string fields = "Content-Length: 10";
  for (int i = 0; i < 800; ++i) fields += "\r\nX-Field-" + std::to_string(i) + ": " + std::string(80, 'v');
  ExpectRefused(WithLength(fields), "a response head longer than 65536 bytes");
}

TEST(HttpParserTest, InterimResponsesAreBounded) {
  std::string eight;
  for (int i = 0; i < 8; ++i) eight += "HTTP/1.1 100 Continue\r\n\r\n";
  EXPECT_TRUE(Parse(eight + WithLength("Content-Length: 10")).complete);
  ExpectRefused(eight + "HTTP/1.1 102 Processing\r\n\r\n" + WithLength("Content-Length: 10"),
                "more than 8 interim (1xx) responses");
  std::string many;
  for (int i = 0; i < 2000; ++i) many += "HTTP/1.1 100 Continue\r\n\r\n";
  ExpectRefused(many + WithLength("Content-Length: 10"), "more than 8 interim (1xx) responses");
}

TEST(HttpParserTest, SwitchingProtocolsIsRefused) {
  ExpectRefused("HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n" + WithLength("Content-Length: 10"),
                "101 Switching Protocols, which was not asked for");
}

TEST(HttpParserTest, TrailersOverTheLimitAreRefused) {
  std::string trailers;
  for (int i = 0; i < 100; ++i) trailers += "X-T" + std::to_string(i) + ": " + std::string(90, 't') + "\r\n";
  ExpectRefused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n" + trailers + "\r\n",
                "trailers longer than 8192 bytes");
  ExpectRefused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n X: folded\r\n\r\n", "obs-fold");
}

TEST(HttpParserTest, BytesLeftAfterTheResponseForbidReuse) {
  const std::string first = WithLength("Content-Length: 10");
  const ParsedHttpResponse r = Parse(first + WithLength("Content-Length: 10", "abcdefghij"));
  ASSERT_TRUE(r.complete) << r.error;
  EXPECT_EQ(r.body, "0123456789");
  EXPECT_EQ(r.consumed, first.size());
  EXPECT_FALSE(r.keep_alive);
}

TEST(HttpParserTest, CloseInsideTheBodyIsCutShort) {
  ExpectRefused(WithLength("Content-Length: 10", "0123"), "the connection closed with 6 of 10 body bytes outstanding");
  ExpectRefused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", "closed inside a chunked body");
  ExpectRefused("HTTP/1.1 200 OK\r\nContent-Le", "closed inside the response head");
}

TEST(HttpParserTest, MalformedResponseIsARetryableTransportError) {
  HttpResponse r;
  r.error = TransportError::kMalformed;
  r.error_message = "Content-Length '-1' is not a decimal number of bytes below 2^63";
  const std::optional<AttemptResult> result = ClassifyTransportFailure(r, "read of bytes 0-9 of gs://b/o", "gs://b/o");
  ASSERT_TRUE(result.has_value());
  EXPECT_TRUE(result->retryable);
  EXPECT_EQ(result->status.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(result->status.message(),
            "malformed response (Content-Length '-1' is not a decimal number of bytes below 2^63)");
}

}  // namespace
}  // namespace tensorfs
