// The libcurl client's direct body reads (a GET with a sink goes on a
// connection whose response tensorfs parses itself, the body received straight
// into the sink), against a TCP server that answers with scripted bytes: the
// request it sends, connection reuse, a keep-alive connection that died while
// idle, chunked and length-less bodies, interim responses, truncation and
// overflow.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/store/http/http.h"
#include "tests/core/store/http/scripted_server.h"

namespace tensorfs {
namespace {

using ::tensorfs::testing::ScriptedServer;

std::string Reply206(std::string_view body, std::string_view extra = "") {
  return "HTTP/1.1 206 Partial Content\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         std::string(extra) + "\r\n" + std::string(body);
}

class HttpDirectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    CurlHttpOptions options;
    options.stall_timeout = std::chrono::seconds(5);
    auto client = MakeCurlHttpClient(options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
  }

  // A GET of `path` into a sink of `sink_size` bytes.
  HttpResponse Get(const ScriptedServer& server, const std::string& path, size_t sink_size) {
    sink_.assign(sink_size, std::byte{0});
    HttpRequest request;
    request.url = server.base() + path;
    request.headers = {"Range: bytes=0-" + std::to_string(sink_size - 1), "X-Test: 1"};
    request.sink = std::span<std::byte>(sink_);
    return client_->Perform(request);
  }

  std::string Sink(size_t n) const { return std::string(reinterpret_cast<const char*>(sink_.data()), n); }

  std::unique_ptr<HttpClient> client_;
  std::vector<std::byte> sink_;
};

TEST_F(HttpDirectTest, BodiesLandInTheSinkAndOneConnectionServesEveryRequest) {
  ScriptedServer server({{Reply206("0123456789", "X-Goog-Generation: 7\r\n")}, {Reply206("abcdefghij")}});
  HttpResponse first = Get(server, "/storage/v1/b/b/o/x?alt=media", 10);
  ASSERT_TRUE(first.transport_ok()) << first.Summary();
  EXPECT_EQ(first.status, 206);
  EXPECT_EQ(first.sink_bytes, 10u);
  EXPECT_EQ(Sink(10), "0123456789");
  EXPECT_EQ(first.Header("x-goog-generation"), "7");
  EXPECT_TRUE(first.body.empty());

  HttpResponse second = Get(server, "/second", 10);
  ASSERT_TRUE(second.transport_ok()) << second.Summary();
  EXPECT_EQ(Sink(10), "abcdefghij");
  EXPECT_EQ(server.connections(), 1);

  const std::vector<std::string> requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_TRUE(requests[0].starts_with("GET /storage/v1/b/b/o/x?alt=media HTTP/1.1\r\n")) << requests[0];
  EXPECT_NE(requests[0].find("\r\nHost: 127.0.0.1:"), std::string::npos) << requests[0];
  EXPECT_NE(requests[0].find("\r\nRange: bytes=0-9\r\n"), std::string::npos) << requests[0];
  EXPECT_NE(requests[0].find("\r\nX-Test: 1\r\n"), std::string::npos) << requests[0];
}

TEST_F(HttpDirectTest, AKeepAliveConnectionTheServerDroppedIsReplacedAndTheRequestSentAgain) {
  // The second request reaches the old connection, which the server then
  // closes without answering (it had timed the connection out): the request
  // goes again on a new connection.
  ScriptedServer server({{Reply206("0123456789")}, {"", true}, {Reply206("abcdefghij")}});
  ASSERT_TRUE(Get(server, "/a", 10).transport_ok());
  HttpResponse second = Get(server, "/b", 10);
  ASSERT_TRUE(second.transport_ok()) << second.Summary();
  EXPECT_EQ(Sink(10), "abcdefghij");
  EXPECT_EQ(server.connections(), 2);
  EXPECT_EQ(server.requests().size(), 3u);
}

TEST_F(HttpDirectTest, AConnectionClosedByTheServerIsNotReused) {
  ScriptedServer server({{Reply206("0123456789", "Connection: close\r\n"), true}, {Reply206("abcdefghij")}});
  ASSERT_TRUE(Get(server, "/a", 10).transport_ok());
  HttpResponse second = Get(server, "/b", 10);
  ASSERT_TRUE(second.transport_ok()) << second.Summary();
  EXPECT_EQ(Sink(10), "abcdefghij");
  EXPECT_EQ(server.connections(), 2);
  EXPECT_EQ(server.requests().size(), 2u);  // no request was sent on the closed one
}

TEST_F(HttpDirectTest, ChunkedErrorBodyIsDecodedIntoTheResponseAndTheSinkIsUntouched) {
  ScriptedServer server({{"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-Trailer: t\r\n\r\n"},
                         {Reply206("0123456789")}});
  HttpResponse r = Get(server, "/a", 10);
  ASSERT_TRUE(r.transport_ok()) << r.Summary();
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.body, "hello world");
  EXPECT_EQ(r.sink_bytes, 0u);
  // The connection stays usable after a chunked body.
  ASSERT_TRUE(Get(server, "/b", 10).transport_ok());
  EXPECT_EQ(server.connections(), 1);
}

TEST_F(HttpDirectTest, ChunkedBodyOfASuccessGoesToTheSink) {
  ScriptedServer server({{"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "4\r\n0123\r\n6\r\n456789\r\n0\r\n\r\n"}});
  HttpResponse r = Get(server, "/a", 10);
  ASSERT_TRUE(r.transport_ok()) << r.Summary();
  EXPECT_EQ(r.sink_bytes, 10u);
  EXPECT_EQ(Sink(10), "0123456789");
}

TEST_F(HttpDirectTest, InterimResponsesAreSkipped) {
  ScriptedServer server({{"HTTP/1.1 100 Continue\r\n\r\n" + Reply206("0123456789")}});
  HttpResponse r = Get(server, "/a", 10);
  ASSERT_TRUE(r.transport_ok()) << r.Summary();
  EXPECT_EQ(r.status, 206);
  EXPECT_EQ(Sink(10), "0123456789");
}

TEST_F(HttpDirectTest, BodyWithoutALengthEndsWhenTheServerCloses) {
  ScriptedServer server({{"HTTP/1.0 200 OK\r\n\r\n0123456789", true}, {Reply206("abcdefghij")}});
  HttpResponse r = Get(server, "/a", 10);
  ASSERT_TRUE(r.transport_ok()) << r.Summary();
  EXPECT_EQ(r.sink_bytes, 10u);
  EXPECT_EQ(Sink(10), "0123456789");
  ASSERT_TRUE(Get(server, "/b", 10).transport_ok());
  EXPECT_EQ(server.connections(), 2);
}

TEST_F(HttpDirectTest, ConnectionClosedInsideTheBodyIsTruncated) {
  ScriptedServer server({{"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n0123", true}});
  HttpResponse r = Get(server, "/a", 10);
  EXPECT_EQ(r.error, TransportError::kTruncated) << r.Summary();
  EXPECT_EQ(r.sink_bytes, 4u);
  EXPECT_EQ(Sink(4), "0123");
  EXPECT_NE(r.error_message.find("6 of 10 body bytes"), std::string::npos) << r.error_message;
}

TEST_F(HttpDirectTest, BodyLongerThanTheSinkOverflowsAfterFillingIt) {
  ScriptedServer server({{Reply206("0123456789abcdef")}});
  HttpResponse r = Get(server, "/a", 10);
  EXPECT_EQ(r.error, TransportError::kSinkOverflow) << r.Summary();
  EXPECT_EQ(r.sink_bytes, 10u);
  EXPECT_EQ(Sink(10), "0123456789");
}

TEST_F(HttpDirectTest, ServerThatClosesWithoutAnsweringIsAConnectionLoss) {
  ScriptedServer server({{"", true}});
  HttpResponse r = Get(server, "/a", 10);
  EXPECT_EQ(r.error, TransportError::kConnectionLost) << r.Summary();
  EXPECT_EQ(server.requests().size(), 1u);  // a new connection is not retried here: the retry policy decides
}

TEST_F(HttpDirectTest, SilentServerIsDroppedAsStalled) {
  CurlHttpOptions options;
  options.stall_timeout = std::chrono::seconds(1);
  auto client = MakeCurlHttpClient(options);
  ASSERT_TRUE(client.ok());
  client_ = std::move(*client);
  ScriptedServer server({{"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n01"}});
  HttpResponse r = Get(server, "/a", 10);
  EXPECT_EQ(r.error, TransportError::kStalled) << r.Summary();
  EXPECT_EQ(r.sink_bytes, 2u);
  EXPECT_NE(r.error_message.find("after 2 body bytes"), std::string::npos) << r.error_message;
}

}  // namespace
}  // namespace tensorfs
