// The direct body reads over https, where bytes can wait inside the TLS layer
// where poll(2) does not see them: a server that sends its body and a stray
// response in one TLS record leaves the stray bytes decrypted-to-be in the
// client's TLS buffer once the body is read, and the pooled connection must
// be found unusable (not answer the next request with those bytes).
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/store/http/http.h"
#include "tests/core/store/http/scripted_server.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

// Serves TLS on 127.0.0.1 with a self-signed certificate for that address.
// Each request gets the next scripted reply, sent as the given TLS records.
class TlsScriptedServer {
 public:
  TlsScriptedServer(const std::string& cert, const std::string& key, std::vector<std::vector<std::string>> replies)
      : ctx_(ServerContext(cert, key)), replies_(std::move(replies)) {}

  std::string base() const { return "https://127.0.0.1:" + std::to_string(acceptor_.port()); }
  int connections() const { return acceptor_.connections(); }

 private:
  struct CtxFree {
    void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
  };

  static SSL_CTX* ServerContext(const std::string& cert, const std::string& key) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    EXPECT_EQ(SSL_CTX_use_certificate_file(ctx, cert.c_str(), SSL_FILETYPE_PEM), 1);
    EXPECT_EQ(SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM), 1);
    return ctx;
  }

  void Serve(int fd) {
    SSL* ssl = SSL_new(ctx_.get());
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
      std::string in;
      char buf[4096];
      for (;;) {
        size_t end;
        bool open = true;
        while ((end = in.find("\r\n\r\n")) == std::string::npos) {
          const int n = SSL_read(ssl, buf, sizeof buf);
          if (n <= 0) {
            open = false;
            break;
          }
          in.append(buf, static_cast<size_t>(n));
        }
        if (!open) break;
        in.erase(0, end + 4);
        std::vector<std::string> records;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (next_ < replies_.size()) records = replies_[next_++];
        }
        for (const std::string& record : records) {  // one SSL_write, one record
          if (SSL_write(ssl, record.data(), static_cast<int>(record.size())) <= 0) break;
        }
      }
    }
    SSL_free(ssl);
  }

  std::unique_ptr<SSL_CTX, CtxFree> ctx_;
  std::vector<std::vector<std::string>> replies_;
  std::mutex mu_;
  size_t next_ = 0;
  testing::LoopbackAcceptor acceptor_{[this](int fd) { Serve(fd); }};
};

std::string Reply206(std::string_view body) {
  return "HTTP/1.1 206 Partial Content\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" +
         std::string(body);
}

TEST(HttpDirectTlsTest, StrayBytesHeldInTheTlsLayerKeepTheConnectionOutOfUse) {
  testing::TempDir dir;
  const std::string cert = dir.path() + "/cert.pem";
  const std::string key = dir.path() + "/key.pem";
  const testing::CommandResult made = testing::RunCommand(
      "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj /CN=127.0.0.1 "
      "-addext subjectAltName=IP:127.0.0.1 -keyout " + key + " -out " + cert + " 2>&1");
  ASSERT_EQ(made.exit_code, 0) << made.output;

  // The first reply: its head in one record, then its body and a complete
  // stray response in the next. The client reads the body (10 bytes) out of
  // that record; the stray response stays in its TLS buffer.
  const std::string stray = Reply206("WRONGBYTES");
  TlsScriptedServer server(cert, key,
                           {{"HTTP/1.1 206 Partial Content\r\nContent-Length: 10\r\n\r\n", "0123456789" + stray},
                            {Reply206("abcdefghij")}});
  CurlHttpOptions options;
  options.ca_file = cert;
  options.stall_timeout = std::chrono::seconds(60);
  auto client = MakeCurlHttpClient(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  std::vector<std::byte> sink(10);
  HttpRequest request;
  request.url = server.base() + "/o";
  request.headers = {"Range: bytes=0-9"};
  request.sink = std::span<std::byte>(sink);
  HttpResponse first = (*client)->Perform(request);
  ASSERT_TRUE(first.transport_ok()) << first.Summary();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sink.data()), 10), "0123456789");

  HttpResponse second = (*client)->Perform(request);
  ASSERT_TRUE(second.transport_ok()) << second.Summary();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(sink.data()), 10), "abcdefghij");
  EXPECT_EQ(server.connections(), 2);
}

}  // namespace
}  // namespace tensorfs
