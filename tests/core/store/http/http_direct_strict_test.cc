// The direct body reads of the libcurl client against responses that are not
// what they should be: a malformed response fails as kMalformed naming what was
// wrong and its connection is not reused; bytes after a response close the
// connection; a request's total timeout stops a server that keeps it alive
// with a trickle of bytes (measured on the client's injected clock).
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/store/http/http.h"
#include "tests/core/store/http/fakes.h"
#include "tests/core/store/http/scripted_server.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::tensorfs::testing::ManualClock;
using ::tensorfs::testing::ScriptedServer;

std::string Reply206(std::string_view body, std::string_view extra = "") {
  return "HTTP/1.1 206 Partial Content\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         std::string(extra) + "\r\n" + std::string(body);
}

class HttpDirectStrictTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeClient(nullptr); }

  void MakeClient(Clock* clock) {
    CurlHttpOptions options;
    options.stall_timeout = std::chrono::seconds(60);
    options.clock = clock;
    auto client = MakeCurlHttpClient(options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
  }

  HttpResponse Get(const ScriptedServer& server, size_t sink_size,
                   std::chrono::milliseconds total_timeout = std::chrono::milliseconds(0)) {
    sink_.assign(sink_size, std::byte{0});
    HttpRequest request;
    request.url = server.base() + "/o";
    request.headers = {"Range: bytes=0-" + std::to_string(sink_size - 1)};
    request.sink = std::span<std::byte>(sink_);
    request.total_timeout = total_timeout;
    return client_->Perform(request);
  }

  std::string Sink(size_t n) const { return std::string(reinterpret_cast<const char*>(sink_.data()), n); }

  std::unique_ptr<HttpClient> client_;
  std::vector<std::byte> sink_;
};

TEST_F(HttpDirectStrictTest, MalformedResponseFailsNamingWhatWasWrongAndItsConnectionIsClosed) {
  ScriptedServer server({{"HTTP/1.1 206 Partial Content\r\nContent-Length: -1\r\n\r\n0123456789"},
                         {Reply206("abcdefghij")}});
  HttpResponse r = Get(server, 10);
  EXPECT_EQ(r.error, TransportError::kMalformed) << r.Summary();
  EXPECT_EQ(r.Summary(), "malformed response (Content-Length '-1' is not a decimal number of bytes below 2^63)");
  EXPECT_EQ(r.sink_bytes, 0u);

  HttpResponse next = Get(server, 10);
  ASSERT_TRUE(next.transport_ok()) << next.Summary();
  EXPECT_EQ(Sink(10), "abcdefghij");
  EXPECT_EQ(server.connections(), 2);
}

TEST_F(HttpDirectStrictTest, TransferEncodingWithContentLengthIsMalformedAndNotReused) {
  ScriptedServer server(
      {{"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\nTransfer-Encoding: chunked\r\n\r\n"
        "a\r\n0123456789\r\n0\r\n\r\n"},
       {Reply206("abcdefghij")}});
  HttpResponse r = Get(server, 10);
  EXPECT_EQ(r.error, TransportError::kMalformed) << r.Summary();
  EXPECT_THAT(r.error_message, HasSubstr("both Transfer-Encoding and Content-Length"));
  ASSERT_TRUE(Get(server, 10).transport_ok());
  EXPECT_EQ(server.connections(), 2);
}

TEST_F(HttpDirectStrictTest, BadChunkSizeIsMalformed) {
  ScriptedServer server({{"HTTP/1.1 206 Partial Content\r\nTransfer-Encoding: chunked\r\n\r\n"
                          "0x5\r\n01234\r\n0\r\n\r\n"}});
  HttpResponse r = Get(server, 10);
  EXPECT_EQ(r.error, TransportError::kMalformed) << r.Summary();
  EXPECT_THAT(r.error_message, HasSubstr("bad chunk extension in '0x5'"));
}

TEST_F(HttpDirectStrictTest, ACompleteExtraResponseAfterTheBodyClosesTheConnection) {
  // The stray response must neither answer the next request nor leave its
  // connection in the pool.
  ScriptedServer server({{Reply206("0123456789") + Reply206("WRONGBYTES")}, {Reply206("abcdefghij")}});
  HttpResponse first = Get(server, 10);
  ASSERT_TRUE(first.transport_ok()) << first.Summary();
  EXPECT_EQ(Sink(10), "0123456789");
  HttpResponse second = Get(server, 10);
  ASSERT_TRUE(second.transport_ok()) << second.Summary();
  EXPECT_EQ(Sink(10), "abcdefghij");
  EXPECT_EQ(server.connections(), 2);
}

TEST_F(HttpDirectStrictTest, TooManyInterimResponsesAreMalformed) {
  std::string interim;
  for (int i = 0; i < 2000; ++i) interim += "HTTP/1.1 100 Continue\r\n\r\n";
  ScriptedServer server({{interim + Reply206("0123456789")}});
  HttpResponse r = Get(server, 10);
  EXPECT_EQ(r.error, TransportError::kMalformed) << r.Summary();
  EXPECT_THAT(r.error_message, HasSubstr("more than 8 interim (1xx) responses"));
}

TEST_F(HttpDirectStrictTest, TotalTimeoutStopsAResponseThatIsNotSilent) {
  // The server sends the head and 2 of 10 bytes and keeps the connection open.
  // The stall timeout (60 s on the same clock) is not reached; the request's
  // total timeout (10 s) is, once the clock passes it.
  ManualClock clock;
  MakeClient(&clock);
  ScriptedServer server({{"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n01"}});
  HttpResponse r;
  std::thread reader([&] { r = Get(server, 10, std::chrono::seconds(10)); });
  // The request's deadline is set before it is sent: once the server has it,
  // moving the clock past 10 s ends it.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (server.requests().empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  clock.Advance(std::chrono::seconds(11));
  reader.join();
  EXPECT_EQ(r.error, TransportError::kTimeout) << r.Summary();
  EXPECT_THAT(r.error_message, HasSubstr("the request's total timeout passed after"));
}

}  // namespace
}  // namespace tensorfs
