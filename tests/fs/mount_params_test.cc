#include "fs/mount_params.h"

#include <sys/mount.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

MountOptions Parsed(std::string_view list) {
  MountOptions options;
  EXPECT_TRUE(ApplyMountOptionList(options, list).ok()) << list;
  return options;
}

TEST(MountParamsTest, DefaultsAreReadOnlyWithTheSessionsMaxRead) {
  MountParams p = MountParamsFor(MountOptions{}, 0, 0);
  EXPECT_EQ(p.fstype, "fuse.tensorfs");
  EXPECT_EQ(p.flags, static_cast<unsigned long>(MS_NOSUID | MS_NODEV | MS_RDONLY));
  EXPECT_EQ(p.data, "rootmode=40000,user_id=0,group_id=0,default_permissions,max_read=1048576");
  EXPECT_EQ(p.read_ahead_kb, 128u);  // the kernel default: nothing known of the readers yet
}

TEST(MountParamsTest, AllowOtherAndReadAheadFollowTheOptions) {
  MountParams p = MountParamsFor(Parsed("allow_other,read_ahead=16M"), 65534, 65534);
  EXPECT_EQ(p.data, "rootmode=40000,user_id=65534,group_id=65534,default_permissions,max_read=1048576,allow_other");
  EXPECT_EQ(p.read_ahead_kb, 16384u);
}

TEST(MountParamsTest, AllowRootNeedsTheKernelsAllowOther) {
  EXPECT_THAT(MountParamsFor(Parsed("allow_root"), 0, 0).data, ::testing::EndsWith(",allow_other"));
}

TEST(MountParamsTest, ShardAsksForTheSliceReadahead) {
  EXPECT_EQ(MountParamsFor(Parsed("shard=1/4"), 0, 0).read_ahead_kb, 32u);
}

TEST(MountParamsTest, ShardZeroOfOneAsksForTheWholeReadersReadahead) {
  EXPECT_EQ(MountParamsFor(Parsed("shard=0/1"), 0, 0).read_ahead_kb, 1024u);
}

TEST(MountParamsTest, RenderedAsKeyValueLines) {
  std::string text = RenderMountParams(MountParamsFor(MountOptions{}, 0, 0));
  EXPECT_THAT(text, HasSubstr("\nfstype=fuse.tensorfs\n"));
  EXPECT_THAT(text, HasSubstr("\nflags=MS_NOSUID|MS_NODEV|MS_RDONLY\n"));
  EXPECT_THAT(text, HasSubstr("\ndata=rootmode=40000,"));
  EXPECT_THAT(text, HasSubstr("\nread_ahead_kb=128\n"));
}

TEST(KernelMountOptionsNoteTest, NothingWhenNoKernelSideOptionIsGiven) {
  EXPECT_EQ(KernelMountOptionsNote(Parsed("cache_size=1G,log_level=debug")), "");
}

TEST(KernelMountOptionsNoteTest, OneLineNamesEachOptionAndWhatTheParentSets) {
  std::string note = KernelMountOptionsNote(Parsed("allow_other,read_ahead=4M,ro"));
  EXPECT_THAT(note, Not(HasSubstr("\n")));
  EXPECT_THAT(note, HasSubstr("allow_other (put allow_other in the mount data)"));
  EXPECT_THAT(note, HasSubstr("read_ahead (write 4096 to the mount's /sys/class/bdi/MAJOR:MINOR/read_ahead_kb)"));
  EXPECT_THAT(note, HasSubstr("ro (mount with MS_RDONLY"));
  EXPECT_THAT(note, HasSubstr("tensorfs --print-mount-params"));
}

}  // namespace
}  // namespace tensorfs
