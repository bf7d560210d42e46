// The mount's Metrics for Prometheus: RenderPrometheusText() writes them in the
// text exposition format (version 0.0.4), and PrometheusServer answers
// GET /metrics with it on -o prometheus_address (127.0.0.1 unless set, e.g. to
// 0.0.0.0 for a scrape from outside a pod) and -o prometheus_port=N, or on the
// Unix socket of -o prometheus_socket=PATH (GKE's CSI node plugin scrapes each
// volume's metrics.sock so, asking for "/": there every path is the metrics).
//
// Families (every one is always present, zero until something happens):
//   tensorfs_read_requests_total, tensorfs_served_bytes_total,
//   tensorfs_cache_hits_total, tensorfs_cache_misses_total,
//   tensorfs_cache_evictions_total, tensorfs_cache_bytes (gauge),
//   tensorfs_fetches_total, tensorfs_prefetches_total, tensorfs_fetched_bytes_total,
//   tensorfs_fetches_in_flight (gauge), tensorfs_metadata_requests_total,
//   tensorfs_listings_total, tensorfs_listings_changed_total,
//   tensorfs_versions_replaced_total, tensorfs_entries_removed_total,
//   tensorfs_kernel_invalidations_total, tensorfs_nodes (gauge),
//   tensorfs_errors_total{kind="not_found"|...} (one series per ErrorCode but OK),
//   tensorfs_retries_total{cause="connect"|"reset"|"truncated"|"stall"|"credentials"|"other"}
//     (always present) and {cause="http",code="503"} (one series per status code seen),
//   tensorfs_resumed_bytes_total, tensorfs_retries_exhausted_total,
//   tensorfs_reads_failed_eio_total,
//   tensorfs_fetch_latency_seconds (histogram: _bucket{le=".."} cumulative, _sum, _count).
// A field added to Metrics is added here too.
//
// The server is deliberately small: one thread accepts on a socket bound to
// one address (loopback by default), serves one request per connection (HTTP/1.0 or 1.1, closed
// after the reply: 200 for /metrics, 404 for any other path, 405 for a method
// other than GET or HEAD), and gives a client that stalls 2 s up. On the
// default loopback address it is not reachable from other machines; bound to
// another it serves anyone who can reach that address (the metrics name no
// object and hold no secret), so a pod's network policy decides who scrapes.
//
// Thread-safety: RenderPrometheusText() may run concurrently with updates to
// the Metrics (each value is read once, with relaxed loads). A PrometheusServer
// is created and destroyed by one thread; its serving thread only reads.
#ifndef TENSORFS_CORE_METRICS_PROMETHEUS_H_
#define TENSORFS_CORE_METRICS_PROMETHEUS_H_

#include <memory>
#include <string>
#include <thread>

#include "core/metrics/metrics.h"
#include "core/util/status.h"

namespace tensorfs {

// The Content-Type of the text format.
inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string RenderPrometheusText(const Metrics& metrics);

class PrometheusServer {
 public:
  // Listens on `address`:`port` (an IPv4 or IPv6 literal; port 0: any free
  // port, see port()) and starts serving `metrics`, which must outlive the
  // server. Fails, saying which address and why, when it cannot be bound
  // (another process has the port, no interface has the address).
  static StatusOr<std::unique_ptr<PrometheusServer>> Start(const Metrics& metrics, int port,
                                                           const std::string& address = "127.0.0.1");
  // Listens on a Unix stream socket at `path`, replacing a socket left there
  // (a file of another kind is an error), and serves `metrics` at every path.
  static StatusOr<std::unique_ptr<PrometheusServer>> StartUnix(const Metrics& metrics, const std::string& path);

  PrometheusServer(const PrometheusServer&) = delete;
  PrometheusServer& operator=(const PrometheusServer&) = delete;
  // Stops accepting, finishes the reply in progress (at most 2 s), closes the socket.
  ~PrometheusServer();

  int port() const { return port_; }  // 0 on a Unix socket

 private:
  PrometheusServer(const Metrics& metrics, int listen_fd, int wake_fd, int port, bool every_path)
      : metrics_(metrics), listen_fd_(listen_fd), wake_fd_(wake_fd), port_(port), every_path_(every_path) {}
  static StatusOr<std::unique_ptr<PrometheusServer>> Serving(const Metrics& metrics, int listen_fd, int port,
                                                             bool every_path, const std::string& where);
  void Serve();
  void Answer(int fd);

  const Metrics& metrics_;
  const int listen_fd_;
  const int wake_fd_;  // an eventfd: written once to stop Serve()
  const int port_;
  const bool every_path_;  // not only /metrics
  std::thread thread_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_METRICS_PROMETHEUS_H_
