// The mount's kernel readahead is the value asked for (read_ahead=), read back
// from the mount's
// /sys/class/bdi/MAJOR:MINOR/read_ahead_kb once the kernel has taken the INIT
// reply (which would lower it to the reply's max_readahead). A value the kernel
// does not keep as asked is a warning naming the value in force.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/options/mount_options.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using testing::ReadWhole;
using testing::FuseConnectionSetting;
using testing::ReadAheadKib;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsMount;

class ReadAheadMountTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::WriteFile(src_.path() + "/f.bin", std::string(1 << 20, 'x')); }
  std::unique_ptr<TensorfsMount> Mount(const std::vector<std::string>& args) {
    std::string error;
    auto mount = TensorfsMount::Start(src_.path(), args, &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }
  // `tensorfs stats`' count of the files opened, by the readahead they were
  // opened at.
  static nlohmann::json OpenedAt(const std::string& mountpoint) {
    const nlohmann::json stats = testing::MountStats(mountpoint);
    return stats.is_object() ? stats.value("files_opened_by_read_ahead", nlohmann::json()) : nlohmann::json();
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

// A host that says it reads every tensor whole gets the whole readers'
// readahead from the first file on; one that says it reads slices, the
// slice readers'.
TEST_F(ReadAheadMountTest, ShardOptionSetsTheReadaheadBeforeTheFirstFile) {
  auto whole = Mount({"-o", "shard=0/1"});
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(ReadAheadKib(whole->path()), 1024) << whole->Log();
  EXPECT_EQ(ReadWhole(whole->path() + "/f.bin").size(), 1u << 20);
  EXPECT_EQ(OpenedAt(whole->path()), nlohmann::json({{"1048576", 1}}));
  auto slices = Mount({"-o", "shard=1/4"});
  ASSERT_NE(slices, nullptr);
  EXPECT_EQ(ReadAheadKib(slices->path()), 32) << slices->Log();
  EXPECT_EQ(ReadWhole(slices->path() + "/f.bin").size(), 1u << 20);
  EXPECT_EQ(ReadWhole(slices->path() + "/f.bin").size(), 1u << 20);
  EXPECT_EQ(OpenedAt(slices->path()), nlohmann::json({{"32768", 2}}));
}

// The stats count each file opened at the readahead it was opened with.
TEST_F(ReadAheadMountTest, StatsCountFilesOpenedByTheirReadahead) {
  auto mount = Mount({});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(OpenedAt(mount->path()), nlohmann::json::object());
  EXPECT_EQ(ReadWhole(mount->path() + "/f.bin").size(), 1u << 20);
  EXPECT_EQ(OpenedAt(mount->path()), nlohmann::json({{"131072", 1}}));
}

// While nothing is known of its readers, a shard of a checkpoint in several
// files is opened at half the kernel's default, a single-file checkpoint at
// the default; other files take the value in force. Opening alone (no read)
// tells the engine nothing of a reader, so nothing else moves the value.
TEST_F(ReadAheadMountTest, AShardOfSeveralIsOpenedAtHalfTheDefaultWhileTheReadersAreUnknown) {
  const testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 1, .hidden = 64, .intermediate = 128,
                                .vocab = 256, .dtype = Dtype::BF16};
  ASSERT_TRUE(testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = src_.path() + "/sharded"}).ok());
  ASSERT_TRUE(testing::WriteCheckpoint(spec, {.num_shards = 1, .dir = src_.path() + "/single"}).ok());
  auto mount = Mount({});
  ASSERT_NE(mount, nullptr);
  auto open_close = [&](const std::string& name) {
    const int fd = ::open((mount->path() + "/" + name).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << name << ": " << std::strerror(errno);
    ::close(fd);
  };
  open_close("sharded/model-00001-of-00002.safetensors");
  EXPECT_EQ(ReadAheadKib(mount->path()), 64) << mount->Log();
  EXPECT_EQ(OpenedAt(mount->path()), nlohmann::json({{"65536", 1}}));
  open_close("sharded/config.json");
  EXPECT_EQ(OpenedAt(mount->path()), nlohmann::json({{"65536", 2}}));
  open_close("single/model.safetensors");
  EXPECT_EQ(ReadAheadKib(mount->path()), 128) << mount->Log();
  EXPECT_EQ(OpenedAt(mount->path()), nlohmann::json({{"65536", 2}, {"131072", 1}}));
}

TEST_F(ReadAheadMountTest, ValueTheKernelRoundsIsAWarningNamingTheValueInForce) {
  // The kernel keeps whole pages: 6 KiB becomes 4.
  auto mount = Mount({"-o", "read_ahead=6K"});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(ReadAheadKib(mount->path()), 4);
  EXPECT_THAT(mount->Log(), HasSubstr("read_ahead=6 KiB: the kernel keeps")) << mount->Log();
  EXPECT_THAT(mount->Log(), HasSubstr("at 4 KiB")) << mount->Log();
}

// max_background and congestion_threshold reach the kernel in the INIT reply:
// by default derived from the CPUs, else as given.
TEST_F(ReadAheadMountTest, QueueLimitsFollowTheCpusByDefault) {
  auto mount = Mount({});
  ASSERT_NE(mount, nullptr);
  const int background = DefaultMaxBackground(UsableCpus());
  EXPECT_EQ(FuseConnectionSetting(mount->path(), "max_background"), background) << mount->Log();
  EXPECT_EQ(FuseConnectionSetting(mount->path(), "congestion_threshold"), background * 3 / 4) << mount->Log();
}

TEST_F(ReadAheadMountTest, QueueLimitsTakeTheOptions) {
  auto mount = Mount({"-o", "max_background=40,congestion_threshold=10"});
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ(FuseConnectionSetting(mount->path(), "max_background"), 40) << mount->Log();
  EXPECT_EQ(FuseConnectionSetting(mount->path(), "congestion_threshold"), 10) << mount->Log();
}


}  // namespace
}  // namespace tensorfs
