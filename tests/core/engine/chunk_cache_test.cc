// The chunk cache keeps each object version's extent map true to its
// entries (no overlap, evicted extents gone), names every entry by an id it
// never reuses, and refuses, rather than aborting on, calls that contradict
// its entries: the engine reports them as inconsistencies (EIO for the read
// concerned) and the mount goes on serving.
#include "core/engine/chunk_cache.h"

#include <gtest/gtest.h>

#include "core/engine/chunk.h"

namespace tensorfs {
namespace {

class ChunkCacheTest : public ::testing::Test {
 protected:
  static std::shared_ptr<const Chunk> NewChunk(ByteRange range) { return std::make_shared<Chunk>(range); }
  // A ready extent of `map` over `range`.
  ExtentId Ready(ExtentMap& map, ByteRange range) {
    const ExtentId id = cache_.InsertLoading(map, range, false);
    EXPECT_TRUE(cache_.Publish(id, NewChunk(range)).has_value());
    return id;
  }
  static std::vector<ByteRange> Ranges(const ExtentMap& map, ByteRange range) {
    std::vector<ByteRange> out;
    for (const ExtentMap::Extent& x : map.Overlapping(range)) out.push_back(x.range);
    return out;
  }

  Metrics metrics_;
  ChunkCache cache_{64 << 20, 16 << 20, metrics_};
  const ObjectId object_{"model.safetensors", Generation{}};
  ExtentMap& map_ = cache_.Extents(object_);
};

TEST_F(ChunkCacheTest, LoadingThenPublishedHandsOverItsWaiters) {
  const ExtentId id = cache_.InsertLoading(map_, ByteRange{0, 4096}, false);
  ChunkCache::Entry* entry = cache_.Find(id);
  ASSERT_NE(entry, nullptr);
  int called = 0;
  entry->waiters.push_back([&](const StatusOr<std::shared_ptr<const Chunk>>&) { ++called; });
  auto waiters = cache_.Publish(id, NewChunk(ByteRange{0, 4096}));
  ASSERT_TRUE(waiters.has_value());
  ASSERT_EQ(waiters->size(), 1u);
  (*waiters)[0](std::shared_ptr<const Chunk>());
  EXPECT_EQ(called, 1);
  EXPECT_TRUE(map_.Holds(ByteRange{0, 4096}));
}

TEST_F(ChunkCacheTest, TheMapAnswersWhichExtentHoldsAByteAndWhetherARangeIsTouched) {
  Ready(map_, ByteRange{8192, 4096});
  Ready(map_, ByteRange{16384, 8192});
  EXPECT_EQ(map_.At(8191), nullptr);
  ASSERT_NE(map_.At(8192), nullptr);
  EXPECT_EQ(map_.At(12287)->range, (ByteRange{8192, 4096}));
  EXPECT_EQ(map_.At(12288), nullptr);
  EXPECT_EQ(map_.At(24575)->range, (ByteRange{16384, 8192}));
  EXPECT_EQ(map_.At(24576), nullptr);
  for (const ByteRange r : {ByteRange{0, 8192}, ByteRange{12288, 4096}, ByteRange{24576, 1 << 20}}) {
    EXPECT_FALSE(map_.Overlaps(r)) << r.offset << "+" << r.length;
    EXPECT_TRUE(Ranges(map_, r).empty());
  }
  for (const ByteRange r : {ByteRange{0, 8193}, ByteRange{12287, 1}, ByteRange{12288, 4097}, ByteRange{20000, 1},
                            ByteRange{0, 1 << 20}}) {
    EXPECT_TRUE(map_.Overlaps(r)) << r.offset << "+" << r.length;
    EXPECT_FALSE(Ranges(map_, r).empty());
  }
}

TEST_F(ChunkCacheTest, PublishWithNoLoadingEntryIsRefused) {
  EXPECT_FALSE(cache_.Publish(12345, NewChunk(ByteRange{0, 4096})).has_value());
  EXPECT_EQ(cache_.Find(12345), nullptr);
  EXPECT_EQ(cache_.TakeEvicted().size(), 1u) << "the refused chunk is released after the caller's lock";
}

TEST_F(ChunkCacheTest, SecondPublishOfOneEntryIsRefusedAndKeepsTheFirst) {
  const ExtentId id = cache_.InsertLoading(map_, ByteRange{0, 4096}, false);
  std::shared_ptr<const Chunk> first = NewChunk(ByteRange{0, 4096});
  ASSERT_TRUE(cache_.Publish(id, first).has_value());
  EXPECT_FALSE(cache_.Publish(id, NewChunk(ByteRange{0, 4096})).has_value());
  ASSERT_NE(cache_.Find(id), nullptr);
  EXPECT_EQ(cache_.Find(id)->chunk, first);
}

TEST_F(ChunkCacheTest, FailOfAReadyOrMissingEntryIsRefused) {
  EXPECT_FALSE(cache_.Fail(777).has_value());
  const ExtentId id = Ready(map_, ByteRange{0, 4096});
  EXPECT_FALSE(cache_.Fail(id).has_value());
  EXPECT_NE(cache_.Find(id), nullptr) << "the ready entry stays";
}

TEST_F(ChunkCacheTest, FailedExtentLeavesTheMap) {
  const ExtentId id = cache_.InsertLoading(map_, ByteRange{4096, 8192}, true);
  ASSERT_TRUE(cache_.Fail(id).has_value());
  EXPECT_TRUE(map_.Overlapping(ByteRange{0, 1 << 20}).empty());
  EXPECT_EQ(cache_.used(), 0u);
}

TEST_F(ChunkCacheTest, OverlappingFindsEveryExtentTouchingTheRange) {
  Ready(map_, ByteRange{0, 4096});
  Ready(map_, ByteRange{8192, 4096});
  Ready(map_, ByteRange{16384, 8192});
  EXPECT_EQ(Ranges(map_, ByteRange{4095, 8194}), (std::vector<ByteRange>{{0, 4096}, {8192, 4096}}));
  EXPECT_EQ(Ranges(map_, ByteRange{4096, 4096}), std::vector<ByteRange>{}) << "a gap";
  EXPECT_EQ(Ranges(map_, ByteRange{20000, 1}), (std::vector<ByteRange>{{16384, 8192}}));
  EXPECT_FALSE(map_.Holds(ByteRange{16384, 4096})) << "only an extent of exactly that range";
  EXPECT_TRUE(map_.Holds(ByteRange{16384, 8192}));
}

// A whole chunk fetched over small pieces of it replaces them: the map never
// holds the same bytes twice. A loading piece still serves its waiters.
TEST_F(ChunkCacheTest, NewExtentReplacesTheOnesItOverlaps) {
  const ExtentId ready = Ready(map_, ByteRange{4096, 4096});
  const ExtentId loading = cache_.InsertLoading(map_, ByteRange{16384, 4096}, true);
  int served = 0;
  cache_.Find(loading)->waiters.push_back([&](const StatusOr<std::shared_ptr<const Chunk>>& c) { served += c.ok(); });
  const ExtentId whole = cache_.InsertLoading(map_, ByteRange{0, 1 << 20}, true);
  EXPECT_EQ(Ranges(map_, ByteRange{0, 2 << 20}), (std::vector<ByteRange>{{0, 1 << 20}}));
  EXPECT_EQ(cache_.Find(ready), nullptr) << "the ready piece is evicted";
  EXPECT_EQ(cache_.TakeEvicted().size(), 1u);
  auto waiters = cache_.Publish(loading, NewChunk(ByteRange{16384, 4096}));
  ASSERT_TRUE(waiters.has_value());
  for (auto& w : *waiters) w(std::shared_ptr<const Chunk>(NewChunk(ByteRange{16384, 4096})));
  EXPECT_EQ(served, 1);
  EXPECT_EQ(cache_.Find(loading), nullptr) << "a replaced extent is not kept once its waiters have it";
  EXPECT_EQ(cache_.used(), uint64_t{1} << 20);
  ASSERT_TRUE(cache_.Publish(whole, NewChunk(ByteRange{0, 1 << 20})).has_value());
  EXPECT_TRUE(map_.Holds(ByteRange{0, 1 << 20}));
}

// Ids are never reused: a read holding an evicted extent's id cannot mark
// the bytes of the extent that took its place (the out-of-bounds write
// through the delivered bitmap of a shorter entry at the same offset).
TEST_F(ChunkCacheTest, EvictedExtentsIdNamesNothingAfterItsPlaceIsTaken) {
  const ExtentId old_id = Ready(map_, ByteRange{0, 1 << 20});
  ASSERT_TRUE(cache_.Reserve(64 << 20, ChunkCache::Eviction::kAny));
  EXPECT_EQ(cache_.Find(old_id), nullptr);
  EXPECT_TRUE(map_.Overlapping(ByteRange{0, 1 << 20}).empty()) << "eviction takes it out of the map";
  cache_.TakeEvicted();
  const ExtentId new_id = Ready(map_, ByteRange{0, 4096});
  EXPECT_NE(new_id, old_id);
  EXPECT_EQ(cache_.MarkDelivered(old_id, ByteRange{0, 1 << 20}), std::nullopt);
  EXPECT_EQ(cache_.Find(new_id)->delivered_pages, 0u);
  EXPECT_EQ(cache_.MarkDelivered(new_id, ByteRange{0, 4096}), (ByteRange{0, 4096})) << "consumed";
}

TEST_F(ChunkCacheTest, DroppedObjectLosesItsReadyExtentsAndFinishesItsLoadingOnes) {
  Ready(map_, ByteRange{0, 4096});
  const ExtentId loading = cache_.InsertLoading(map_, ByteRange{8192, 4096}, true);
  cache_.DropExtents(object_);
  EXPECT_EQ(cache_.used(), 4096u) << "the loading extent is charged until it lands";
  ASSERT_TRUE(cache_.Publish(loading, NewChunk(ByteRange{8192, 4096})).has_value());
  EXPECT_EQ(cache_.used(), 0u);
  EXPECT_EQ(cache_.entries(), 0u);
  EXPECT_TRUE(cache_.Extents(object_).Overlapping(ByteRange{0, 1 << 20}).empty());
}

TEST_F(ChunkCacheTest, DerivedChunksAreFoundByKeyAndLeaveWithEviction) {
  const ChunkKey key{ObjectId{std::string(1, '\0') + "view", Generation{}}, 3};
  EXPECT_EQ(cache_.FindDerived(key), std::nullopt);
  const ExtentId id = cache_.InsertDerived(key, 4096);
  EXPECT_EQ(cache_.FindDerived(key), id);
  ASSERT_TRUE(cache_.Publish(id, NewChunk(ByteRange{0, 4096})).has_value());
  ASSERT_TRUE(cache_.Reserve(64 << 20, ChunkCache::Eviction::kAny));
  EXPECT_EQ(cache_.FindDerived(key), std::nullopt);
}

}  // namespace
}  // namespace tensorfs
