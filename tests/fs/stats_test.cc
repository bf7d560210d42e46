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

}  // namespace
}  // namespace tensorfs
