#include "core/options/memory_limit.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/options/mount_options.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::tensorfs::testing::TempDir;
using ::tensorfs::testing::WriteFile;

constexpr uint64_t kMiB = 1ull << 20;

// A fake /proc/self/cgroup and /proc/self/mountinfo, and a fake cgroup tree
// mounted (so says the fake mountinfo) at dir/cg.
class CgroupFiles {
 public:
  CgroupFiles(const std::string& proc_cgroup, bool v1) {
    paths_.proc_self_cgroup = dir_.path() + "/cgroup";
    paths_.proc_self_mountinfo = dir_.path() + "/mountinfo";
    WriteFile(paths_.proc_self_cgroup, proc_cgroup);
    std::string mountinfo = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n";
    if (v1) {
      mountinfo += "32 31 0:29 / " + dir_.path() + "/cpu rw,relatime - cgroup cgroup rw,cpu\n";
      mountinfo += "35 31 0:32 / " + root() + " rw,relatime - cgroup cgroup rw,memory\n";
      mountinfo += "41 31 0:38 / " + dir_.path() + "/unified rw,relatime - cgroup2 cgroup2 rw\n";
    } else {
      mountinfo += "41 31 0:38 / " + root() + " rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
    }
    WriteFile(paths_.proc_self_mountinfo, mountinfo);
  }
  std::string root() const { return dir_.path() + "/cg"; }
  void Set(const std::string& relative_file, const std::string& value) { WriteFile(root() + relative_file, value + "\n"); }
  const CgroupPaths& paths() const { return paths_; }

 private:
  TempDir dir_;
  CgroupPaths paths_;
};

TEST(CgroupMemoryLimitTest, V2MemoryMaxOfTheProcessCgroupIsFound) {
  CgroupFiles files("0::/kubepods/pod1/ctr\n", /*v1=*/false);
  files.Set("/kubepods/pod1/ctr/memory.max", "536870912");
  files.Set("/kubepods/pod1/memory.max", "max");
  files.Set("/memory.max", "max");
  std::optional<MemoryLimit> limit = FindCgroupMemoryLimit(files.paths());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 512 * kMiB);
  EXPECT_EQ(limit->file, files.root() + "/kubepods/pod1/ctr/memory.max");
}

TEST(CgroupMemoryLimitTest, AnAncestorsSmallerLimitApplies) {
  CgroupFiles files("0::/kubepods/pod1/ctr\n", /*v1=*/false);
  files.Set("/kubepods/pod1/ctr/memory.max", "max");
  files.Set("/kubepods/pod1/memory.max", "1073741824");
  files.Set("/kubepods/memory.max", "4294967296");
  std::optional<MemoryLimit> limit = FindCgroupMemoryLimit(files.paths());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 1024 * kMiB);
  EXPECT_EQ(limit->file, files.root() + "/kubepods/pod1/memory.max");
}

TEST(CgroupMemoryLimitTest, InACgroupNamespaceTheRootIsTheContainer) {
  CgroupFiles files("0::/\n", /*v1=*/false);
  files.Set("/memory.max", "268435456");
  std::optional<MemoryLimit> limit = FindCgroupMemoryLimit(files.paths());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 256 * kMiB);
}

TEST(CgroupMemoryLimitTest, MaxEverywhereIsNoLimit) {
  CgroupFiles files("0::/a/b\n", /*v1=*/false);
  files.Set("/a/b/memory.max", "max");
  files.Set("/a/memory.max", "max");
  EXPECT_FALSE(FindCgroupMemoryLimit(files.paths()).has_value());
}

TEST(CgroupMemoryLimitTest, MissingFilesAreNoLimit) {
  EXPECT_FALSE(FindCgroupMemoryLimit(CgroupPaths{.proc_self_cgroup = "/nonexistent/cgroup",
                                                 .proc_self_mountinfo = "/nonexistent/mountinfo"})
                   .has_value());
  CgroupFiles files("0::/a\n", /*v1=*/false);  // no memory.max files at all
  EXPECT_FALSE(FindCgroupMemoryLimit(files.paths()).has_value());
}

TEST(CgroupMemoryLimitTest, V1MemoryControllerIsReadOnHybridHosts) {
  CgroupFiles files("4:memory:/docker/abc\n1:cpu:/\n0::/\n", /*v1=*/true);
  files.Set("/docker/abc/memory.limit_in_bytes", "805306368");
  files.Set("/docker/memory.limit_in_bytes", "9223372036854771712");  // v1's "no limit"
  std::optional<MemoryLimit> limit = FindCgroupMemoryLimit(files.paths());
  ASSERT_TRUE(limit.has_value());
  EXPECT_EQ(limit->bytes, 768 * kMiB);
  EXPECT_EQ(limit->file, files.root() + "/docker/abc/memory.limit_in_bytes");
}

TEST(FitCacheToMemoryLimitTest, DefaultCacheTakesThreeQuartersOfTheLimitLessOverhead) {
  MountOptions options;
  StatusOr<std::string> note = FitCacheToMemoryLimit(options, MemoryLimit{512 * kMiB, "/cg/memory.max"});
  ASSERT_TRUE(note.ok()) << note.status().ToString();
  EXPECT_EQ(options.engine.cache_size, 288 * kMiB);  // (512 - 128) x 3/4
  EXPECT_THAT(*note, HasSubstr("cache_size=288M"));
  EXPECT_THAT(*note, HasSubstr("/cg/memory.max"));
  // The engine's other defaults then fit the smaller cache.
  ASSERT_TRUE(FitEngineToCache(options).ok());
  EXPECT_TRUE(options.engine.Validate().ok());
  EXPECT_LE(options.engine.cache_size + kMountOverhead, 512 * kMiB);
}

TEST(FitCacheToMemoryLimitTest, AGivenCacheSizeThatFitsIsKept) {
  MountOptions options;
  ASSERT_TRUE(ApplyMountOption(options, "cache_size", "384M").ok());  // 512 - 128: the most that fits
  StatusOr<std::string> note = FitCacheToMemoryLimit(options, MemoryLimit{512 * kMiB, "/cg/memory.max"});
  ASSERT_TRUE(note.ok()) << note.status().ToString();
  EXPECT_EQ(*note, "");
  EXPECT_EQ(options.engine.cache_size, 384 * kMiB);
}

TEST(FitCacheToMemoryLimitTest, AGivenCacheSizeOverTheLimitIsRefusedSayingWhatFits) {
  MountOptions options;
  ASSERT_TRUE(ApplyMountOption(options, "cache_size", "1G").ok());
  Status s = FitCacheToMemoryLimit(options, MemoryLimit{512 * kMiB, "/cg/memory.max"}).status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cache_size=1024M does not fit the memory limit of this cgroup (512 MiB, "
                                     "/cg/memory.max)"));
  EXPECT_THAT(s.message(), HasSubstr("set cache_size to at most 384M"));
  EXPECT_THAT(s.message(), HasSubstr("or raise the container's memory limit"));
}

TEST(FitCacheToMemoryLimitTest, ALargeLimitOrNoneKeepsTheDefault) {
  MountOptions options;
  const uint64_t default_cache = options.engine.cache_size;
  EXPECT_EQ(FitCacheToMemoryLimit(options, MemoryLimit{64ull << 30, "/cg/memory.max"}).value(), "");
  EXPECT_EQ(FitCacheToMemoryLimit(options, std::nullopt).value(), "");
  EXPECT_EQ(options.engine.cache_size, default_cache);
}

TEST(FitCacheToMemoryLimitTest, ALimitTooSmallSaysWhatToChange) {
  MountOptions options;
  Status s = FitCacheToMemoryLimit(options, MemoryLimit{140 * kMiB, "/cg/memory.max"}).status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("140 MiB"));
  EXPECT_THAT(s.message(), HasSubstr("raise the container's memory limit, or set cache_size"));
}

}  // namespace
}  // namespace tensorfs
