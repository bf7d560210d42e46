// The mount's kernel readahead is the value asked for: tensorfs' read_ahead=
// and memfs_ceiling's --read-ahead-kb, read back from the mount's
// /sys/class/bdi/MAJOR:MINOR/read_ahead_kb once the kernel has taken the INIT
// reply (which would lower it to the reply's max_readahead). A value the kernel
// does not keep as asked is a warning naming the value in force.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using testing::ReadWhole;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsMount;

// The readahead in force on the mount at `mountpoint`, in KiB; -1 if unknown.
// stat() of the mount's root waits for INIT to be answered, so what is read
// after it is what the kernel kept.
long ReadAheadKib(const std::string& mountpoint) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) return -1;
  std::ifstream in("/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) +
                   "/read_ahead_kb");
  long kib = -1;
  in >> kib;
  return kib;
}

class ReadAheadMountTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::WriteFile(src_.path() + "/f.bin", std::string(1 << 20, 'x')); }
  std::unique_ptr<TensorfsMount> Mount(const std::vector<std::string>& args) {
    std::string error;
    auto mount = TensorfsMount::Start(src_.path(), args, &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }
  TempDir src_;
};

TEST_F(ReadAheadMountTest, ReadAheadOptionIsInForceAfterInit) {
  auto mount = Mount({"-o", "read_ahead=16M"});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ReadWhole(mount->path() + "/f.bin").size(), 1u << 20);
  EXPECT_EQ(ReadAheadKib(mount->path()), 16384) << mount->Log();
}

TEST_F(ReadAheadMountTest, LargerThanOneReadIsKeptToo) {
  auto mount = Mount({"--read-ahead", "64M"});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ReadAheadKib(mount->path()), 65536) << mount->Log();
}

TEST_F(ReadAheadMountTest, WithoutTheOptionTheKernelDefaultStays) {
  auto mount = Mount({});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ReadAheadKib(mount->path()), 128) << mount->Log();
}

TEST_F(ReadAheadMountTest, ValueTheKernelRoundsIsAWarningNamingTheValueInForce) {
  // The kernel keeps whole pages: 6 KiB becomes 4.
  auto mount = Mount({"-o", "read_ahead=6K"});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ReadAheadKib(mount->path()), 4);
  EXPECT_THAT(mount->Log(), HasSubstr("read_ahead=6 KiB: the kernel keeps")) << mount->Log();
  EXPECT_THAT(mount->Log(), HasSubstr("at 4 KiB")) << mount->Log();
}

#ifdef TENSORFS_MEMFS_CEILING
TEST_F(ReadAheadMountTest, MemfsCeilingReadAheadIsInForceAfterInit) {
  TempDir mnt;
  const std::string command = std::string(TENSORFS_MEMFS_CEILING) + " --read-ahead-kb 16384 " + mnt.path() + " " +
                              src_.path() + "/f.bin";
  auto result = RunCommand(command);  // daemonizes once mounted
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(ReadWhole(mnt.path() + "/f.bin").size(), 1u << 20);
  EXPECT_EQ(ReadAheadKib(mnt.path()), 16384) << result.output;
  EXPECT_EQ(RunCommand("fusermount3 -u " + mnt.path()).exit_code, 0);
}
#endif

}  // namespace
}  // namespace tensorfs
