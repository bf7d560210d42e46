// GcsTestServer: runs tests/support/gcs_test_server.py (the project's GCS-compatible
// server, which speaks the S3 dialect too; documented in
// tests/support/GCS_TEST_SERVER.md) as a child process for the lifetime of a
// test, on 127.0.0.1 and an ephemeral port, and drives its control API (faults,
// stats, link shaping, S3 sessions) and uploads.
//
//   auto server = GcsTestServer::Start({.data_dir = dir}, &error);
//   ASSERT_NE(server, nullptr) << error;
//   // mount gs://bucket with -o endpoint=server->endpoint() ...
//   ASSERT_TRUE(server->InjectFaults(R"([{"match": {"media": true},
//                                         "action": "status", "status": 503}])"));
//
// Every bucket is a subdirectory of data_dir; files under it are objects. The
// server runs /usr/bin/python3 with --quiet unless TENSORFS_GCS_TEST_SERVER_VERBOSE
// is set in the environment; its stderr is the test's stderr. The child gets
// SIGTERM if the thread that started it exits (PR_SET_PDEATHSIG), so a crashed
// test leaves no server behind: start it from the test's main thread.
//
// Thread-safety: port(), endpoint() and the control methods (InjectFaults ...
// Upload) may be called from several threads at once while the server runs.
// Start, Stop, Restart and the destructor must not race with any other call.
#ifndef TENSORFS_TESTS_SUPPORT_GCS_TEST_SERVER_H_
#define TENSORFS_TESTS_SUPPORT_GCS_TEST_SERVER_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/util/thread_annotations.h"

namespace tensorfs::testing {

struct GcsTestServerOptions {
  // The --data directory. Must exist.
  std::string data_dir;
  // More command-line flags, e.g. {"--require-auth", "--latency-ms", "20"}. The
  // fixture sets --data, --host, --port and --port-file itself.
  std::vector<std::string> extra_args;
};

class GcsTestServer {
 public:
  // Starts the server on an ephemeral port and waits (up to 60 s) until it
  // answers /_control/health. On failure returns nullptr and, if `error` is
  // given, says why (for ASSERT_NE(server, nullptr) << error).
  static std::unique_ptr<GcsTestServer> Start(GcsTestServerOptions options, std::string* error = nullptr);

  GcsTestServer(const GcsTestServer&) = delete;
  GcsTestServer& operator=(const GcsTestServer&) = delete;
  // Stops the server (SIGTERM, then SIGKILL after 2 s) and reaps it.
  ~GcsTestServer();

  int port() const { return port_; }
  // "http://127.0.0.1:PORT"
  std::string endpoint() const;
  const std::string& data_dir() const { return options_.data_dir; }

  // Stops the server; a no-op when it is not running. Clients see connection
  // refused until Restart().
  void Stop();
  // Stops the server if it runs and starts it again on the same port with the
  // same data and flags. Issued tokens, fault rules, stats and shaping set through
  // the control API are lost (flags given at Start apply again).
  bool Restart();
  bool running() const { return pid_ > 0; }

  // POST /_control/faults with a JSON list of rules (see the server docs).
  bool InjectFaults(const std::string& rules_json);
  bool ClearFaults();
  // GET /_control/stats; a null json on failure (see last_error()).
  nlohmann::json Stats();
  bool ResetStats();
  // Latency before each storage response, per-connection and total rate caps in
  // bytes per second; zero turns a cap off.
  bool SetShaping(double latency_ms, double conn_rate, double total_rate);
  // Creates or replaces gs://bucket/name through the upload endpoint, so the
  // object gets a generation greater than the one it replaces.
  bool Upload(const std::string& bucket, const std::string& name, const std::string& bytes);

  // S3 dialect: temporary credentials valid for `lifetime_s` ({"access_key_id",
  // "secret_access_key", "session_token"}; a null json on failure), and every
  // one issued so far made to expire now (S3 answers ExpiredToken to them).
  nlohmann::json NewS3Session(double lifetime_s);
  bool ExpireS3Sessions();

  // Why the last failed call above failed.
  std::string last_error() const EXCLUDES(mu_);

 private:
  struct HttpResult {
    long status = 0;  // 0: no HTTP response (error says why)
    std::string body;
    std::string error;
  };

  GcsTestServer(GcsTestServerOptions options, std::string run_dir);
  // Spawns the server on `port` (0: ephemeral) and waits until it is healthy.
  bool Launch(int port, std::string* error);
  HttpResult Request(const std::string& method, const std::string& path, const std::string& body) const;
  // Request() expecting a 2xx; records last_error_ otherwise.
  bool Call(const std::string& method, const std::string& path, const std::string& body,
            std::string* response = nullptr) EXCLUDES(mu_);
  void SetLastError(std::string error) EXCLUDES(mu_);

  GcsTestServerOptions options_;
  std::string run_dir_;  // holds the port file; removed by the destructor
  pid_t pid_ = -1;
  int port_ = 0;
  mutable Mutex mu_;
  std::string last_error_ GUARDED_BY(mu_);
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_GCS_TEST_SERVER_H_
