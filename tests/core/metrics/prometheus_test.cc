// The Prometheus text format and the /metrics server.
#include "core/metrics/prometheus.h"

#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <regex>
#include <set>
#include <sstream>

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// One scrape, parsed the way a Prometheus server reads the text format.
struct Exposition {
  std::map<std::string, std::string> help;  // family -> text
  std::map<std::string, std::string> type;  // family -> counter | gauge | histogram
  std::map<std::string, double> samples;    // "name{labels}" -> value
  std::vector<std::string> errors;          // lines that break the format
};

Exposition ParseExposition(const std::string& text) {
  static const std::regex kSample(R"(([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"\})? (\S+))");
  static const std::regex kMeta(R"(# (HELP|TYPE) ([a-zA-Z_:][a-zA-Z0-9_:]*) (.+))");
  Exposition e;
  std::istringstream in(text);
  std::string line;
  std::string current;  // the family the last TYPE line opened
  std::set<std::string> closed;
  while (std::getline(in, line)) {
    std::smatch m;
    if (std::regex_match(line, m, kMeta)) {
      std::string family = m[2];
      if (closed.count(family)) e.errors.push_back("family repeated: " + line);
      if (m[1] == "HELP") {
        e.help[family] = m[3];
      } else {
        if (!e.help.count(family)) e.errors.push_back("TYPE before HELP: " + line);
        e.type[family] = m[3];
        if (!current.empty()) closed.insert(current);
        current = family;
      }
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      e.errors.push_back("not a sample: " + line);
      continue;
    }
    std::string name = m[1];
    std::string family = name;
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      if (e.type[current] == "histogram" && name == current + suffix) family = current;
    }
    if (family != current) e.errors.push_back("sample outside its family: " + line);
    std::string value = m[3];
    e.samples[name + std::string(m[2])] = value == "+Inf" ? 1e308 : std::stod(value);
  }
  return e;
}

struct HttpReply {
  std::string status_line;
  std::string headers;
  std::string body;
};

HttpReply Get(int port, const std::string& request) {
  HttpReply reply;
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return reply;
  }
  (void)!::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
  std::string raw;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) raw.append(buf, static_cast<size_t>(n));
  ::close(fd);
  size_t eol = raw.find("\r\n");
  size_t end = raw.find("\r\n\r\n");
  if (eol == std::string::npos || end == std::string::npos) return reply;
  reply.status_line = raw.substr(0, eol);
  reply.headers = raw.substr(eol + 2, end - eol - 2);
  reply.body = raw.substr(end + 4);
  return reply;
}

HttpReply GetPath(int port, const std::string& path) {
  return Get(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: test\r\n\r\n");
}

const char* const kFamilies[] = {
    "tensorfs_read_requests_total",     "tensorfs_served_bytes_total",    "tensorfs_cache_hits_total",
    "tensorfs_cache_misses_total",      "tensorfs_cache_evictions_total", "tensorfs_cache_bytes",
    "tensorfs_fetches_total",           "tensorfs_prefetches_total",      "tensorfs_fetched_bytes_total",
    "tensorfs_fetches_in_flight",       "tensorfs_metadata_requests_total", "tensorfs_errors_total",
    "tensorfs_retries_total",           "tensorfs_resumed_bytes_total",   "tensorfs_retries_exhausted_total",
    "tensorfs_reads_failed_eio_total",  "tensorfs_fetch_latency_seconds",
    "tensorfs_listings_total",          "tensorfs_listings_changed_total", "tensorfs_versions_replaced_total",
    "tensorfs_entries_removed_total",   "tensorfs_kernel_invalidations_total", "tensorfs_nodes",
};

TEST(PrometheusTextTest, EveryFamilyHasHelpTypeAndSamplesInOrder) {
  Metrics metrics;
  Exposition e = ParseExposition(RenderPrometheusText(metrics));
  EXPECT_THAT(e.errors, ::testing::IsEmpty());
  for (const char* family : kFamilies) {
    EXPECT_TRUE(e.help.count(family)) << family;
    ASSERT_TRUE(e.type.count(family)) << family;
    std::string type = e.type[family];
    if (std::string(family).ends_with("_total")) {
      EXPECT_EQ(type, "counter") << family;
    }
  }
  EXPECT_EQ(e.type["tensorfs_cache_bytes"], "gauge");
  EXPECT_EQ(e.type["tensorfs_fetches_in_flight"], "gauge");
  EXPECT_EQ(e.type["tensorfs_nodes"], "gauge");
  EXPECT_EQ(e.type["tensorfs_fetch_latency_seconds"], "histogram");
  EXPECT_EQ(e.help.size(), std::size(kFamilies)) << "a family without a test here";
}

TEST(PrometheusTextTest, CountersAndGaugesCarryTheirValues) {
  Metrics metrics;
  metrics.read_requests = 3;
  metrics.bytes_served = 4096;
  metrics.cache_hits = 5;
  metrics.cache_misses = 6;
  metrics.cache_evictions = 7;
  metrics.cache_bytes = 8 << 20;
  metrics.fetches = 9;
  metrics.prefetches = 2;
  metrics.bytes_fetched = 123456789012ull;
  metrics.fetches_in_flight = 4;
  metrics.metadata_requests = 11;
  metrics.listings = 12;
  metrics.listings_changed = 13;
  metrics.versions_replaced = 14;
  metrics.entries_removed = 15;
  metrics.kernel_invalidations = 16;
  metrics.nodes = 17;
  Exposition e = ParseExposition(RenderPrometheusText(metrics));
  EXPECT_EQ(e.samples["tensorfs_read_requests_total"], 3);
  EXPECT_EQ(e.samples["tensorfs_served_bytes_total"], 4096);
  EXPECT_EQ(e.samples["tensorfs_cache_hits_total"], 5);
  EXPECT_EQ(e.samples["tensorfs_cache_misses_total"], 6);
  EXPECT_EQ(e.samples["tensorfs_cache_evictions_total"], 7);
  EXPECT_EQ(e.samples["tensorfs_cache_bytes"], 8 << 20);
  EXPECT_EQ(e.samples["tensorfs_fetches_total"], 9);
  EXPECT_EQ(e.samples["tensorfs_prefetches_total"], 2);
  EXPECT_EQ(e.samples["tensorfs_fetched_bytes_total"], 123456789012.0);
  EXPECT_EQ(e.samples["tensorfs_fetches_in_flight"], 4);
  EXPECT_EQ(e.samples["tensorfs_metadata_requests_total"], 11);
  EXPECT_EQ(e.samples["tensorfs_listings_total"], 12);
  EXPECT_EQ(e.samples["tensorfs_listings_changed_total"], 13);
  EXPECT_EQ(e.samples["tensorfs_versions_replaced_total"], 14);
  EXPECT_EQ(e.samples["tensorfs_entries_removed_total"], 15);
  EXPECT_EQ(e.samples["tensorfs_kernel_invalidations_total"], 16);
  EXPECT_EQ(e.samples["tensorfs_nodes"], 17);
}

TEST(PrometheusTextTest, ErrorsAreOneSeriesPerKind) {
  Metrics metrics;
  metrics.CountError(ErrorCode::kNotFound);
  metrics.CountError(ErrorCode::kUnavailable);
  metrics.CountError(ErrorCode::kUnavailable);
  std::string text = RenderPrometheusText(metrics);
  EXPECT_THAT(text, HasSubstr("tensorfs_errors_total{kind=\"not_found\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_errors_total{kind=\"unavailable\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_errors_total{kind=\"stale\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_errors_total{kind=\"deadline_exceeded\"} 0\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("kind=\"ok\"")));
}

TEST(PrometheusTextTest, RetriesAreOneSeriesPerCauseAndPerHttpStatusSeen) {
  Metrics metrics;
  metrics.retries.Count(RetryCause::kHttpStatus, 503);
  metrics.retries.Count(RetryCause::kHttpStatus, 503);
  metrics.retries.Count(RetryCause::kHttpStatus, 429);
  metrics.retries.Count(RetryCause::kConnect);
  metrics.retries.Count(RetryCause::kStall);
  metrics.retries.resumed_bytes = 4096;
  metrics.retries.exhausted = 2;
  metrics.reads_failed_eio = 3;
  std::string text = RenderPrometheusText(metrics);
  EXPECT_THAT(text, HasSubstr("tensorfs_retries_total{cause=\"http\",code=\"503\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_retries_total{cause=\"http\",code=\"429\"} 1\n"));
  EXPECT_THAT(text, ::testing::Not(HasSubstr("code=\"500\"")));
  EXPECT_THAT(text, HasSubstr("tensorfs_retries_total{cause=\"connect\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_retries_total{cause=\"stall\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_retries_total{cause=\"reset\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_retries_total{cause=\"truncated\"} 0\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_resumed_bytes_total 4096\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_retries_exhausted_total 2\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_reads_failed_eio_total 3\n"));
}

TEST(MetricsJsonTest, RetriesByCauseMatchThePrometheusSeries) {
  Metrics metrics;
  metrics.retries.Count(RetryCause::kHttpStatus, 503);
  metrics.retries.Count(RetryCause::kReset);
  metrics.retries.Count(RetryCause::kTruncated);
  metrics.retries.resumed_bytes = 100;
  metrics.reads_failed_eio = 1;
  nlohmann::json j = metrics.ToJson();
  EXPECT_EQ(j["retries"]["total"], 3);
  EXPECT_EQ(j["retries"]["by_cause"], nlohmann::json({{"http_503", 1}, {"reset", 1}, {"truncated", 1}}));
  EXPECT_EQ(j["retries"]["resumed_bytes"], 100);
  EXPECT_EQ(j["retries"]["exhausted"], 0);
  EXPECT_EQ(j["reads_failed_eio"], 1);
}

TEST(PrometheusTextTest, LatencyHistogramIsCumulativeWithSumAndCount) {
  Metrics metrics;
  metrics.fetch_latency.Observe(0.0005);  // le 0.001
  metrics.fetch_latency.Observe(0.003);   // le 0.005
  metrics.fetch_latency.Observe(0.2);     // le 0.25
  metrics.fetch_latency.Observe(100);     // above 60 s: +Inf only
  std::string text = RenderPrometheusText(metrics);
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"0.001\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"0.0025\"} 1\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"0.005\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"0.1\"} 2\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"0.25\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"1\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"60\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("tensorfs_fetch_latency_seconds_count 4\n"));
  Exposition e = ParseExposition(text);
  EXPECT_THAT(e.errors, ::testing::IsEmpty());
  EXPECT_NEAR(e.samples["tensorfs_fetch_latency_seconds_sum"], 100.2035, 1e-3);
  // Buckets never decrease, in the order they are written.
  double previous = 0;
  std::istringstream in(text);
  std::string line;
  int buckets = 0;
  while (std::getline(in, line)) {
    if (!line.starts_with("tensorfs_fetch_latency_seconds_bucket")) continue;
    double v = std::stod(line.substr(line.rfind(' ') + 1));
    EXPECT_GE(v, previous) << line;
    previous = v;
    ++buckets;
  }
  EXPECT_EQ(buckets, static_cast<int>(LatencyHistogram::kBounds.size()) + 1);
}

TEST(PrometheusServerTest, ServesMetricsOnLoopbackAndTheyChange) {
  Metrics metrics;
  auto server = PrometheusServer::Start(metrics, 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  int port = (*server)->port();
  ASSERT_GT(port, 0);
  HttpReply first = GetPath(port, "/metrics");
  EXPECT_EQ(first.status_line, "HTTP/1.1 200 OK");
  EXPECT_THAT(first.headers, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_THAT(first.headers, HasSubstr("Content-Length: " + std::to_string(first.body.size())));
  EXPECT_TRUE(ParseExposition(first.body).errors.empty());
  EXPECT_EQ(ParseExposition(first.body).samples["tensorfs_read_requests_total"], 0);
  metrics.read_requests += 5;
  HttpReply second = GetPath(port, "/metrics?name[]=x");
  EXPECT_EQ(ParseExposition(second.body).samples["tensorfs_read_requests_total"], 5);
}

TEST(PrometheusServerTest, OtherPathsAre404AndOtherMethods405) {
  Metrics metrics;
  auto server = PrometheusServer::Start(metrics, 0);
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  EXPECT_THAT(GetPath(port, "/").status_line, StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(GetPath(port, "/metricsx").status_line, StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(GetPath(port, "/metrics/").status_line, StartsWith("HTTP/1.1 404"));
  HttpReply post = Get(port, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  EXPECT_THAT(post.status_line, StartsWith("HTTP/1.1 405"));
  EXPECT_THAT(post.headers, HasSubstr("Allow: GET"));
  HttpReply head = Get(port, "HEAD /metrics HTTP/1.0\r\n\r\n");
  EXPECT_EQ(head.status_line, "HTTP/1.1 200 OK");
  EXPECT_TRUE(head.body.empty());
  EXPECT_EQ(Get(port, "garbage\r\n\r\n").status_line.substr(0, 12), "HTTP/1.1 405");
}

TEST(PrometheusServerTest, ServesEveryPathOnAUnixSocketReplacingAStaleOne) {
  const std::string dir = ::testing::TempDir() + "/prometheus_unix_" + std::to_string(::getpid());
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  const std::string path = dir + "/metrics.sock";
  Metrics metrics;
  metrics.read_requests += 7;
  for (int run = 0; run < 2; ++run) {  // the second finds the first's socket file there
    auto server = PrometheusServer::StartUnix(metrics, path);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    EXPECT_EQ((*server)->port(), 0);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strcpy(addr.sun_path, path.c_str());
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    const std::string request = "GET / HTTP/1.1\r\nHost: unix\r\n\r\n";  // what the node plugin asks
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
    std::string raw;
    char buf[4096];
    for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) raw.append(buf, static_cast<size_t>(n));
    ::close(fd);
    EXPECT_THAT(raw, StartsWith("HTTP/1.1 200 OK"));
    EXPECT_THAT(raw, HasSubstr("\ntensorfs_read_requests_total 7\n"));
  }
  std::filesystem::remove_all(dir);
}

TEST(PrometheusServerTest, AUnixSocketPathHoldingAnotherFileIsAClearError) {
  const std::string path = ::testing::TempDir() + "/prometheus_not_a_socket_" + std::to_string(::getpid());
  { std::ofstream(path) << "x"; }
  Metrics metrics;
  auto server = PrometheusServer::StartUnix(metrics, path);
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("no socket"));
  std::filesystem::remove(path);
}

TEST(PrometheusServerTest, PortInUseIsAClearError) {
  Metrics metrics;
  auto first = PrometheusServer::Start(metrics, 0);
  ASSERT_TRUE(first.ok());
  int port = (*first)->port();
  auto second = PrometheusServer::Start(metrics, port);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.status().message(), HasSubstr("127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(second.status().message(), HasSubstr("already in use"));
  EXPECT_THAT(second.status().message(), HasSubstr("prometheus_port"));
}

TEST(PrometheusServerTest, StopsPromptlyEvenWithAnIdleClientAndFreesThePort) {
  Metrics metrics;
  auto server = PrometheusServer::Start(metrics, 0);
  ASSERT_TRUE(server.ok());
  int port = (*server)->port();
  // A client that connects and says nothing holds the server for at most 2 s.
  int idle = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(idle, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_EQ(GetPath(port, "/metrics").status_line, "HTTP/1.1 200 OK") << "served after the idle one gave up";
  // The idle client stays connected until the server is gone: a stop that
  // waited for it would never end (the 60 s only bounds that hang).
  auto stopped = std::async(std::launch::async, [&server] { server->reset(); });
  EXPECT_EQ(stopped.wait_for(std::chrono::seconds(60)), std::future_status::ready) << "stop waited for the idle client";
  ::close(idle);
  stopped.wait();
  auto again = PrometheusServer::Start(metrics, port);
  EXPECT_TRUE(again.ok()) << again.status().ToString();
}

TEST(PrometheusServerTest, ListensOnLoopbackOnly) {
  Metrics metrics;
  auto server = PrometheusServer::Start(metrics, 0);
  ASSERT_TRUE(server.ok());
  std::ifstream tcp("/proc/net/tcp");
  std::string contents((std::istreambuf_iterator<char>(tcp)), std::istreambuf_iterator<char>());
  char local[32];
  std::snprintf(local, sizeof local, "0100007F:%04X", (*server)->port());
  EXPECT_THAT(contents, HasSubstr(local)) << "127.0.0.1, in /proc/net/tcp's notation";
  std::snprintf(local, sizeof local, "00000000:%04X", (*server)->port());
  EXPECT_THAT(contents, ::testing::Not(HasSubstr(local)));
}

TEST(PrometheusServerTest, ListensOnEveryInterfaceWhenGivenTheWildcardAddress) {
  Metrics metrics;
  auto server = PrometheusServer::Start(metrics, 0, "0.0.0.0");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::ifstream tcp("/proc/net/tcp");
  std::string contents((std::istreambuf_iterator<char>(tcp)), std::istreambuf_iterator<char>());
  char local[32];
  std::snprintf(local, sizeof local, "00000000:%04X", (*server)->port());
  EXPECT_THAT(contents, HasSubstr(local)) << "0.0.0.0, in /proc/net/tcp's notation";
  EXPECT_EQ(GetPath((*server)->port(), "/metrics").status_line, "HTTP/1.1 200 OK");
}

TEST(PrometheusServerTest, ListensOnAnIpv6Address) {
  const int probe = ::socket(AF_INET6, SOCK_STREAM, 0);
  if (probe < 0) GTEST_SKIP() << "no IPv6 on this machine";
  ::close(probe);
  Metrics metrics;
  auto server = PrometheusServer::Start(metrics, 0, "::1");
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  std::ifstream tcp("/proc/net/tcp6");
  std::string contents((std::istreambuf_iterator<char>(tcp)), std::istreambuf_iterator<char>());
  char local[48];
  std::snprintf(local, sizeof local, "00000000000000000000000001000000:%04X", (*server)->port());
  EXPECT_THAT(contents, HasSubstr(local)) << "::1, in /proc/net/tcp6's notation";
}

TEST(PrometheusServerTest, AnAddressThatIsNotAnIpIsAClearError) {
  Metrics metrics;
  auto server = PrometheusServer::Start(metrics, 0, "metrics.local");
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("metrics.local:0"));
  EXPECT_THAT(server.status().message(), HasSubstr("prometheus_address"));
}

TEST(PrometheusServerTest, AnAddressNoInterfaceHasIsAClearError) {
  Metrics metrics;
  auto server = PrometheusServer::Start(metrics, 0, "192.0.2.1");  // TEST-NET-1: never local
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.status().message(), HasSubstr("192.0.2.1:0"));
  EXPECT_THAT(server.status().message(), HasSubstr("no interface of this machine has that address"));
}

}  // namespace
}  // namespace tensorfs
