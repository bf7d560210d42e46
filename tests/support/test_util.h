// The helpers the tests share, one copy each: temporary directories, files and
// bytes, shell commands, waiting on an event, and the data a suite generates
// once per test run.
#ifndef TENSORFS_TESTS_SUPPORT_TEST_UTIL_H_
#define TENSORFS_TESTS_SUPPORT_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <thread>

#include "tests/support/daemon_check.h"

namespace tensorfs::testing {

// Whether this build runs under AddressSanitizer (GCC and clang 16 define
// __SANITIZE_ADDRESS__; clang 14 only answers __has_feature): its quarantine
// and shadow memory are no part of a process's own memory bound.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

// How long a test waits for something that happens unless the code hangs.
inline constexpr std::chrono::seconds kHang{kHangSeconds};

// A fresh directory under /tmp, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

struct CommandResult {
  int exit_code = -1;  // -1: killed by a signal
  std::string output;  // stdout and stderr together
};
// Runs a shell command line and captures its output.
CommandResult RunCommand(const std::string& command);

// A whole file's bytes ("" if it cannot be read).
std::string ReadWhole(const std::string& path);
// Reads a whole file with read(2) into *out; returns 0, or the errno that
// open or read failed with.
int ReadFile(const std::string& path, std::string* out);
// Creates or replaces `path` (and its directories) holding `bytes`, with
// permissions `mode`.
void WriteFile(const std::string& path, const std::string& bytes, mode_t mode = 0644);
// Equal bytes, or where they first differ (never the whole contents).
::testing::AssertionResult SameBytes(const std::string& got, const std::string& want);
// `n` pseudo-random bytes, the same for the same seed.
std::string RandomBytes(size_t n, uint64_t seed);
// A field of /proc/PID/status or /proc/PID/io ("VmHWM" in KiB, "write_bytes");
// -1 if absent.
int64_t ProcField(pid_t pid, const std::string& file, const std::string& field);

// Polls `done` (after 1 ms, then backing off to every 20 ms) until it holds. After `timeout` it fails, naming
// `what`: the test waits on an event, and the timeout only catches a hang, so
// a caller must check the result (ASSERT_TRUE) before it goes on.
template <typename Predicate>
[[nodiscard]] ::testing::AssertionResult WaitUntil(Predicate done, std::string_view what,
                                                   std::chrono::milliseconds timeout = kHang) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::chrono::milliseconds pause(1);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) {
      return ::testing::AssertionFailure() << "timed out after " << timeout.count() / 1000.0
                                           << " s waiting for " << what;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(20));
  }
  return ::testing::AssertionSuccess();
}

// Data generated once per test run and shared, read-only, by every test that
// asks for the same `key` (say "gcs_mount_test/llama-2x256"; the key names
// what `make` writes, so two callers with one key must make the same thing).
// The first caller runs `make(dir)` on an empty directory; the others, in this
// process or in another (ctest runs each test in its own), wait for it and get
// the same directory. The cache is in the build tree and is emptied at the
// start of each ctest run (the test "testdata_cache_reset"), so a changed
// generator is never served stale. A test must not change what it gets: one
// that modifies objects copies them first.
const std::string& SharedData(const std::string& key, const std::function<void(const std::string& dir)>& make);

// A test that needs a kernel feature (not a package) which this machine's
// kernel lacks is not run, and says so in one line that the suite's summary
// lists apart, as neither a pass nor a failure (docs/design/testing.md):
//   GTEST_SKIP() << NotRunForKernel("CONFIG_X", "what this machine has");
// prints "NOT RUN: Suite.Test: needs CONFIG_X (what this machine has)". Only
// such a skip passes test_main.cc's rule that a skip fails.
inline constexpr std::string_view kNotRunPrefix = "NOT RUN: ";
std::string NotRunForKernel(std::string_view feature, std::string_view evidence);

// The most pages one FUSE request may carry on this kernel
// (/proc/sys/fs/fuse/max_pages_limit; 256 on kernels without the setting).
long FuseMaxPagesLimit();

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_TEST_UTIL_H_
