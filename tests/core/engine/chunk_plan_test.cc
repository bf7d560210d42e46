#include "core/engine/chunk_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

namespace tensorfs {
namespace {

// A header whose tensors have the given sizes, stored back to back.
SafetensorsHeader HeaderWithTensorSizes(std::vector<uint64_t> sizes, uint64_t header_length = 1000) {
  SafetensorsHeader h;
  h.header_length = header_length;
  uint64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    h.tensors.push_back(TensorInfo{"t" + std::to_string(i), Dtype::U8, {sizes[i]}, offset, offset + sizes[i]});
    offset += sizes[i];
  }
  return h;
}

uint64_t FileSize(const SafetensorsHeader& h) { return h.data_start() + h.data_size(); }

// Every byte belongs to exactly one chunk and chunks are in order.
void ExpectCovers(const ChunkPlan& plan) {
  uint64_t next = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    ByteRange c = plan.Chunk(i);
    EXPECT_EQ(c.offset, next) << "chunk " << i;
    EXPECT_GT(c.length, 0u) << "chunk " << i;
    EXPECT_EQ(plan.ChunkAt(c.offset), i);
    EXPECT_EQ(plan.ChunkAt(c.end() - 1), i);
    next = c.end();
  }
  EXPECT_EQ(next, plan.object_size());
}

TEST(ChunkPlanTest, SmallTensorsShareFullSizeChunks) {
  auto h = HeaderWithTensorSizes({100, 100, 100, 100, 100, 100, 100, 100});
  // Head chunk ends at the data start: 1008. Chunks of 250 bytes.
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), h.data_start(), 250);
  ExpectCovers(plan);
  ASSERT_EQ(plan.size(), 4u);  // head, 250, 250, 300 (the last 50 join the one before)
  EXPECT_EQ(plan.Chunk(1), (ByteRange{1008, 250}));
  EXPECT_EQ(plan.Chunk(3), (ByteRange{1508, 300}));
  EXPECT_EQ(plan.data_start(), 1008u);
}

TEST(ChunkPlanTest, LargeTensorIsFetchedAsChunkSizedPieces) {
  auto h = HeaderWithTensorSizes({50, 1000, 50});
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), h.data_start(), 300);
  ExpectCovers(plan);
  // head, then 300, 300, 300, 200 (no remainder under half a chunk)
  ASSERT_EQ(plan.size(), 5u);
  for (size_t i = 1; i <= 3; ++i) EXPECT_EQ(plan.Chunk(i).length, 300u);
  // The large tensor spans chunks 1..4: every one of them knows its last chunk.
  for (size_t i = 1; i <= 4; ++i) EXPECT_EQ(plan.TensorEnd(i), 4u) << i;
}

TEST(ChunkPlanTest, RequestsStayWithinSizeOverChunkPlusOneAndAHalf) {
  std::mt19937_64 rng(5);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint64_t> sizes;
    for (int i = 0; i < 40; ++i) sizes.push_back(1 + rng() % 5000);
    auto h = HeaderWithTensorSizes(sizes);
    const uint64_t chunk = 1000;
    ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), 2000, chunk);
    ExpectCovers(plan);
    EXPECT_LE(static_cast<double>(plan.size()), static_cast<double>(FileSize(h) - 2000) / chunk + 1.5);
    for (size_t i = 1; i < plan.size(); ++i) EXPECT_LE(plan.Chunk(i).length, chunk * 3 / 2);
  }
}

TEST(ChunkPlanTest, EveryChunkOfATensorKnowsWhereItEnds) {
  auto h = HeaderWithTensorSizes({120, 120, 120, 700, 90});
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), h.data_start(), 300);
  for (const auto& t : h.tensors) {
    size_t first = plan.ChunkAt(h.data_start() + t.begin);
    size_t last = plan.ChunkAt(h.data_start() + t.end - 1);
    for (size_t i = first; i <= last; ++i) EXPECT_GE(plan.TensorEnd(i), last) << t.name;
  }
}

TEST(ChunkPlanTest, HeadChunkCoversHeaderAndStartOfData) {
  auto h = HeaderWithTensorSizes({100, 100, 100});
  const uint64_t head_end = h.data_start() + 150;  // the first request went into the second tensor
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), head_end, 1000);
  ExpectCovers(plan);
  EXPECT_EQ(plan.Chunk(0), (ByteRange{0, head_end}));
  EXPECT_EQ(plan.size(), 2u);  // the rest of the data in one chunk
  EXPECT_EQ(plan.TensorEnd(0), 1u) << "the tensor the head ends in goes on in chunk 1";
}

TEST(ChunkPlanTest, HeadStoppingInsideTheHeaderLeavesTheRestAsAChunk) {
  auto h = HeaderWithTensorSizes({100, 100}, /*header_length=*/5000);
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), 4096, 64 << 10);
  ExpectCovers(plan);
  EXPECT_EQ(plan.Chunk(0).length, 4096u);
}

TEST(ChunkPlanTest, WholeFileInHeadIsOneChunk) {
  auto h = HeaderWithTensorSizes({10, 10});
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), 1 << 20, 300);
  EXPECT_EQ(plan.size(), 1u);
  EXPECT_EQ(plan.Chunk(0).length, FileSize(h));
}

TEST(ChunkPlanTest, AlignedPlanCutsAtMultiplesOfChunkSize) {
  ChunkPlan plan = ChunkPlan::Aligned(1000, 256, 256);
  ExpectCovers(plan);
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan.Chunk(3), (ByteRange{768, 232}));
  ChunkPlan small_rest = ChunkPlan::Aligned(1100, 256, 256);
  ExpectCovers(small_rest);
  ASSERT_EQ(small_rest.size(), 4u);
  EXPECT_EQ(small_rest.Chunk(3), (ByteRange{768, 332})) << "a last piece under half a chunk joins the one before";
}

}  // namespace
}  // namespace tensorfs
