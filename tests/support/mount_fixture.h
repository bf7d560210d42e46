// Test support for real mounts: starts the tensorfs binary in the foreground on
// a fresh mount point, waits until the kernel shows the mount, and always
// unmounts and reaps it on destruction (so a failed ASSERT leaves no stale mount).
#ifndef TENSORFS_TESTS_SUPPORT_MOUNT_FIXTURE_H_
#define TENSORFS_TESTS_SUPPORT_MOUNT_FIXTURE_H_

#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace tensorfs::testing {

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
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
// Runs a shell command line and captures its output.
CommandResult RunCommand(const std::string& command);

// A whole file's bytes ("" if it cannot be read).
std::string ReadWhole(const std::string& path);
// Creates `path` (and its directories) holding `bytes`.
void WriteFile(const std::string& path, const std::string& bytes);
// Equal bytes, or where they first differ (never the whole contents).
::testing::AssertionResult SameBytes(const std::string& got, const std::string& want);

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

class TensorfsMount {
 public:
  // Runs `tensorfs SOURCE MOUNTPOINT -f ARGS...` and waits up to 60 s for the
  // mount. Returns nullptr and sets *error (with tensorfs's output) on failure.
  static std::unique_ptr<TensorfsMount> Start(const std::string& source,
                                              const std::vector<std::string>& args, std::string* error);
  ~TensorfsMount();

  const std::string& path() const { return mountpoint_.path(); }
  pid_t pid() const { return pid_; }
  // Sends `sig`; true if the process exited and the mount is gone within `timeout`.
  bool StopWith(int sig, std::chrono::milliseconds timeout);
  // What tensorfs printed so far.
  std::string Log() const;

 private:
  TensorfsMount() = default;
  TempDir mountpoint_;
  TempDir scratch_;
  pid_t pid_ = -1;
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_MOUNT_FIXTURE_H_
