// The mount(8) helper's command line: what mount(8) and systemd pass, and what
// reaches tensorfs. The argument lists below are the ones util-linux 2.38's
// mount(8) was seen to pass for the commands in the comments.
#include "core/options/mount_helper.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/options/mount_options.h"

namespace tensorfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

StatusOr<MountHelperArgs> Parse(std::vector<std::string> args) { return ParseMountHelperArgs(args); }

std::string Filter(std::string_view list, bool sloppy = false) {
  std::vector<std::string> warnings;
  return FilterMountHelperOptions(list, sloppy, warnings);
}

TEST(MountHelperTest, RecognizesTheHelperNameOnly) {
  EXPECT_TRUE(IsMountHelperInvocation("/sbin/mount.tensorfs"));
  EXPECT_TRUE(IsMountHelperInvocation("/usr/sbin/mount.tensorfs"));
  EXPECT_TRUE(IsMountHelperInvocation("mount.tensorfs"));
  EXPECT_FALSE(IsMountHelperInvocation("tensorfs"));
  EXPECT_FALSE(IsMountHelperInvocation("/usr/bin/tensorfs"));
  EXPECT_FALSE(IsMountHelperInvocation("/sbin/mount.tensorfs2"));
  EXPECT_FALSE(IsMountHelperInvocation("/opt/mount.tensorfs/tensorfs"));
}

// mount -t tensorfs SRC DIR -o ro,_netdev,nofail,x-systemd.automount,allow_other,comment=x,noauto,user,defaults
TEST(MountHelperTest, DropsWhatMountAndSystemdAddAndKeepsTensorfsOptions) {
  auto args = Parse({"/data/ckpt", "/mnt/models", "-o",
                     "ro,noatime,nosuid,noexec,nodev,allow_other,_netdev,nofail,user"});
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_EQ(args->source, "/data/ckpt");
  EXPECT_EQ(args->mountpoint, "/mnt/models");
  EXPECT_EQ(args->options, "allow_other");
  EXPECT_FALSE(args->fake);
  EXPECT_THAT(args->warnings, IsEmpty());
}

TEST(MountHelperTest, DropsSystemdCommentAndAutomountOptions) {
  EXPECT_EQ(Filter("x-systemd.automount,x-systemd.requires=network-online.target,x-systemd.idle-timeout=600,"
                   "comment=systemd.automount,x-gvfs-show,defaults,auto,noauto,users,nouser,owner,group"),
            "");
}

TEST(MountHelperTest, DropsGenericMountFlagsThatChangeNothingOnTensorfs) {
  EXPECT_EQ(Filter("exec,noexec,suid,nosuid,dev,nodev,atime,noatime,relatime,norelatime,strictatime,"
                   "nodiratime,diratime,lazytime,sync,async,dirsync,iversion,mand,loud,silent,nosymfollow"),
            "");
}

// mount -t tensorfs SRC DIR: mount(8) passes "-o rw" whenever ro is not given.
TEST(MountHelperTest, ReadWriteIsMountedReadOnlyWithAWarning) {
  auto args = Parse({"/data/ckpt", "/mnt/models", "-o", "rw"});
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_EQ(args->options, "");
  ASSERT_EQ(args->warnings.size(), 1u);
  EXPECT_THAT(args->warnings[0], HasSubstr("read-only"));
  EXPECT_THAT(args->warnings[0], HasSubstr("-o ro"));

  auto w_flag = Parse({"/data/ckpt", "/mnt/models", "-w", "-o", "rw,allow_other"});
  ASSERT_TRUE(w_flag.ok());
  EXPECT_EQ(w_flag->options, "allow_other");
  EXPECT_EQ(w_flag->warnings.size(), 1u) << "one warning, not one per spelling";
}

TEST(MountHelperTest, ReadOnlyGivesNoWarning) {
  auto args = Parse({"gs://bucket/prefix", "/mnt/models", "-r", "-o", "ro,_netdev"});
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(args->source, "gs://bucket/prefix");
  EXPECT_EQ(args->options, "");
  EXPECT_THAT(args->warnings, IsEmpty());
}

// mount -f -v -t tensorfs gs://bucket/prefix DIR -o ro
TEST(MountHelperTest, FakeAndVerboseFlags) {
  auto args = Parse({"gs://bucket/prefix", "/mnt/m", "-f", "-v", "-o", "ro"});
  ASSERT_TRUE(args.ok());
  EXPECT_TRUE(args->fake);
  EXPECT_TRUE(args->verbose);
  auto combined = Parse({"gs://bucket/prefix", "/mnt/m", "-sfnv"});
  ASSERT_TRUE(combined.ok()) << combined.status().ToString();
  EXPECT_TRUE(combined->fake);
  EXPECT_TRUE(combined->verbose);
}

TEST(MountHelperTest, NoMtabAndTypeAreAccepted) {
  auto args = Parse({"/data", "/mnt", "-n", "-o", "ro", "-t", "tensorfs.models"});
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_EQ(args->options, "");
}

// mount -s -t tensorfs SRC DIR -o rw,turbo: sloppy drops unknown options.
TEST(MountHelperTest, SloppyDropsUnknownOptionsWithAWarning) {
  auto args = Parse({"/data", "/mnt", "-s", "-o", "ro,turbo,allow_other,speed=3"});
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(args->options, "allow_other");
  ASSERT_EQ(args->warnings.size(), 2u);
  EXPECT_THAT(args->warnings[0], HasSubstr("'turbo'"));
  EXPECT_THAT(args->warnings[1], HasSubstr("'speed=3'"));
}

TEST(MountHelperTest, WithoutSloppyUnknownOptionsReachTensorfsWhichNamesThem) {
  auto args = Parse({"/data", "/mnt", "-o", "ro,turbo"});
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(args->options, "turbo");
  MountOptions options;
  Status s = ApplyMountOptionList(options, args->options);
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("unknown option 'turbo'"));
}

TEST(MountHelperTest, ValuesAndEscapedCommasSurviveAndApply) {
  auto args = Parse({"gs://b", "/mnt", "-o",
                     "ro,_netdev,log_level=debug,layer_regex=^(a\\,b)\\.,endpoint=http://127.0.0.1:9,anonymous",
                     "-o", "x-systemd.automount,max_threads=4"});
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(args->options,
            "log_level=debug,layer_regex=^(a\\,b)\\.,endpoint=http://127.0.0.1:9,anonymous,max_threads=4");
  MountOptions options;
  ASSERT_TRUE(ApplyMountOptionList(options, args->options).ok());
  EXPECT_EQ(options.log_level, "debug");
  EXPECT_EQ(options.layer_regex, "^(a,b)\\.");
  EXPECT_EQ(options.endpoint, "http://127.0.0.1:9");
  EXPECT_TRUE(options.anonymous);
  EXPECT_EQ(options.max_threads, 4);
  EXPECT_FALSE(options.foreground) << "a helper mount goes to the background like mount(8) expects";
}

TEST(MountHelperTest, AttachedOptionValue) {
  auto args = Parse({"/data", "/mnt", "-oro,allow_other"});
  ASSERT_TRUE(args.ok());
  EXPECT_EQ(args->options, "allow_other");
}

TEST(MountHelperTest, EmptyItemsAreSkipped) { EXPECT_EQ(Filter(",,ro,,allow_other,"), "allow_other"); }

TEST(MountHelperTest, BadCommandLinesSayWhatIsWrong) {
  auto missing_dir = Parse({"/data"});
  ASSERT_FALSE(missing_dir.ok());
  EXPECT_THAT(missing_dir.status().message(), HasSubstr("SOURCE and DIR"));
  auto extra = Parse({"/data", "/mnt", "/other"});
  ASSERT_FALSE(extra.ok());
  EXPECT_THAT(extra.status().message(), HasSubstr("got 3"));
  auto no_value = Parse({"/data", "/mnt", "-o"});
  ASSERT_FALSE(no_value.ok());
  EXPECT_THAT(no_value.status().message(), HasSubstr("-o needs a value"));
  auto unknown = Parse({"/data", "/mnt", "-x"});
  ASSERT_FALSE(unknown.ok());
  EXPECT_THAT(unknown.status().message(), HasSubstr("unknown flag -x"));
  auto ns = Parse({"/data", "/mnt", "-N", "/proc/1/ns/mnt"});
  ASSERT_FALSE(ns.ok());
  EXPECT_THAT(ns.status().message(), HasSubstr("not supported"));
}

TEST(MountHelperTest, DoubleDashEndsFlags) {
  auto args = Parse({"-o", "allow_other", "--", "-data", "/mnt"});
  ASSERT_TRUE(args.ok()) << args.status().ToString();
  EXPECT_EQ(args->source, "-data");
  EXPECT_EQ(args->options, "allow_other");
}

TEST(MountHelperTest, WarningsListIsSharedAcrossLists) {
  std::vector<std::string> warnings;
  EXPECT_EQ(FilterMountHelperOptions("rw", false, warnings), "");
  EXPECT_EQ(FilterMountHelperOptions("rw,allow_other", false, warnings), "allow_other");
  EXPECT_THAT(warnings, ElementsAre(HasSubstr("read-only")));
}

}  // namespace
}  // namespace tensorfs
