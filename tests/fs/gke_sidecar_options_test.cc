// What `tensorfs gke-sidecar` makes of the node plugin's message and options,
// and what it writes to a volume's error file. The exchange itself runs in
// tests/fs/gke_sidecar_test.py.
#include "fs/gke_sidecar.h"

#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fs/exit_status.h"

namespace tensorfs {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;
using ::testing::StartsWith;

GkeMount Translated(std::vector<std::string> options, std::string bucket = "models") {
  StatusOr<GkeMount> mount = TranslateGkeVolume({std::move(bucket), std::move(options)});
  EXPECT_TRUE(mount.ok()) << mount.status().message();
  return mount.ok() ? *mount : GkeMount{};
}

Status TranslationError(std::vector<std::string> options, std::string bucket = "models") {
  StatusOr<GkeMount> mount = TranslateGkeVolume({std::move(bucket), std::move(options)});
  EXPECT_FALSE(mount.ok());
  return mount.status();
}

TEST(GkeMessageTest, TheDriversMessageNamesTheBucketAndItsOptions) {
  StatusOr<GkeVolumeMessage> m = ParseGkeMessage(R"({"bucketName":"b","options":["implicit-dirs","uid=1"]})");
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->bucket, "b");
  EXPECT_THAT(m->options, ElementsAre("implicit-dirs", "uid=1"));
}

TEST(GkeMessageTest, OptionsMayBeAbsent) {
  StatusOr<GkeVolumeMessage> m = ParseGkeMessage(R"({"bucketName":"b"})");
  ASSERT_TRUE(m.ok());
  EXPECT_THAT(m->options, IsEmpty());
}

TEST(GkeMessageTest, OlderDriversSendBucketName) {
  StatusOr<GkeVolumeMessage> m = ParseGkeMessage(R"({"bucket_name":"old"})");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->bucket, "old");
}

TEST(GkeMessageTest, AMessageWithoutABucketSaysSoAndShowsIt) {
  StatusOr<GkeVolumeMessage> m = ParseGkeMessage(R"({"volumeName":"v"})");
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("names no bucket"));
  EXPECT_THAT(m.status().message(), HasSubstr("volumeName"));
  EXPECT_THAT(ParseGkeMessage("not json").status().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(ParseGkeMessage(R"({"bucketName":"b","options":"x"})").status().message(),
              HasSubstr("not an array of strings"));
}

TEST(GkeTranslateTest, TheBucketAloneIsTheSource) {
  GkeMount mount = Translated({});
  EXPECT_EQ(mount.source, "gs://models");
  EXPECT_EQ(mount.options, "");
  EXPECT_THAT(mount.notes, IsEmpty());
}

TEST(GkeTranslateTest, OnlyDirIsThePrefix) {
  EXPECT_EQ(Translated({"only-dir=llama/7b"}).source, "gs://models/llama/7b");
  EXPECT_EQ(Translated({"only-dir=/llama/7b/"}).source, "gs://models/llama/7b");
  EXPECT_EQ(Translated({"only-dir="}).source, "gs://models");
}

TEST(GkeTranslateTest, OwnerAndModesBecomeTheirTensorfsOptions) {
  EXPECT_EQ(Translated({"uid=1001", "gid=2002", "file-mode=664", "dir-mode=775"}).options,
            "uid=1001,gid=2002,file_mode=664,dir_mode=775");
}

TEST(GkeTranslateTest, TensorfsOptionsPassWithDashesOrUnderscores) {
  EXPECT_EQ(Translated({"tensorfs:cache_size:4G", "tensorfs:max-fetches:8", "tensorfs:shard:0/8",
                        "tensorfs:views:none"})
                .options,
            "cache_size=4G,max_fetches=8,shard=0/8,views=none");
}

TEST(GkeTranslateTest, ATensorfsValueKeepsItsColonsAndCommas) {
  EXPECT_EQ(Translated({"tensorfs:endpoint:http://127.0.0.1:4443"}).options, "endpoint=http://127.0.0.1:4443");
  EXPECT_EQ(Translated({"tensorfs:layer_regex:^h\\.([0-9]{1,3})\\."}).options,
            "layer_regex=^h\\.([0-9]{1\\,3})\\.");
}

TEST(GkeTranslateTest, ATensorfsFlagIsGivenAloneOrTrue) {
  EXPECT_EQ(Translated({"tensorfs:anonymous"}).options, "anonymous");
  EXPECT_EQ(Translated({"tensorfs:anonymous:true"}).options, "anonymous");
  EXPECT_EQ(Translated({"tensorfs:anonymous:false"}).options, "");
}

TEST(GkeTranslateTest, AWrongTensorfsOptionIsIncorrectUsageNamingIt) {
  Status unknown = TranslationError({"tensorfs:cache-sise:4G"});
  EXPECT_THAT(unknown.message(), StartsWith("Incorrect Usage: "));
  EXPECT_THAT(unknown.message(), HasSubstr("unknown tensorfs option 'cache_sise'"));
  EXPECT_THAT(TranslationError({"tensorfs:cache_size"}).message(), HasSubstr("tensorfs:cache_size:SIZE"));
  EXPECT_THAT(TranslationError({"tensorfs:anonymous:yes"}).message(), HasSubstr("takes no value"));
  EXPECT_THAT(TranslationError({"tensorfs:cache_size:lots"}).message(), HasSubstr("expected a size"));
  EXPECT_THAT(TranslationError({"uid=root"}).message(), StartsWith("Incorrect Usage: "));
}

TEST(GkeTranslateTest, OtherOptionsAreIgnoredOneLineEachNamingThem) {
  GkeMount mount = Translated({"implicit-dirs", "file-cache:max-size-mb:-1", "metadata-cache:stat-cache-max-size-mb:32",
                               "logging:severity:debug", "pod-namespace=default", "rw"});
  EXPECT_EQ(mount.options, "");
  ASSERT_THAT(mount.notes, SizeIs(6));
  EXPECT_THAT(mount.notes[0], HasSubstr("implicit-dirs"));
  EXPECT_THAT(mount.notes[1], HasSubstr("file-cache:max-size-mb:-1"));
  EXPECT_THAT(mount.notes[1], HasSubstr("tensorfs:cache_size"));
  EXPECT_THAT(mount.notes[2], HasSubstr("metadata-cache:stat-cache-max-size-mb:32"));
  EXPECT_THAT(mount.notes[3], HasSubstr("tensorfs:log_level"));
  EXPECT_THAT(mount.notes[4], HasSubstr("pod-namespace=default"));
  EXPECT_THAT(mount.notes[5], HasSubstr("read-only"));
}

TEST(GkeTranslateTest, MetadataCacheTtlsBecomeMetadataTtlAndNegativeTtl) {
  EXPECT_EQ(Translated({"metadata-cache:ttl-secs:30", "metadata-cache:negative-ttl-secs:0"}).options,
            "metadata_ttl=30,negative_ttl=0");
  GkeMount never = Translated({"metadata-cache:ttl-secs:-1", "metadata-cache:negative-ttl-secs:-1"});
  EXPECT_EQ(never.options, "metadata_ttl=inf,negative_ttl=inf");
  EXPECT_THAT(never.notes, IsEmpty());
  EXPECT_THAT(TranslationError({"metadata-cache:ttl-secs:soon"}).message(),
              AllOf(StartsWith("Incorrect Usage: "), HasSubstr("metadata_ttl=soon")));
}

TEST(GkeTranslateTest, MetricsAreServedUnlessTheDriverDisablesThem) {
  EXPECT_TRUE(Translated({}).metrics);
  EXPECT_TRUE(Translated({"disable-metrics-for-gke:false"}).metrics);
  GkeMount disabled = Translated({"disable-metrics-for-gke:true"});
  EXPECT_FALSE(disabled.metrics);
  EXPECT_THAT(disabled.notes, IsEmpty());
}

TEST(GkeTranslateTest, TheDynamicMountBucketIsRefused) {
  Status s = TranslationError({}, "_");
  EXPECT_THAT(s.message(), StartsWith("Incorrect Usage: "));
  EXPECT_THAT(s.message(), HasSubstr("name one bucket"));
}

TEST(GkeTranslateTest, ABucketWithAPathIsRefusedPointingAtOnlyDir) {
  EXPECT_THAT(TranslationError({}, "models/llama").message(), HasSubstr("only-dir=DIR"));
}

TEST(GkeMemoryTest, VolumesShareTheMemoryLimitForTheirDefaultCaches) {
  GkeMount mount = Translated({});
  ASSERT_TRUE(ShareMemoryLimit(mount, MemoryLimit{4096ull << 20, "memory.max"}, 2).ok());
  EXPECT_EQ(mount.options, "cache_size=" + std::to_string(1440ull << 20));  // 3/4 of (2048 - 128) MiB
  ASSERT_THAT(mount.notes, SizeIs(1));
  EXPECT_THAT(mount.notes[0], HasSubstr("shared by 2 volumes"));
}

TEST(GkeMemoryTest, OneVolumeOrAGivenCacheSizeOrNoLimitIsLeftAlone) {
  GkeMount one = Translated({});
  ASSERT_TRUE(ShareMemoryLimit(one, MemoryLimit{1ull << 30, "memory.max"}, 1).ok());
  EXPECT_EQ(one.options, "");
  // A volume's share of 1 GiB by 4 is 256 MiB, of which 128 MiB fit a cache.
  GkeMount given = Translated({"tensorfs:cache_size:100M"});
  ASSERT_TRUE(ShareMemoryLimit(given, MemoryLimit{1ull << 30, "memory.max"}, 4).ok());
  EXPECT_EQ(given.options, "cache_size=100M");
  GkeMount unlimited = Translated({});
  ASSERT_TRUE(ShareMemoryLimit(unlimited, std::nullopt, 4).ok());
  EXPECT_EQ(unlimited.options, "");
}

TEST(GkeMemoryTest, AGivenCacheSizeOverTheShareIsRefusedSayingWhatFits) {
  GkeMount given = Translated({"tensorfs:cache_size:3G"});
  Status s = ShareMemoryLimit(given, MemoryLimit{1ull << 30, "memory.max"}, 4);
  EXPECT_THAT(s.message(), StartsWith("Incorrect Usage: "));
  EXPECT_THAT(s.message(), HasSubstr("does not fit the memory limit"));
  EXPECT_THAT(s.message(), HasSubstr("set cache_size to at most 128M"));
}

TEST(GkeMemoryTest, AShareTooSmallSaysToRaiseTheLimit) {
  GkeMount mount = Translated({});
  Status s = ShareMemoryLimit(mount, MemoryLimit{256ull << 20, "memory.max"}, 2);
  EXPECT_THAT(s.message(), StartsWith("Incorrect Usage: "));
  EXPECT_THAT(s.message(), HasSubstr("raise the container's memory limit"));
}

TEST(GkeErrorLineTest, AMissingBucketIsWhatTheNodePluginMapsToNotFound) {
  ChildEnd end{.exit_code = static_cast<int>(ExitStatus::kSourceNotFound),
               .last_line = "tensorfs: bucket gs://nope not found (HTTP 404); check the bucket name in the URL"};
  EXPECT_EQ(GkeErrorLine(end, "gs://nope"),
            "bucket doesn't exist: bucket gs://nope not found (HTTP 404); check the bucket name in the URL");
}

TEST(GkeErrorLineTest, AnEmptyPrefixIsNotCalledAMissingBucket) {
  ChildEnd end{.exit_code = static_cast<int>(ExitStatus::kSourceNotFound),
               .last_line = "tensorfs: gs://b/x holds no objects: check the prefix in the URL"};
  const std::string line = GkeErrorLine(end, "gs://b/x");
  EXPECT_THAT(line, Not(HasSubstr("bucket doesn't exist")));
  EXPECT_THAT(line, HasSubstr("holds no objects"));
}

TEST(GkeErrorLineTest, RefusedCredentialsAreWhatTheNodePluginMapsToPermissionDenied) {
  ChildEnd end{.exit_code = static_cast<int>(ExitStatus::kAccessDenied),
               .last_line = "tensorfs: access denied (HTTP 403) to gs://b/"};
  EXPECT_EQ(GkeErrorLine(end, "gs://b"), "googleapi: Error 403: access denied (HTTP 403) to gs://b/");
}

TEST(GkeErrorLineTest, AKilledMountSaysSignalKilledAndWhatToRaise) {
  ChildEnd end{.exit_code = -1, .signal = SIGKILL};
  const std::string line = GkeErrorLine(end, "gs://b");
  EXPECT_THAT(line, HasSubstr("signal: killed"));
  EXPECT_THAT(line, HasSubstr("gke-gcsfuse/memory-limit"));
}

TEST(GkeErrorLineTest, AnyOtherEndSaysHowAndWhy) {
  ChildEnd end{.exit_code = 1, .last_line = "tensorfs: gave up after 60 s (startup_deadline)"};
  EXPECT_EQ(GkeErrorLine(end, "gs://b"),
            "tensorfs serving gs://b exited with status 1: gave up after 60 s (startup_deadline)");
}

TEST(GkeSidecarOptionsTest, NativeSidecarIsReadAsGoReadsABool) {
  EXPECT_TRUE(GkeSidecarOptionsFrom("/t", {}, "TRUE").native);
  EXPECT_TRUE(GkeSidecarOptionsFrom("/t", {}, "1").native);
  EXPECT_FALSE(GkeSidecarOptionsFrom("/t", {}, "false").native);
  EXPECT_FALSE(GkeSidecarOptionsFrom("/t", {}, "yes").native);  // not Go's: a warning, false
  EXPECT_FALSE(GkeSidecarOptionsFrom("/t", {}, nullptr).native);
}

TEST(GkeSidecarOptionsTest, AKlogFlagTakesItsValueFromTheNextArgument) {
  EXPECT_THAT(GkeSidecarOptionsFrom("/t", {"--v=5", "-v", "3", "--logtostderr", "x"}, nullptr).ignored_args,
              ElementsAre("--v=5", "-v 3", "--logtostderr", "x"));
}

}  // namespace
}  // namespace tensorfs
