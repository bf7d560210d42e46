// mount(8) and fstab: util-linux's mount runs /sbin/mount.tensorfs, the tensorfs
// binary under the helper's name. For the test's duration /sbin/mount.tensorfs
// is a symbolic link to the built binary (created if absent, removed after);
// the tests hold the ctest resource lock "sbin_mount_tensorfs" and, against
// test runs in other build directories, an flock on kMachineLock (which the
// .deb test, installing the real helper, takes too). Holding that lock, a link
// to another build's binary is what a killed test run left: it is replaced. A
// helper installed by a package (a file, or a link into /usr) fails the tests
// rather than skipping them: a machine that runs the suite must not have one.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadWhole;
using testing::WriteFile;
using testing::SameBytes;
using testing::IsMounted;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsBinary;

constexpr char kHelper[] = "/sbin/mount.tensorfs";
constexpr char kMachineLock[] = "/run/lock/tensorfs-mount-helper-test.lock";

// The /proc/mounts line of `path`, or "".
std::string ProcMountsLine(const std::string& path) {
  std::ifstream in("/proc/mounts");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" " + path + " ") != std::string::npos) return line;
  }
  return "";
}

// Unmounts with umount(8) and waits for the background tensorfs to exit.
void Umount(const std::string& path, const std::string& source) {
  auto result = RunCommand("umount " + path);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_FALSE(IsMounted(path));
  // 60 s only catch a hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (RunCommand("pgrep -f 'mount[.]tensorfs " + source + " '").exit_code != 0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ADD_FAILURE() << "tensorfs still runs 60 s after umount";
}

class MountCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    lock_fd_ = ::open(kMachineLock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    ASSERT_GE(lock_fd_, 0) << kMachineLock << ": " << std::strerror(errno);
    ASSERT_EQ(::flock(lock_fd_, LOCK_EX), 0) << std::strerror(errno);
    std::error_code ec;
    if (fsys::is_symlink(kHelper, ec)) {
      const fsys::path target = fsys::read_symlink(kHelper, ec);
      if (target.string().rfind("/usr/", 0) == 0) {
        FAIL() << kHelper << " -> " << target.string() << " belongs to an installed tensorfs package: "
               << "remove the package (or the link) before running the tests";
      }
      if (target != TensorfsBinary()) {
        // Under the machine lock no other test uses it: a killed run left it.
        std::cerr << kHelper << " -> " << target.string() << " was left by another test run: replacing it\n";
        ASSERT_EQ(::unlink(kHelper), 0) << std::strerror(errno);
        ASSERT_EQ(::symlink(TensorfsBinary().c_str(), kHelper), 0) << std::strerror(errno);
      }
    } else if (fsys::exists(kHelper, ec)) {
      FAIL() << kHelper << " is a file, not this build's link (an installed tensorfs package?): "
             << "remove it before running the tests";
    } else {
      ASSERT_EQ(::symlink(TensorfsBinary().c_str(), kHelper), 0) << std::strerror(errno);
    }
    created_ = true;
    WriteFile(src_.path() + "/llama/model.safetensors", std::string(3 << 20, 'w'));
    WriteFile(src_.path() + "/README.txt", "a checkpoint\n");
  }
  void TearDown() override {
    if (IsMounted(mnt_.path())) (void)RunCommand("umount -l " + mnt_.path());
    if (created_) ::unlink(kHelper);
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
  }

  int lock_fd_ = -1;
  bool created_ = false;
  TempDir src_, mnt_;
};

TEST_F(MountCommandTest, MountTypeTensorfsWithFstabOptions) {
  auto result = RunCommand("mount -t tensorfs " + src_.path() + " " + mnt_.path() +
                           " -o ro,_netdev,nofail,x-systemd.automount");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "") << "nothing to say when all is well";
  std::string line = ProcMountsLine(mnt_.path());
  EXPECT_THAT(line, HasSubstr(" fuse.tensorfs ro,"));
  EXPECT_THAT(line, ::testing::StartsWith(src_.path() + " ")) << "the source is the fsname";
  EXPECT_TRUE(SameBytes(ReadWhole(mnt_.path() + "/llama/model.safetensors"), ReadWhole(src_.path() + "/llama/model.safetensors")));
  EXPECT_EQ(ReadWhole(mnt_.path() + "/README.txt"), "a checkpoint\n");
  Umount(mnt_.path(), src_.path());
}

TEST_F(MountCommandTest, PlainMountIsReadOnlyWithAWarning) {
  // mount(8) passes -o rw when ro is not given.
  auto result = RunCommand("mount -t tensorfs " + src_.path() + " " + mnt_.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(result.output, HasSubstr("read-only"));
  EXPECT_THAT(ProcMountsLine(mnt_.path()), HasSubstr(" fuse.tensorfs ro,"));
  std::ofstream out(mnt_.path() + "/README.txt");
  EXPECT_FALSE(out.is_open()) << "writes fail";
  EXPECT_EQ(::access((mnt_.path() + "/README.txt").c_str(), W_OK), -1);
  EXPECT_EQ(errno, EROFS);
  Umount(mnt_.path(), src_.path());
}

TEST_F(MountCommandTest, FstabLineFromTheReadmeMounts) {
  // The README's line, with a local source and this test's mount point.
  TempDir etc;
  std::ofstream(etc.path() + "/fstab") << "# tensorfs\n"
                                       << src_.path() << " " << mnt_.path()
                                       << " tensorfs ro,_netdev,nofail,x-systemd.automount,allow_other 0 0\n";
  auto result = RunCommand("mount -T " + etc.path() + "/fstab " + mnt_.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  std::string line = ProcMountsLine(mnt_.path());
  EXPECT_THAT(line, HasSubstr(" fuse.tensorfs ro,"));
  EXPECT_THAT(line, HasSubstr("allow_other"));
  EXPECT_EQ(ReadWhole(mnt_.path() + "/README.txt"), "a checkpoint\n");
  Umount(mnt_.path(), src_.path());
}

TEST_F(MountCommandTest, UnknownOptionFailsWithoutMounting) {
  auto result = RunCommand("mount -t tensorfs " + src_.path() + " " + mnt_.path() + " -o ro,turbo");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_THAT(result.output, HasSubstr("unknown option 'turbo'"));
  EXPECT_FALSE(IsMounted(mnt_.path()));
  auto sloppy = RunCommand("mount -s -t tensorfs " + src_.path() + " " + mnt_.path() + " -o ro,turbo");
  ASSERT_EQ(sloppy.exit_code, 0) << sloppy.output;
  EXPECT_THAT(sloppy.output, HasSubstr("'turbo'"));
  Umount(mnt_.path(), src_.path());
}

TEST_F(MountCommandTest, FakeMountChecksButDoesNotMount) {
  auto result = RunCommand(std::string(kHelper) + " " + src_.path() + " " + mnt_.path() + " -f -o ro");
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_FALSE(IsMounted(mnt_.path()));
  auto bad = RunCommand(std::string(kHelper) + " " + src_.path() + " /nonexistent/mnt -f -o ro");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.output, HasSubstr("mkdir -p /nonexistent/mnt"));
}

TEST_F(MountCommandTest, GsSourceThroughMount) {
  TempDir data;
  WriteFile(data.path() + "/ckpt/models/llama/model.safetensors", std::string(1 << 20, 'g'));
  std::string error;
  auto server = testing::GcsTestServer::Start({.data_dir = data.path()}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto result = RunCommand("mount -t tensorfs gs://ckpt/models " + mnt_.path() +
                           " -o ro,_netdev,anonymous,endpoint=" + server->endpoint());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(ProcMountsLine(mnt_.path()), ::testing::StartsWith("gs://ckpt/models "));
  EXPECT_TRUE(SameBytes(ReadWhole(mnt_.path() + "/llama/model.safetensors"), std::string(1 << 20, 'g')));
  Umount(mnt_.path(), "gs://ckpt/models");
}

TEST_F(MountCommandTest, S3SourceThroughMount) {
  TempDir data;
  WriteFile(data.path() + "/ckpt/models/llama/model.safetensors", std::string(1 << 20, 's'));
  std::string error;
  auto server = testing::GcsTestServer::Start({.data_dir = data.path()}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto result = RunCommand("mount -t tensorfs s3://ckpt/models " + mnt_.path() +
                           " -o ro,_netdev,no_sign_request,endpoint=" + server->endpoint());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_THAT(ProcMountsLine(mnt_.path()), ::testing::StartsWith("s3://ckpt/models "));
  EXPECT_TRUE(SameBytes(ReadWhole(mnt_.path() + "/llama/model.safetensors"), std::string(1 << 20, 's')));
  EXPECT_GE(server->Stats()["s3_requests"].get<int>(), 2) << "listed and read over S3";
  Umount(mnt_.path(), "s3://ckpt/models");
}

}  // namespace
}  // namespace tensorfs
