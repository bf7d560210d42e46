// ScriptedServer: a TCP server on 127.0.0.1 that answers each HTTP request with
// scripted bytes, for tests of the HTTP client's direct body reads (what it
// sends, what it makes of malformed or odd responses, connection reuse).
//
// Thread-safety: the accessors may be called from any thread while it serves.
#ifndef TENSORFS_TESTS_CORE_STORE_HTTP_SCRIPTED_SERVER_H_
#define TENSORFS_TESTS_CORE_STORE_HTTP_SCRIPTED_SERVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace tensorfs::testing {

// Listens on 127.0.0.1 on a free port and serves each connection on a thread
// of its own with `serve(fd)`. The destructor stops accepting, shuts the
// connections down (so that `serve` returns), joins its threads and closes
// the descriptors. A server holds it as its last member: built after what
// `serve` uses, and gone before it.
class LoopbackAcceptor {
 public:
  explicit LoopbackAcceptor(std::function<void(int fd)> serve) : serve_(std::move(serve)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_fd_, 16), 0);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }

  ~LoopbackAcceptor() {
    stop_ = true;
    acceptor_.join();
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int fd : conn_fds_) ::shutdown(fd, SHUT_RDWR);
    }
    for (std::thread& t : conn_threads_) t.join();
    for (int fd : conn_fds_) ::close(fd);
    ::close(listen_fd_);
  }

  int port() const { return port_; }
  int connections() const { return connections_; }

 private:
  void Accept() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) continue;
      ++connections_;
      std::lock_guard<std::mutex> lock(mu_);
      conn_fds_.push_back(fd);
      conn_threads_.emplace_back([this, fd] { serve_(fd); });
    }
  }

  std::function<void(int fd)> serve_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::mutex mu_;
  std::vector<int> conn_fds_;
  std::vector<std::thread> conn_threads_;
};

// Serves 127.0.0.1 on a free port. Each request (its head read up to the blank
// line) takes the next scripted step: bytes to send, then maybe close.
class ScriptedServer {
 public:
  struct Step {
    std::string reply;          // sent as is ("" sends nothing)
    bool close_after = false;   // close the connection once sent
  };

  explicit ScriptedServer(std::vector<Step> steps) : steps_(std::move(steps)) {}

  std::string base() const { return "http://127.0.0.1:" + std::to_string(acceptor_.port()); }
  int connections() const { return acceptor_.connections(); }
  std::vector<std::string> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Serve(int fd) {
    std::string in;
    char buf[4096];
    for (;;) {
      size_t end;
      while ((end = in.find("\r\n\r\n")) == std::string::npos) {
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
        if (n <= 0) return;
        in.append(buf, static_cast<size_t>(n));
      }
      Step step;
      {
        std::lock_guard<std::mutex> lock(mu_);
        requests_.push_back(in.substr(0, end + 4));
        if (next_ < steps_.size()) step = steps_[next_++];
      }
      in.erase(0, end + 4);
      for (size_t sent = 0; sent < step.reply.size();) {
        const ssize_t n = ::send(fd, step.reply.data() + sent, step.reply.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) return;
        sent += static_cast<size_t>(n);
      }
      if (step.close_after) {
        ::shutdown(fd, SHUT_RDWR);
        return;
      }
    }
  }

  std::vector<Step> steps_;
  mutable std::mutex mu_;
  size_t next_ = 0;
  std::vector<std::string> requests_;
  LoopbackAcceptor acceptor_{[this](int fd) { Serve(fd); }};
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_CORE_STORE_HTTP_SCRIPTED_SERVER_H_
