#include "fs/stats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tensorfs {
namespace {

using ::testing::HasSubstr;

TEST(MountSettingsTest, NameTheSourceSizesOwnerAndOctalModes) {
  MountOptions options;
  options.source = "gs://b/llama";
  ASSERT_TRUE(ApplyMountOptionList(options, "cache_size=96M,file_mode=640,views=none").ok());
  const nlohmann::json j = MountSettingsJson(options, 1001, 2002);
  EXPECT_EQ(j["source"], "gs://b/llama");
  EXPECT_EQ(j["cache_size"], 96u << 20);
  EXPECT_EQ(j["uid"], 1001u);
  EXPECT_EQ(j["gid"], 2002u);
  EXPECT_EQ(j["file_mode"], "640");
  EXPECT_EQ(j["dir_mode"], "555");
  EXPECT_TRUE(j["views"].empty());
  EXPECT_FALSE(j.contains("shard"));
}

TEST(MountSettingsTest, AShardIsWrittenAsGiven) {
  MountOptions options;
  ASSERT_TRUE(ApplyMountOptionList(options, "shard=3/8").ok());
  EXPECT_EQ(MountSettingsJson(options, 0, 0)["shard"], "3/8");
}

TEST(MountSettingsTest, TtlsAreSecondsOrInf) {
  MountOptions options;
  ASSERT_TRUE(ApplyMountOptionList(options, "metadata_ttl=inf,negative_ttl=2.5").ok());
  const nlohmann::json j = MountSettingsJson(options, 0, 0);
  EXPECT_EQ(j["metadata_ttl"], "inf");
  EXPECT_EQ(j["negative_ttl"], 2.5);
  nlohmann::json stats = nlohmann::json::object();
  stats["mount"] = j;
  stats["listings"] = 3;
  EXPECT_THAT(RenderStatsText(stats), HasSubstr("listings                3, metadata_ttl inf ("));
  options.metadata_ttl_s = 60;
  stats["mount"] = MountSettingsJson(options, 0, 0);
  EXPECT_THAT(RenderStatsText(stats), HasSubstr("listings                3, metadata_ttl 60 s ("));
}

TEST(MountSettingsTest, TheTextSummaryStartsWithTheMount) {
  MountOptions options;
  options.source = "gs://b";
  ASSERT_TRUE(ApplyMountOptionList(options, "cache_size=1G,shard=0/2").ok());
  nlohmann::json stats = nlohmann::json::object();
  stats["mount"] = MountSettingsJson(options, 0, 0);
  const std::string text = RenderStatsText(stats);
  EXPECT_THAT(text, HasSubstr("mount                   gs://b: cache 1.00 GiB, chunks 8.00 MiB"));
  EXPECT_THAT(text, HasSubstr("shard 0/2"));
}

// What a GB served cost, which tells a costly data path apart at a glance:
// the daemon's CPU per GB, and how many FUSE reads and range requests carried it.
TEST(MountSettingsTest, TheTextSummarySaysWhatAGbServedCost) {
  nlohmann::json stats = {{"bytes_served", 2000000000}, {"read_requests", 16000}, {"fetches", 240},
                          {"cpu_seconds", {{"user", 0.3}, {"system", 1.1}}}};
  const std::string text = RenderStatsText(stats);
  EXPECT_THAT(text, HasSubstr("cpu of the mount        0.30 s user + 1.10 s system: 0.70 CPU-s per GB served"));
  EXPECT_THAT(text, HasSubstr("per GB served           8000 reads from the kernel (122.07 KiB each), 120.0 range requests"));
}

TEST(MountSettingsTest, ProcessCpuIsThisProcesssUserAndSystemSeconds) {
  volatile double x = 0;
  for (int i = 0; i < 20000000; ++i) x = x + 1;  // some user time
  const nlohmann::json cpu = ProcessCpuJson();
  EXPECT_GT(cpu.value("user", 0.0), 0.0) << cpu.dump();
  EXPECT_GE(cpu.value("system", -1.0), 0.0) << cpu.dump();
}

}  // namespace
}  // namespace tensorfs
