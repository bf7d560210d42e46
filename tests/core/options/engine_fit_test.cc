// FitEngineToCache: a small cache_size lowers the engine values the user left
// at their defaults, and refuses only what the user set.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/options/mount_options.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

MountOptions Parse(std::string_view list) {
  MountOptions o;
  Status s = ApplyMountOptionList(o, list);
  EXPECT_TRUE(s.ok()) << s.message();
  return o;
}

TEST(EngineFitTest, DefaultsAreLeftAloneWhenTheyFit) {
  MountOptions o = Parse("cache_size=2G");
  auto note = FitEngineToCache(o);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_EQ(*note, "");
  EXPECT_EQ(o.engine.max_fetches, 32);
  EXPECT_EQ(o.engine.chunk_size, 8ull << 20);
  EXPECT_EQ(o.engine.prefetch_window, 256ull << 20);
}

TEST(EngineFitTest, SmallCacheLowersDefaultMaxFetchesFirst) {
  MountOptions o = Parse("cache_size=256M");
  auto note = FitEngineToCache(o);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_EQ(o.engine.max_fetches, 16);
  EXPECT_EQ(o.engine.chunk_size, 8ull << 20);
  EXPECT_EQ(o.engine.prefetch_window, 128ull << 20);
  EXPECT_THAT(*note, AllOf(HasSubstr("cache_size=256M"), HasSubstr("max_fetches=16"),
                           HasSubstr("prefetch_window=128M")));
  EXPECT_TRUE(o.engine.Validate().ok());
}

TEST(EngineFitTest, MaxFetchesStopsAtItsFloorThenChunkSizeShrinks) {
  MountOptions o = Parse("cache_size=64M");
  auto note = FitEngineToCache(o);
  ASSERT_TRUE(note.ok()) << note.status().message();
  EXPECT_EQ(o.engine.max_fetches, kMinFittedFetches);
  EXPECT_EQ(o.engine.chunk_size, 4ull << 20);
  EXPECT_THAT(*note, AllOf(HasSubstr("max_fetches=8"), HasSubstr("chunk_size=4M")));
  EXPECT_TRUE(o.engine.Validate().ok());
}

TEST(EngineFitTest, TinyCacheGoesBelowTheFetchFloorAtTheSmallestChunk) {
  MountOptions o = Parse("cache_size=512K");
  ASSERT_TRUE(FitEngineToCache(o).ok());
  EXPECT_EQ(o.engine.chunk_size, 64ull << 10);
  EXPECT_EQ(o.engine.max_fetches, 4);
  EXPECT_TRUE(o.engine.Validate().ok());
}

TEST(EngineFitTest, ExplicitChunkSizeIsKeptAndMaxFetchesLowered) {
  MountOptions o = Parse("cache_size=256M,chunk_size=16M");
  ASSERT_TRUE(FitEngineToCache(o).ok());
  EXPECT_EQ(o.engine.chunk_size, 16ull << 20);
  EXPECT_EQ(o.engine.max_fetches, 8);
}

TEST(EngineFitTest, ExplicitMaxFetchesIsKeptAndChunkSizeLowered) {
  MountOptions o = Parse("cache_size=256M,max_fetches=64");
  ASSERT_TRUE(FitEngineToCache(o).ok());
  EXPECT_EQ(o.engine.max_fetches, 64);
  EXPECT_EQ(o.engine.chunk_size, 2ull << 20);
}

TEST(EngineFitTest, ExplicitCombinationThatDoesNotFitIsRefusedWithWhatToChange) {
  MountOptions o = Parse("cache_size=256M,max_fetches=32,chunk_size=8M");
  auto note = FitEngineToCache(o);
  ASSERT_FALSE(note.ok());
  EXPECT_THAT(note.status().message(),
              AllOf(HasSubstr("max_fetches=32 and chunk_size=8M you set"), HasSubstr("at least 512M"),
                    HasSubstr("max_fetches to 16"), HasSubstr("chunk_size to 4M")));
  EXPECT_EQ(o.engine.max_fetches, 32) << "a refused combination is left as given";
}

TEST(EngineFitTest, ExplicitChunkTooLargeForTheCacheIsRefused) {
  MountOptions o = Parse("cache_size=64M,chunk_size=64M");
  auto note = FitEngineToCache(o);
  ASSERT_FALSE(note.ok());
  EXPECT_THAT(note.status().message(), AllOf(HasSubstr("chunk_size=64M you set"), HasSubstr("at least 128M"),
                                             HasSubstr("chunk_size to 32M")));
}

TEST(EngineFitTest, ExplicitPrefetchWindowIsNotLowered) {
  MountOptions o = Parse("cache_size=256M,prefetch_window=200M");
  ASSERT_TRUE(FitEngineToCache(o).ok());
  EXPECT_EQ(o.engine.prefetch_window, 200ull << 20);
  EXPECT_THAT(o.engine.Validate().message(), HasSubstr("prefetch_window"));
}

TEST(EngineFitTest, FlagsCountAsExplicitLikeDashO) {
  MountOptions o = Parse("cache_size=256M");
  ASSERT_TRUE(ApplyMountOption(o, "max_fetches", "32").ok());
  ASSERT_TRUE(ApplyMountOption(o, "chunk_size", "8M").ok());
  EXPECT_FALSE(FitEngineToCache(o).ok());
}

TEST(EngineFitTest, ValidateFitsOnceAndASecondCallChangesNothing) {
  testing::TempDir dir;
  MountOptions o = Parse("cache_size=256M");
  o.source = "gs://bucket";  // a local directory's default max_fetches fits as it is
  o.mountpoint = dir.path();
  ASSERT_TRUE(ValidateMountOptions(o).ok());
  EXPECT_EQ(o.engine.max_fetches, 16);
  auto again = FitEngineToCache(o);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, "");
}

TEST(EngineFitTest, ValidateRefusesAnExplicitCombinationThatDoesNotFit) {
  testing::TempDir dir;
  MountOptions o = Parse("cache_size=256M,max_fetches=32,chunk_size=8M");
  o.source = dir.path();
  o.mountpoint = dir.path();
  EXPECT_THAT(ValidateMountOptions(o).message(), HasSubstr("raise cache_size to at least 512M"));
}

}  // namespace
}  // namespace tensorfs
