#include "core/metrics/prometheus.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <string_view>

namespace tensorfs {
namespace {

void Family(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  fmt::format_to(std::back_inserter(out), "# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void Single(std::string& out, std::string_view name, std::string_view type, std::string_view help,
            const std::atomic<uint64_t>& value) {
  Family(out, name, type, help);
  fmt::format_to(std::back_inserter(out), "{} {}\n", name, value.load(std::memory_order_relaxed));
}

// "NOT_FOUND" -> "not_found".
std::string LabelValue(std::string_view code_name) {
  std::string s(code_name);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string ErrnoText(int err) { return std::strerror(err); }

// Sends all of `data`; false if the peer went away or stalled.
bool SendAll(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

std::string Response(std::string_view status, std::string_view content_type, std::string_view body,
                     bool head, std::string_view extra_headers = "") {
  std::string r = fmt::format(
      "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n", status,
      content_type, body.size(), extra_headers);
  if (!head) r.append(body);
  return r;
}

}  // namespace

std::string RenderPrometheusText(const Metrics& m) {
  std::string out;
  out.reserve(4096);
  Single(out, "tensorfs_read_requests_total", "counter", "Read requests from the kernel answered.",
         m.read_requests);
  Single(out, "tensorfs_served_bytes_total", "counter", "Bytes returned to the kernel by reads.", m.bytes_served);
  Single(out, "tensorfs_cache_hits_total", "counter", "Chunk lookups answered from the memory cache.",
         m.cache_hits);
  Single(out, "tensorfs_cache_misses_total", "counter", "Chunk lookups that had to fetch or join a fetch.",
         m.cache_misses);
  Single(out, "tensorfs_cache_evictions_total", "counter", "Chunks dropped to stay within cache_size.",
         m.cache_evictions);
  Single(out, "tensorfs_cache_bytes", "gauge", "Bytes held by the chunk cache now.", m.cache_bytes);
  Single(out, "tensorfs_fetches_total", "counter", "Ranged reads issued to the object store.", m.fetches);
  Single(out, "tensorfs_prefetches_total", "counter",
         "Ranged reads started by prefetch (also counted in tensorfs_fetches_total).", m.prefetches);
  Single(out, "tensorfs_fetched_bytes_total", "counter", "Bytes read from the object store.", m.bytes_fetched);
  Single(out, "tensorfs_fetches_in_flight", "gauge", "Ranged reads in flight now.", m.fetches_in_flight);
  Single(out, "tensorfs_metadata_requests_total", "counter", "Listings and stats sent to the object store.",
         m.metadata_requests);
  Single(out, "tensorfs_listings_total", "counter", "Directory listings sent to the object store.", m.listings);
  Single(out, "tensorfs_listings_changed_total", "counter",
         "Listings that found a directory changed (new, replaced or removed entries).", m.listings_changed);
  Single(out, "tensorfs_versions_replaced_total", "counter",
         "Objects a listing found with a new generation: new files (new inodes) to the kernel.", m.versions_replaced);
  Single(out, "tensorfs_entries_removed_total", "counter", "Names a listing found gone from a directory.",
         m.entries_removed);
  Single(out, "tensorfs_kernel_invalidations_total", "counter",
         "Notifications sent to the kernel to drop cached entries and directory pages.", m.kernel_invalidations);
  Single(out, "tensorfs_nodes", "gauge", "Files and directories the mount holds (listed, or held by the kernel).",
         m.nodes);

  Family(out, "tensorfs_errors_total", "counter", "Failed operations, by kind of error.");
  for (size_t i = 1; i < m.errors_by_code.size(); ++i) {
    fmt::format_to(std::back_inserter(out), "tensorfs_errors_total{{kind=\"{}\"}} {}\n",
                   LabelValue(ErrorCodeName(static_cast<ErrorCode>(i))),
                   m.errors_by_code[i].load(std::memory_order_relaxed));
  }

  Family(out, "tensorfs_retries_total", "counter",
         "Requests to the object store tried again, by cause (HTTP ones by status code).");
  for (size_t code = 0; code < m.retries.by_http_status.size(); ++code) {
    if (uint64_t n = m.retries.by_http_status[code].load(std::memory_order_relaxed); n > 0) {
      fmt::format_to(std::back_inserter(out), "tensorfs_retries_total{{cause=\"http\",code=\"{}\"}} {}\n", code, n);
    }
  }
  for (size_t i = 0; i < m.retries.by_cause.size(); ++i) {
    if (static_cast<RetryCause>(i) == RetryCause::kHttpStatus) continue;
    fmt::format_to(std::back_inserter(out), "tensorfs_retries_total{{cause=\"{}\"}} {}\n",
                   RetryCauseName(static_cast<RetryCause>(i)), m.retries.by_cause[i].load(std::memory_order_relaxed));
  }
  Single(out, "tensorfs_resumed_bytes_total", "counter",
         "Bytes kept from responses cut short, which resumed reads did not fetch again.", m.retries.resumed_bytes);
  Single(out, "tensorfs_retries_exhausted_total", "counter",
         "Store operations that failed because their retries ran out (retry_deadline).", m.retries.exhausted);
  Single(out, "tensorfs_reads_failed_eio_total", "counter", "Read requests from the kernel answered with EIO.",
         m.reads_failed_eio);

  Family(out, "tensorfs_fetch_latency_seconds", "histogram",
         "Time to complete one ranged read from the object store.");
  LatencyHistogram::Snapshot h = m.fetch_latency.Take();
  uint64_t cumulative = 0;
  for (size_t i = 0; i < LatencyHistogram::kBounds.size(); ++i) {
    cumulative += h.counts[i];
    fmt::format_to(std::back_inserter(out), "tensorfs_fetch_latency_seconds_bucket{{le=\"{}\"}} {}\n",
                   LatencyHistogram::kBounds[i], cumulative);
  }
  cumulative += h.counts.back();
  // _count equals the +Inf bucket even while other threads observe.
  fmt::format_to(std::back_inserter(out),
                 "tensorfs_fetch_latency_seconds_bucket{{le=\"+Inf\"}} {}\n"
                 "tensorfs_fetch_latency_seconds_sum {}\n"
                 "tensorfs_fetch_latency_seconds_count {}\n",
                 cumulative, h.sum_seconds, cumulative);
  return out;
}

StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::Start(const Metrics& metrics, int port,
                                                                   const std::string& address) {
  // An IPv6 literal is written [addr]:port, as a URL would.
  const bool v6 = address.find(':') != std::string::npos;
  const std::string where = (v6 ? "[" + address + "]" : address) + ":" + std::to_string(port);
  sockaddr_storage storage = {};
  socklen_t addr_len = 0;
  if (v6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&storage);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET6, address.c_str(), &a->sin6_addr) == 1) addr_len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&storage);
    a->sin_family = AF_INET;
    a->sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, address.c_str(), &a->sin_addr) == 1) addr_len = sizeof *a;
  }
  if (addr_len == 0) {
    return InvalidArgumentError("cannot serve metrics on " + where +
                                ": not an IP address; give -o prometheus_address an IPv4 or IPv6 address such "
                                "as 127.0.0.1, 0.0.0.0 (every interface) or ::");
  }
  int fd = ::socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError("cannot serve metrics on " + where + ": socket: " + ErrnoText(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // rebinding after a restart
  if (::bind(fd, reinterpret_cast<sockaddr*>(&storage), addr_len) != 0 || ::listen(fd, 16) != 0) {
    int err = errno;
    ::close(fd);
    std::string why = err == EADDRINUSE      ? "the port is already in use by another process"
                      : err == EACCES        ? "permission denied"
                      : err == EADDRNOTAVAIL ? "no interface of this machine has that address"
                                             : ErrnoText(err);
    return UnavailableError("cannot serve metrics on " + where + ": " + why +
                            "; choose another -o prometheus_port or -o prometheus_address");
  }
  socklen_t len = sizeof storage;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&storage), &len);
  const int bound_port = ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port
                                  : reinterpret_cast<sockaddr_in*>(&storage)->sin_port);
  return Serving(metrics, fd, bound_port, /*every_path=*/false, where);
}

StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::StartUnix(const Metrics& metrics,
                                                                       const std::string& path) {
  const std::string where = "the Unix socket " + path;
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    return InvalidArgumentError("cannot serve metrics on " + where + ": give a path of 1 to " +
                                std::to_string(sizeof addr.sun_path - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) {  // left by an earlier run
    if (!S_ISSOCK(st.st_mode)) {
      return InvalidArgumentError("cannot serve metrics on " + where + ": a file that is no socket is there");
    }
    ::unlink(path.c_str());
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return UnavailableError("cannot serve metrics on " + where + ": socket: " + ErrnoText(errno));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd, 16) != 0) {
    int err = errno;
    ::close(fd);
    return UnavailableError("cannot serve metrics on " + where + ": " + ErrnoText(err) +
                            "; choose another -o prometheus_socket");
  }
  return Serving(metrics, fd, 0, /*every_path=*/true, where);
}

StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::Serving(const Metrics& metrics, int listen_fd,
                                                                     int port, bool every_path,
                                                                     const std::string& where) {
  int wake = ::eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    int err = errno;
    ::close(listen_fd);
    return UnavailableError("cannot serve metrics on " + where + ": eventfd: " + ErrnoText(err));
  }
  std::unique_ptr<PrometheusServer> server(new PrometheusServer(metrics, listen_fd, wake, port, every_path));
  server->thread_ = std::thread([s = server.get()] { s->Serve(); });
  return server;
}

PrometheusServer::~PrometheusServer() {
  uint64_t one = 1;
  (void)!::write(wake_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  ::close(listen_fd_);
  ::close(wake_fd_);
}

void PrometheusServer::Serve() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    int n = ::poll(fds, 2, -1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 || (fds[1].revents & POLLIN)) return;
    if (!(fds[0].revents & POLLIN)) continue;
    int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;  // the client gave up, or out of descriptors: try the next one
    Answer(conn);
    ::close(conn);
  }
}

void PrometheusServer::Answer(int fd) {
  timeval timeout = {2, 0};  // a stalled client does not hold the server up
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
  std::string request;
  char buf[2048];
  while (request.find("\r\n\r\n") == std::string::npos && request.find("\n\n") == std::string::npos) {
    if (request.size() > 16384) return;  // not a scrape
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (request.find('\n') != std::string::npos) break;  // HTTP/0.9-style clients end early
      return;
    }
    request.append(buf, static_cast<size_t>(n));
  }
  // "GET /metrics?x=y HTTP/1.1"
  std::string_view line(request);
  line = line.substr(0, line.find_first_of("\r\n"));
  size_t sp1 = line.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? std::string_view::npos : line.find(' ', sp1 + 1);
  std::string_view method = line.substr(0, sp1);
  std::string_view target =
      sp1 == std::string_view::npos ? std::string_view() : line.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view path = target.substr(0, target.find('?'));
  bool head = method == "HEAD";
  std::string reply;
  if (method != "GET" && !head) {
    reply = Response("405 Method Not Allowed", "text/plain; charset=utf-8", "only GET is served\n", false,
                     "Allow: GET, HEAD\r\n");
  } else if (path != "/metrics" && !every_path_) {
    reply = Response("404 Not Found", "text/plain; charset=utf-8", "not found: metrics are at /metrics\n", head);
  } else {
    reply = Response("200 OK", kPrometheusContentType, RenderPrometheusText(metrics_), head);
  }
  SendAll(fd, reply);
}

}  // namespace tensorfs
