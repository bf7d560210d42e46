// tensorfs serving a /dev/fuse descriptor that a parent mounted and handed over
// as /dev/fd/N (tests/support/fuse_fd_parent.py, as a CSI node plugin does),
// against the project's GCS test server: the bytes equal the source, and the
// life cycle a supervisor relies on: exit 0 when the parent unmounts, exit 0 on
// SIGTERM with fetches in flight, a start-up failure's reason as the last
// stderr line and in --error-file, the kernel's INIT and the root's attributes
// answered before the source is reached, --ready-file once it is.
//
// No wall-clock thresholds: every wait has a generous hang guard and the
// durations are printed.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/served_data_test.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;
using testing::GcsTestServer;
using testing::IsMounted;
using testing::ReadWhole;
using testing::TensorfsBinary;

constexpr auto kHangGuard = std::chrono::seconds(60);

double MillisSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

::testing::AssertionResult WaitForFile(const std::string& path, std::chrono::seconds guard) {
  return testing::WaitUntil([&] { return fsys::exists(path); }, path, guard);
}

// The exit status of `pid` (128+SIG for a signal), or nullopt if it is still
// running after `guard`.
std::optional<int> WaitForExit(pid_t pid, std::chrono::seconds guard) {
  const auto deadline = Clock::now() + guard;
  while (Clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return std::nullopt;
}

std::string LastLine(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

class FdMountTest : public testing::ServedDataTest<FdMountTest> {
 public:
  static constexpr char kDataKey[] = "fd_mount_test/llama-2x256";
  static void MakeData(const std::string& dir) {
    testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 2, .hidden = 256, .intermediate = 512,
                            .vocab = 2048, .dtype = Dtype::BF16};
    auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = dir + "/ckpt/llama"});
    ASSERT_TRUE(written.ok()) << written.status().ToString();
  }

 protected:
  // A tensorfs still serving ends as a parent ends it: the parent unmounts,
  // and it must exit 0 (the parent's status is tensorfs's).
  void TearDown() override {
    if (parent_ > 0) {
      const pid_t tensorfs = TensorfsPid();
      if (IsMounted(mnt_.path())) ::umount2(mnt_.path().c_str(), 0);
      std::optional<int> rc = WaitForParent();
      if (!rc) {
        ADD_FAILURE() << "HANG: tensorfs still runs " << kHangGuard.count() << " s after the parent unmounted; "
                      << "its threads:\n" << testing::StacksOf(tensorfs) << Log();
        if (tensorfs > 0) ::kill(tensorfs, SIGKILL);
        ::kill(parent_, SIGKILL);
        ::waitpid(parent_, nullptr, 0);
      } else {
        EXPECT_EQ(*rc, 0) << "after the parent unmounted: " << Log();
      }
    }
    if (IsMounted(mnt_.path())) ::umount2(mnt_.path().c_str(), MNT_DETACH);
    ExpectNoSanitizerReport();
  }
  // tensorfs wrote no sanitizer report (the test sandbox collects them).
  void ExpectNoSanitizerReport() {
    for (const std::string& report : testing::SanitizerReports(testing::SandboxDir(), TensorfsPid())) {
      ADD_FAILURE() << "SANITIZER REPORT of tensorfs " << report;
    }
  }

  std::string Scratch(const std::string& name) const { return scratch_.path() + "/" + name; }
  std::string Mnt(const std::string& rel) const { return mnt_.path() + "/" + rel; }

  // Runs the parent, which mounts mnt_ and runs `tensorfs SOURCE /dev/fd/N -f
  // -o anonymous,endpoint=...,ready_file=...,error_file=...[,OPTIONS]`.
  void StartParent(const std::string& source, const std::string& options = "") {
    std::string o = "anonymous,endpoint=" + server_->endpoint() + ",ready_file=" + Scratch("ready") +
                    ",error_file=" + Scratch("error");
    if (!options.empty()) o += "," + options;
    std::vector<std::string> args = {"/usr/bin/python3", std::string(TENSORFS_SOURCE_DIR) + "/tests/support/fuse_fd_parent.py",
                                      mnt_.path(), "--pid-file", Scratch("pid"), "--", TensorfsBinary(), source,
                                      "/dev/fd/{fd}", "-f", "-o", o};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const std::string log = Scratch("log");
    parent_ = ::fork();
    if (parent_ == 0) {
      int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ASSERT_TRUE(testing::WaitUntil([&] { return fsys::exists(Scratch("pid")); }, "the parent's pid file")) << Log();
  }
  pid_t TensorfsPid() const {
    std::ifstream in(Scratch("pid"));
    pid_t pid = -1;
    in >> pid;
    return pid;
  }
  std::string Log() const { return ReadWhole(Scratch("log")); }
  // The parent's exit status, which is tensorfs's.
  std::optional<int> WaitForParent() {
    std::optional<int> rc = WaitForExit(parent_, kHangGuard);
    if (rc) parent_ = -1;
    return rc;
  }

  testing::TempDir mnt_;
  testing::TempDir scratch_;
  pid_t parent_ = -1;
};


TEST_F(FdMountTest, ServesTheHandedOverDescriptorAndExitsZeroWhenTheParentUnmounts) {
  StartParent("gs://ckpt");
  ASSERT_TRUE(WaitForFile(Scratch("ready"), kHangGuard)) << Log();
  int files = 0;
  for (const auto& entry : fsys::directory_iterator(data_dir_ + "/ckpt/llama")) {
    const std::string name = entry.path().filename();
    EXPECT_TRUE(testing::SameBytes(ReadWhole(Mnt("llama/" + name)), ReadWhole(entry.path()))) << name;
    ++files;
  }
  EXPECT_GE(files, 3);
  const auto start = Clock::now();
  ASSERT_EQ(::umount2(mnt_.path().c_str(), 0), 0) << std::strerror(errno);
  std::optional<int> rc = WaitForParent();
  ASSERT_TRUE(rc.has_value()) << "tensorfs still runs " << kHangGuard.count() << " s after the unmount: " << Log();
  std::printf("tensorfs exited %.0f ms after the parent unmounted\n", MillisSince(start));
  EXPECT_EQ(*rc, 0) << Log();
  EXPECT_FALSE(fsys::exists(Scratch("error"))) << ReadWhole(Scratch("error"));
}

TEST_F(FdMountTest, SigtermWithFetchesInFlightExitsZero) {
  StartParent("gs://ckpt");
  ASSERT_TRUE(WaitForFile(Scratch("ready"), kHangGuard)) << Log();
  // 200 KB/s: the shard's range requests stay in flight for seconds.
  ASSERT_TRUE(server_->SetShaping(0, 0, 200e3));
  ASSERT_TRUE(server_->ResetStats());
  const std::string shard = Mnt("llama/model-00001-of-00002.safetensors");
  std::thread reader([shard] { (void)ReadWhole(shard); });  // ends with an error once tensorfs is gone
  ASSERT_TRUE(testing::WaitUntil([&] { return server_->Stats().value("media_requests", 0) > 0; }, "a fetch to start"))
      << Log();
  const auto start = Clock::now();
  ASSERT_EQ(::kill(TensorfsPid(), SIGTERM), 0);
  std::optional<int> rc = WaitForParent();  // the parent then unmounts, which ends the reader
  reader.join();
  ASSERT_TRUE(rc.has_value()) << "tensorfs still runs " << kHangGuard.count() << " s after SIGTERM: " << Log();
  std::printf("tensorfs exited %.0f ms after SIGTERM with fetches in flight\n", MillisSince(start));
  EXPECT_EQ(*rc, 0) << Log();
}

TEST_F(FdMountTest, InitAndRootAttributesAreAnsweredBeforeTheSourceIsReached) {
  server_->Stop();
  StartParent("gs://ckpt", "startup_deadline=300");
  // The server is down: only the FUSE session can answer this stat.
  auto stat_root = std::async(std::launch::async, [this] {
    struct stat st;
    return ::stat(mnt_.path().c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  });
  ASSERT_EQ(stat_root.wait_for(kHangGuard), std::future_status::ready) << "the root's attributes wait on the source";
  EXPECT_TRUE(stat_root.get());
  EXPECT_FALSE(fsys::exists(Scratch("ready"))) << "ready before the source answered";
  const auto start = Clock::now();
  ASSERT_TRUE(server_->Restart());
  ASSERT_TRUE(WaitForFile(Scratch("ready"), kHangGuard)) << Log();
  std::printf("ready %.0f ms after the server came back\n", MillisSince(start));
  EXPECT_EQ(ReadWhole(Mnt("llama/config.json")), ReadWhole(data_dir_ + "/ckpt/llama/config.json"));
}

TEST_F(FdMountTest, StartupFailureExitsWithTheReasonLastOnStderrAndInTheErrorFile) {
  StartParent("gs://no-such-bucket");
  std::optional<int> rc = WaitForParent();
  ASSERT_TRUE(rc.has_value()) << Log();
  EXPECT_EQ(*rc, 4) << "a missing bucket is permanent: " << Log();
  const std::string last = LastLine(Log());
  EXPECT_THAT(last, HasSubstr("bucket gs://no-such-bucket not found")) << Log();
  ASSERT_TRUE(last.starts_with("tensorfs: ")) << last;
  EXPECT_EQ(ReadWhole(Scratch("error")), last.substr(std::string("tensorfs: ").size()) + "\n");
  EXPECT_FALSE(fsys::exists(Scratch("ready")));
}

TEST(FdModeCommandTest, DescriptorThatIsNotDevFuseIsRefused) {
  testing::TempDir src;
  // Descriptor 0 is /dev/null here.
  testing::CommandResult result =
      testing::RunCommand(TensorfsBinary() + " " + src.path() + " /dev/fd/0 -f </dev/null");
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_THAT(LastLine(result.output), HasSubstr("/dev/fd/0 is not /dev/fuse")) << result.output;
  result = testing::RunCommand(TensorfsBinary() + " " + src.path() + " /dev/fd/9 -f 9</dev/fuse");
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_THAT(LastLine(result.output), HasSubstr("not opened read-write")) << result.output;
}

}  // namespace
}  // namespace tensorfs
