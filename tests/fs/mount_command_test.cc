// mount(8) and fstab: util-linux's mount runs /sbin/mount.tensorfs, the tensorfs
// binary under the helper's name. Each test runs in a mount namespace of its
// own (the test sandbox), where an overlay on /sbin's directory adds
// mount.tensorfs, a link to the built binary: nobody else sees it, a helper
// installed on the machine is hidden, not touched, and the overlay goes with
// the namespace however the test ends.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
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

// The /proc/mounts line of `path`, or "".
std::string ProcMountsLine(const std::string& path) {
  std::ifstream in("/proc/mounts");
  std::string line;
  while (std::getline(in, line)) {
    if (line.find(" " + path + " ") != std::string::npos) return line;
  }
  return "";
}

// Unmounts with umount(8) and waits for the background tensorfs to exit (the
// test sandbox checks how it ended).
void Umount(const std::string& path, const std::string& source) {
  auto result = RunCommand("umount " + path);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_FALSE(IsMounted(path));
  EXPECT_TRUE(testing::WaitUntil(
      [&] { return RunCommand("pgrep -f 'mount[.]tensorfs " + source + " '").exit_code != 0; },
      "tensorfs to exit after umount"));
}

class MountCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(testing::SandboxDir(), "") << "these tests change /sbin in a mount namespace of their own: run them "
                                            "through ctest (the test sandbox), as root";
    const std::string dir = fsys::canonical(fsys::path(kHelper).parent_path()).string();  // /usr/sbin
    const std::string layer = overlay_.path();
    ASSERT_EQ(::mount("tensorfs-test", layer.c_str(), "tmpfs", 0, "mode=0755"), 0) << std::strerror(errno);
    fsys::create_directories(layer + "/upper");
    fsys::create_directories(layer + "/work");
    const std::string data = "lowerdir=" + dir + ",upperdir=" + layer + "/upper,workdir=" + layer + "/work";
    ASSERT_EQ(::mount("overlay", dir.c_str(), "overlay", 0, data.c_str()), 0) << dir << ": " << std::strerror(errno);
    ::unlink(kHelper);  // one installed on the machine, hidden in this namespace only
    ASSERT_EQ(::symlink(TensorfsBinary().c_str(), kHelper), 0) << std::strerror(errno);
    WriteFile(src_.path() + "/llama/model.safetensors", std::string(3 << 20, 'w'));
    WriteFile(src_.path() + "/README.txt", "a checkpoint\n");
  }
  void TearDown() override {
    if (IsMounted(mnt_.path())) (void)RunCommand("umount -l " + mnt_.path());
  }

  TempDir overlay_, src_, mnt_;
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
  // The fstab line of docs/CONFIGURATION.md, with a local source and this test's mount point.
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

}  // namespace
}  // namespace tensorfs
