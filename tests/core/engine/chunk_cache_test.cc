// The chunk cache refuses, rather than aborting on, calls that contradict
// its entries: the engine reports them as inconsistencies (EIO for the read
// concerned) and the mount goes on serving.
#include "core/engine/chunk_cache.h"

#include <gtest/gtest.h>

#include "core/engine/chunk.h"

namespace tensorfs {
namespace {

class ChunkCacheTest : public ::testing::Test {
 protected:
  ChunkKey Key(size_t index) const { return ChunkKey{ObjectId{"model.safetensors", Generation{}}, index}; }
  static std::shared_ptr<const Chunk> NewChunk(ByteRange range) { return std::make_shared<Chunk>(range); }

  Metrics metrics_;
  ChunkCache cache_{64 << 20, 16 << 20, metrics_};
};

TEST_F(ChunkCacheTest, LoadingThenPublishedHandsOverItsWaiters) {
  ChunkCache::Entry* entry = cache_.InsertLoading(Key(0), ByteRange{0, 4096}, false);
  ASSERT_NE(entry, nullptr);
  int called = 0;
  entry->waiters.push_back([&](const StatusOr<std::shared_ptr<const Chunk>>&) { ++called; });
  auto waiters = cache_.Publish(Key(0), NewChunk(ByteRange{0, 4096}));
  ASSERT_TRUE(waiters.has_value());
  ASSERT_EQ(waiters->size(), 1u);
  (*waiters)[0](std::shared_ptr<const Chunk>());
  EXPECT_EQ(called, 1);
}

TEST_F(ChunkCacheTest, SecondLoadingEntryForOneKeyIsRefused) {
  ASSERT_NE(cache_.InsertLoading(Key(0), ByteRange{0, 4096}, false), nullptr);
  EXPECT_EQ(cache_.InsertLoading(Key(0), ByteRange{0, 8192}, false), nullptr);
  EXPECT_EQ(cache_.used(), 4096u) << "the refused entry is not charged";
}

TEST_F(ChunkCacheTest, PublishWithNoLoadingEntryIsRefused) {
  EXPECT_FALSE(cache_.Publish(Key(1), NewChunk(ByteRange{0, 4096})).has_value());
  EXPECT_EQ(cache_.Find(Key(1)), nullptr);
  EXPECT_EQ(cache_.TakeEvicted().size(), 1u) << "the refused chunk is released after the caller's lock";
}

TEST_F(ChunkCacheTest, SecondPublishOfOneEntryIsRefusedAndKeepsTheFirst) {
  ASSERT_NE(cache_.InsertLoading(Key(0), ByteRange{0, 4096}, false), nullptr);
  std::shared_ptr<const Chunk> first = NewChunk(ByteRange{0, 4096});
  ASSERT_TRUE(cache_.Publish(Key(0), first).has_value());
  EXPECT_FALSE(cache_.Publish(Key(0), NewChunk(ByteRange{0, 4096})).has_value());
  ASSERT_NE(cache_.Find(Key(0)), nullptr);
  EXPECT_EQ(cache_.Find(Key(0))->chunk, first);
}

TEST_F(ChunkCacheTest, FailOfAReadyOrMissingEntryIsRefused) {
  EXPECT_FALSE(cache_.Fail(Key(2)).has_value());
  ASSERT_NE(cache_.InsertLoading(Key(0), ByteRange{0, 4096}, false), nullptr);
  ASSERT_TRUE(cache_.Publish(Key(0), NewChunk(ByteRange{0, 4096})).has_value());
  EXPECT_FALSE(cache_.Fail(Key(0)).has_value());
  EXPECT_NE(cache_.Find(Key(0)), nullptr) << "the ready entry stays";
}

}  // namespace
}  // namespace tensorfs
