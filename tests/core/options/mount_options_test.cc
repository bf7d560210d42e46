#include "core/options/mount_options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;

TEST(MountOptionsTest, OptionListSetsFields) {
  MountOptions o;
  ASSERT_TRUE(ApplyMountOptionList(o, "allow_other,max_threads=4,log_level=debug,ro").ok());
  EXPECT_TRUE(o.allow_other);
  EXPECT_EQ(o.max_threads, 4);
  EXPECT_EQ(o.log_level, "debug");
}

TEST(MountOptionsTest, EscapedCommaStaysInValue) {
  MountOptions o;
  ASSERT_TRUE(ApplyMountOptionList(o, R"(layer_regex=^(blocks\.[0-9]{1\,3}\.))").ok());
  EXPECT_EQ(o.layer_regex, R"(^(blocks\.[0-9]{1,3}\.))");
}

TEST(MountOptionsTest, UnknownOptionSaysWhereToLook) {
  MountOptions o;
  Status s = ApplyMountOptionList(o, "allow_other,bogus=1");
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("unknown option 'bogus'"));
  EXPECT_THAT(s.message(), HasSubstr("--help"));
}

TEST(MountOptionsTest, ReadWriteIsRefused) {
  MountOptions o;
  EXPECT_THAT(ApplyMountOptionList(o, "rw").message(), HasSubstr("read-only"));
}

TEST(MountOptionsTest, BadNumberNamesRange) {
  MountOptions o;
  Status s = ApplyMountOption(o, "max_threads", "lots");
  EXPECT_THAT(s.message(), HasSubstr("max_threads"));
  EXPECT_THAT(s.message(), HasSubstr("expected a number"));
}

TEST(MountOptionsTest, MissingValueShowsForm) {
  MountOptions o;
  EXPECT_THAT(ApplyMountOption(o, "log_level", std::nullopt).message(), HasSubstr("log_level=LEVEL"));
}

TEST(MountOptionsTest, FlagWithValueIsRejected) {
  MountOptions o;
  EXPECT_FALSE(ApplyMountOption(o, "allow_other", "yes").ok());
}

TEST(MountOptionsTest, OwnerAndModesAreNumericIdsAndOctalBits) {
  MountOptions o;
  EXPECT_FALSE(o.uid.has_value());
  EXPECT_EQ(o.file_mode, 0444u);
  EXPECT_EQ(o.dir_mode, 0555u);
  ASSERT_TRUE(ApplyMountOptionList(o, "uid=1001,gid=0,file_mode=644,dir_mode=0750").ok());
  EXPECT_EQ(o.uid, 1001u);
  EXPECT_EQ(o.gid, 0u);
  EXPECT_EQ(o.file_mode, 0644u);
  EXPECT_EQ(o.dir_mode, 0750u);
}

TEST(MountOptionsTest, ANameForAnOwnerOrAModeOutOfRangeSaysWhatToWrite) {
  MountOptions o;
  EXPECT_THAT(ApplyMountOption(o, "uid", "alice").message(), HasSubstr("expected a numeric id"));
  EXPECT_THAT(ApplyMountOption(o, "gid", "4294967295").message(), HasSubstr("expected a numeric id"));
  EXPECT_THAT(ApplyMountOption(o, "file_mode", "888").message(), HasSubstr("in octal"));
  EXPECT_THAT(ApplyMountOption(o, "dir_mode", "1777").message(), HasSubstr("from 0 to 777"));
}

TEST(MountOptionsTest, InvalidRegexIsExplained) {
  MountOptions o;
  Status s = ApplyMountOption(o, "layer_regex", "(unclosed");
  EXPECT_THAT(s.message(), HasSubstr("not a valid regular expression"));
}

TEST(MountOptionsTest, BadLogLevelListsChoices) {
  MountOptions o;
  EXPECT_THAT(ApplyMountOption(o, "log_level", "loud").message(), HasSubstr("trace, debug, info"));
}

TEST(MountOptionsTest, DebugImpliesForeground) {
  MountOptions o;
  ASSERT_TRUE(ApplyMountOption(o, "debug", std::nullopt).ok());
  EXPECT_TRUE(o.foreground);
}

TEST(MountOptionsTest, AllowRootAndAllowOtherAreOneOrTheOther) {
  MountOptions o;
  ASSERT_TRUE(ApplyMountOptionList(o, "allow_root").ok());
  EXPECT_TRUE(o.allow_root);
  o.source = "/tmp";
  o.mountpoint = "/mnt";
  EXPECT_TRUE(ValidateMountOptions(o).ok());
  ASSERT_TRUE(ApplyMountOptionList(o, "allow_other").ok());
  EXPECT_THAT(ValidateMountOptions(o).message(), HasSubstr("give either allow_other (every user) or allow_root"));
}

TEST(MountOptionsTest, UserAgentPrefixIsKeptWhole) {
  MountOptions o;
  ASSERT_TRUE(ApplyMountOption(o, "user_agent_prefix", "s3-csi-driver/v2.7.0 credential-source#pod").ok());
  EXPECT_EQ(o.user_agent_prefix, "s3-csi-driver/v2.7.0 credential-source#pod");
  EXPECT_THAT(ApplyMountOption(o, "user_agent_prefix", "").message(), HasSubstr("needs the text"));
}

TEST(MountOptionsTest, ValidateWantsSourceAndMountPoint) {
  MountOptions o;
  EXPECT_THAT(ValidateMountOptions(o).message(), HasSubstr("missing SOURCE"));
  o.source = "/tmp";
  EXPECT_THAT(ValidateMountOptions(o).message(), HasSubstr("missing MOUNTPOINT"));
  o.mountpoint = "/nonexistent/mnt";
  // The mount point itself is only looked at when mounting fails (an automount
  // on it would wait for this very mount).
  EXPECT_TRUE(ValidateMountOptions(o).ok());
  EXPECT_THAT(CheckMountPointDirectory(o.mountpoint).message(), HasSubstr("mkdir -p /nonexistent/mnt"));
  testing::TempDir dir;
  EXPECT_TRUE(CheckMountPointDirectory(dir.path()).ok());
  EXPECT_THAT(CheckMountPointDirectory("/etc/hostname").message(), HasSubstr("not a directory"));
}

TEST(MountOptionsTest, LocalDirectoryFetchesFollowTheCpusUnlessGiven) {
  EXPECT_EQ(DefaultLocalFetches(1), 4);
  EXPECT_EQ(DefaultLocalFetches(2), 4);
  EXPECT_EQ(DefaultLocalFetches(8), 16);
  EXPECT_EQ(DefaultLocalFetches(64), 32);
  MountOptions dir;
  dir.source = "/tmp";
  dir.mountpoint = "/mnt";
  ASSERT_TRUE(ValidateMountOptions(dir).ok());
  EXPECT_EQ(dir.engine.max_fetches, DefaultLocalFetches(UsableCpus()));
  MountOptions gcs;
  gcs.source = "gs://bucket";
  gcs.mountpoint = "/mnt";
  ASSERT_TRUE(ValidateMountOptions(gcs).ok());
  EXPECT_EQ(gcs.engine.max_fetches, 32);
  MountOptions given;
  given.source = "/tmp";
  given.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOption(given, "max_fetches", "48").ok());
  ASSERT_TRUE(ValidateMountOptions(given).ok());
  EXPECT_EQ(given.engine.max_fetches, 48);
}

TEST(MountOptionsTest, S3SourcesTakeTheObjectStoreDefaults) {
  MountOptions s3;
  s3.source = "s3://bucket/prefix";
  s3.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(s3, "region=eu-west-1,force_path_style,profile=ml,requester_pays,"
                                       "expected_bucket_owner=123456789012,endpoint=https://minio:9000")
                  .ok());
  ASSERT_TRUE(ValidateMountOptions(s3).ok());
  EXPECT_EQ(s3.engine.max_fetches, 32) << "a remote store, not a local directory";
  EXPECT_EQ(s3.region, "eu-west-1");
  EXPECT_TRUE(s3.force_path_style);
  EXPECT_EQ(s3.profile, "ml");
  EXPECT_TRUE(s3.requester_pays);
  EXPECT_EQ(s3.expected_bucket_owner, "123456789012");
  EXPECT_TRUE(IsObjectStoreSource("s3://b"));
  EXPECT_FALSE(IsObjectStoreSource("/data/s3:/x"));
}

TEST(MountOptionsTest, S3OptionsOnOtherSourcesSayWhereTheyApply) {
  MountOptions gcs;
  gcs.source = "gs://bucket";
  gcs.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(gcs, "no_sign_request").ok());
  EXPECT_THAT(ValidateMountOptions(gcs).message(),
              HasSubstr("no_sign_request applies to s3:// sources only; for gs:// use anonymous"));
  MountOptions s3;
  s3.source = "s3://bucket";
  s3.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(s3, "anonymous").ok());
  EXPECT_THAT(ValidateMountOptions(s3).message(), HasSubstr("for s3:// use profile=NAME or no_sign_request"));
  MountOptions both;
  both.source = "s3://bucket";
  both.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(both, "no_sign_request,profile=x").ok());
  EXPECT_THAT(ValidateMountOptions(both).message(), HasSubstr("either no_sign_request or profile=x"));
  MountOptions dir;
  dir.source = "/tmp";
  dir.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(dir, "endpoint=http://x").ok());
  EXPECT_THAT(ValidateMountOptions(dir).message(), HasSubstr("apply to gs:// and s3:// sources only"));
}

TEST(MountOptionsTest, LocalDirectoryWindowFollowsItsFetchesUnlessGiven) {
  EngineOptions engine;
  engine.max_fetches = 4;
  EXPECT_EQ(DefaultLocalPrefetchWindow(engine), 8 * engine.chunk_size);
  engine.max_fetches = 32;
  EXPECT_EQ(DefaultLocalPrefetchWindow(engine), EngineOptions{}.prefetch_window);
  MountOptions dir;
  dir.source = "/tmp";
  dir.mountpoint = "/mnt";
  ASSERT_TRUE(ValidateMountOptions(dir).ok());
  EXPECT_EQ(dir.engine.prefetch_window,
            std::min<uint64_t>(EngineOptions{}.prefetch_window, 2ull * dir.engine.max_fetches * dir.engine.chunk_size));
  MountOptions gcs;
  gcs.source = "gs://bucket";
  gcs.mountpoint = "/mnt";
  ASSERT_TRUE(ValidateMountOptions(gcs).ok());
  EXPECT_EQ(gcs.engine.prefetch_window, EngineOptions{}.prefetch_window);
  MountOptions given;
  given.source = "/tmp";
  given.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOption(given, "prefetch_window", "512M").ok());
  ASSERT_TRUE(ApplyMountOption(given, "cache_size", "4G").ok());
  ASSERT_TRUE(ValidateMountOptions(given).ok());
  EXPECT_EQ(given.engine.prefetch_window, 512ull << 20);
}

TEST(MountOptionsTest, LocalDirectoryKeepsOneChunkTheKernelReceivedAndGcsItsWhole64MiB) {
  MountOptions dir;
  dir.source = "/tmp";
  dir.mountpoint = "/mnt";
  ASSERT_TRUE(ValidateMountOptions(dir).ok());
  EXPECT_EQ(dir.engine.consumed_keep, dir.engine.chunk_size);
  MountOptions gcs;
  gcs.source = "gs://bucket";
  gcs.mountpoint = "/mnt";
  ASSERT_TRUE(ValidateMountOptions(gcs).ok());
  EXPECT_EQ(gcs.engine.consumed_keep, EngineOptions{}.consumed_keep);
  EXPECT_GT(gcs.engine.consumed_keep, gcs.engine.chunk_size);
}

TEST(MountOptionsTest, QueueLimitsAreDerivedFromTheCpus) {
  EXPECT_EQ(DefaultMaxBackground(1), 32);
  EXPECT_EQ(DefaultMaxBackground(2), 32);
  EXPECT_EQ(DefaultMaxBackground(8), 32);
  EXPECT_EQ(DefaultMaxBackground(12), 48);
  EXPECT_EQ(DefaultMaxBackground(16), 64);
  EXPECT_EQ(DefaultMaxBackground(192), 64);
  EXPECT_GE(UsableCpus(), 1u);
  MountOptions o;
  o.source = "/tmp";
  o.mountpoint = "/mnt";
  ASSERT_TRUE(ValidateMountOptions(o).ok());
  EXPECT_EQ(o.max_background, DefaultMaxBackground(UsableCpus()));
  EXPECT_EQ(o.congestion_threshold, o.max_background * 3 / 4);
}

TEST(MountOptionsTest, QueueLimitsGivenAreKeptAndChecked) {
  MountOptions o;
  o.source = "/tmp";
  o.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(o, "max_background=100").ok());
  ASSERT_TRUE(ValidateMountOptions(o).ok());
  EXPECT_EQ(o.max_background, 100);
  EXPECT_EQ(o.congestion_threshold, 75);
  MountOptions bad;
  bad.source = "/tmp";
  bad.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(bad, "max_background=8,congestion_threshold=9").ok());
  const Status s = ValidateMountOptions(bad);
  EXPECT_THAT(s.message(), HasSubstr("congestion_threshold=9 is above max_background=8"));
  EXPECT_THAT(ApplyMountOption(bad, "max_background", "0").message(), HasSubstr("max_background"));
}

TEST(MountOptionsTest, TtlsDefaultToSixtyAndFiveSeconds) {
  MountOptions o;
  o.source = "/tmp";
  o.mountpoint = "/mnt";
  ASSERT_TRUE(ValidateMountOptions(o).ok());
  EXPECT_EQ(o.metadata_ttl_s, 60);
  EXPECT_EQ(o.negative_ttl_s, 5);
  EXPECT_EQ(o.attr_timeout_s, 60);
  EXPECT_EQ(o.entry_timeout_s, 60);
  EXPECT_EQ(NegativeEntryTimeout(o), 5);
}

TEST(MountOptionsTest, KernelTimeoutsFollowTheMetadataTtlUnlessGiven) {
  MountOptions o;
  o.source = "/tmp";
  o.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(o, "metadata_ttl=0.5,attr_timeout=7").ok());
  ASSERT_TRUE(ValidateMountOptions(o).ok());
  EXPECT_EQ(o.attr_timeout_s, 7);
  EXPECT_EQ(o.entry_timeout_s, 0.5);
  EXPECT_EQ(NegativeEntryTimeout(o), 0.5) << "a name is looked for again with the listing at the latest";
}

TEST(MountOptionsTest, InfiniteTtlKeepsTheKernelCachingForAnHour) {
  MountOptions o;
  o.source = "/tmp";
  o.mountpoint = "/mnt";
  ASSERT_TRUE(ApplyMountOptionList(o, "metadata_ttl=inf,negative_ttl=0").ok());
  ASSERT_TRUE(ValidateMountOptions(o).ok());
  EXPECT_TRUE(std::isinf(o.metadata_ttl_s));
  EXPECT_EQ(o.attr_timeout_s, 3600);
  EXPECT_EQ(o.entry_timeout_s, 3600);
  EXPECT_EQ(NegativeEntryTimeout(o), 3600) << "nothing is looked for again";
}

TEST(MountOptionsTest, BadTtlSaysWhatItTakes) {
  MountOptions o;
  Status s = ApplyMountOption(o, "metadata_ttl", "-1");
  EXPECT_THAT(s.message(), HasSubstr("metadata_ttl=-1"));
  EXPECT_THAT(s.message(), HasSubstr("or inf"));
  EXPECT_THAT(ApplyMountOption(o, "negative_ttl", "5s").message(), HasSubstr("expected seconds"));
}

TEST(MountOptionsTest, DevFdMountPointNamesTheDescriptor) {
  EXPECT_EQ(FuseFdOfMountPoint("/dev/fd/3"), 3);
  EXPECT_EQ(FuseFdOfMountPoint("/dev/fd/12"), 12);
  for (const char* other : {"/mnt/models", "/dev/fd/", "/dev/fd/3x", "/dev/fd/-1", "/dev/fuse", "dev/fd/3"}) {
    EXPECT_EQ(FuseFdOfMountPoint(other), std::nullopt) << other;
  }
}

TEST(MountOptionsTest, PrometheusPortIsOffByDefaultAndTakesAPortNumber) {
  MountOptions o;
  EXPECT_EQ(o.prometheus_port, 0);
  ASSERT_TRUE(ApplyMountOptionList(o, "prometheus_port=9400").ok());
  EXPECT_EQ(o.prometheus_port, 9400);
  for (const char* bad : {"0", "65536", "http", "94.5", "-1"}) {
    Status s = ApplyMountOption(o, "prometheus_port", bad);
    EXPECT_FALSE(s.ok()) << bad;
    EXPECT_THAT(s.message(), HasSubstr("prometheus_port")) << bad;
  }
  EXPECT_THAT(ApplyMountOption(o, "prometheus_port", std::nullopt).message(), HasSubstr("prometheus_port=PORT"));
}

TEST(MountOptionsTest, EveryOptionHasHelp) {
  for (const OptionSpec& spec : AllMountOptions()) {
    EXPECT_FALSE(spec.help.empty()) << spec.name;
  }
}

}  // namespace
}  // namespace tensorfs
