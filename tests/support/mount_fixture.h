// Test support for real mounts: starts the tensorfs binary in the foreground on
// a fresh mount point, waits until the kernel shows the mount, and always
// unmounts and reaps it on destruction (so a failed ASSERT leaves no stale
// mount), checking that it ended as README promises (daemon_check.h).
#ifndef TENSORFS_TESTS_SUPPORT_MOUNT_FIXTURE_H_
#define TENSORFS_TESTS_SUPPORT_MOUNT_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/support/test_util.h"

namespace tensorfs::testing {

// Makes a fresh RSA key, dir/key.pem (for the test server's
// --token-public-key); returns its path, or "" if openssl failed.
std::string GenerateRsaKey(const std::string& dir);
// Writes `path` (mode 0600): a service-account key file holding the PEM key
// at `key_pem`, whose tokens come from `token_uri`.
void WriteServiceAccountKey(const std::string& path, const std::string& key_pem, const std::string& token_uri);

// The built tensorfs binary.
std::string TensorfsBinary();

// True when `path` is a mount point in /proc/self/mountinfo.
bool IsMounted(const std::string& path);

// The readahead of the mount at `mountpoint` now (its bdi's read_ahead_kb, KiB):
// what files opened now get; -1 if it cannot be read. stat() of the mount's root
// waits for INIT to be answered, so what is read after it is what the kernel kept.
long ReadAheadKib(const std::string& mountpoint);
// A setting of the FUSE connection of the mount at `mountpoint`
// (/sys/fs/fuse/connections/MINOR/NAME: max_background, congestion_threshold),
// mounting fusectl there first if needed; -1 if it cannot be read.
long FuseConnectionSetting(const std::string& mountpoint, const std::string& name);

// The counters `tensorfs stats --json` prints, read as it reads them (the
// root's extended attribute); a null json if they cannot be read.
nlohmann::json MountStats(const std::string& mountpoint);
// The Prometheus endpoint's text on 127.0.0.1:`port` ("" if it cannot be read),
// and the value of the sample `name` (with its labels, if any) in it, or -1.
std::string ScrapeMetrics(int port);
double MetricSample(const std::string& text, const std::string& name);

// Unmounts `path` on destruction if it is still mounted (a mount made by a
// command the test ran), so a failed ASSERT leaves no mount behind.
struct UnmountOnExit {
  std::string path;
  ~UnmountOnExit();
};

// A tensorfs serving a fresh mount point in the foreground, started by the test.
//
// How it ends is checked as README promises (see daemon_check.h): the
// destructor unmounts it as a user would (fusermount3 -u) and expects exit
// status 0 within kHang; StopWith(SIGTERM/SIGINT/SIGHUP) expects exit status
// 0 and the mount gone; StopWith(SIGKILL) expects the kill and leaves the dead
// mount for the test to look at (the destructor detaches it). A hang fails the
// running test with the daemon's stacks and log and kills it; a sanitizer
// report from it fails the running test with the report.
class TensorfsMount {
 public:
  // Runs `tensorfs SOURCE MOUNTPOINT -f ARGS...` (with `env` added to the
  // environment) and waits up to kHang for the mount. Returns nullptr and sets
  // *error (with tensorfs's output) on failure.
  static std::unique_ptr<TensorfsMount> Start(const std::string& source, const std::vector<std::string>& args,
                                              std::string* error, const std::vector<std::string>& env = {});
  // Runs `tensorfs SOURCE MOUNTPOINT -f ARGS...` on `mountpoint` ("" for a
  // fresh directory) and returns at once: for tests that watch start-up
  // themselves (systemd's notifications, a dead mount point recovered).
  static std::unique_ptr<TensorfsMount> Spawn(const std::string& source, const std::string& mountpoint,
                                              const std::vector<std::string>& args,
                                              const std::vector<std::string>& env = {});
  ~TensorfsMount();

  const std::string& path() const { return path_; }
  pid_t pid() const { return pid_; }
  // Sends `sig` and waits, up to `timeout`, for the end described above.
  ::testing::AssertionResult StopWith(int sig, std::chrono::milliseconds timeout = kHang);
  // Unmounts with fusermount3 -u and waits for exit status 0.
  ::testing::AssertionResult Unmount();
  // What tensorfs printed so far.
  std::string Log() const;

 private:
  explicit TensorfsMount(const std::string& mountpoint);
  // Waits up to `timeout` for the process to end with `want` (a waitpid()
  // status) after `why`; a hang kills it. Reports how it went.
  ::testing::AssertionResult WaitEnd(int want, const std::string& why, std::chrono::milliseconds timeout);

  TempDir scratch_;   // the log, and the mount point unless one was given
  std::string path_;  // the mount point
  pid_t pid_ = -1;
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_MOUNT_FIXTURE_H_
