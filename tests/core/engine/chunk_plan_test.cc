#include "core/engine/chunk_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST(ChunkPlanTest, SmallTensorsAreCoalescedUpToChunkSize) {
  auto h = HeaderWithTensorSizes({100, 100, 100, 100, 100, 100});
  // Head chunk ends at the data start: 1008. Chunks of at most 250 bytes.
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), h.data_start(), 250);
  ExpectCovers(plan);
  ASSERT_EQ(plan.size(), 4u);  // head, [t0 t1], [t2 t3], [t4 t5]
  EXPECT_EQ(plan.Chunk(1), (ByteRange{1008, 200}));
  EXPECT_EQ(plan.Chunk(3), (ByteRange{1408, 200}));
}

TEST(ChunkPlanTest, LargeTensorIsSplitIntoNearEqualPieces) {
  auto h = HeaderWithTensorSizes({50, 1000, 50});
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), h.data_start(), 300);
  ExpectCovers(plan);
  // head, [t0], t1 in 4 pieces of 250, [t2]
  ASSERT_EQ(plan.size(), 7u);
  for (size_t i = 2; i <= 5; ++i) {
    EXPECT_EQ(plan.Chunk(i).length, 250u);
    EXPECT_EQ(plan.TensorEnd(i), 5u) << "every piece knows the tensor's last piece";
  }
  EXPECT_EQ(plan.TensorEnd(1), 1u);
  EXPECT_EQ(plan.TensorEnd(6), 6u);
}

TEST(ChunkPlanTest, NoChunkExceedsChunkSizeOutsideTheHead) {
  auto h = HeaderWithTensorSizes({10, 700, 3, 3, 299, 301, 1, 1200, 5});
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), h.data_start(), 300);
  ExpectCovers(plan);
  for (size_t i = 1; i < plan.size(); ++i) EXPECT_LE(plan.Chunk(i).length, 300u) << i;
}

TEST(ChunkPlanTest, ChunkBoundariesFallOnTensorBoundariesOrInsideLargeTensors) {
  auto h = HeaderWithTensorSizes({120, 120, 120, 700, 90});
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), h.data_start(), 300);
  std::set<uint64_t> tensor_starts;
  for (const auto& t : h.tensors) tensor_starts.insert(h.data_start() + t.begin);
  for (size_t i = 1; i < plan.size(); ++i) {
    uint64_t start = plan.Chunk(i).offset;
    bool inside_large = start > h.data_start() + 360 && start < h.data_start() + 1060;
    EXPECT_TRUE(tensor_starts.contains(start) || inside_large) << "chunk " << i << " starts at " << start;
  }
}

TEST(ChunkPlanTest, HeadChunkCoversHeaderAndStartOfData) {
  auto h = HeaderWithTensorSizes({100, 100, 100});
  const uint64_t head_end = h.data_start() + 150;  // the first request went into the second tensor
  ChunkPlan plan = ChunkPlan::ForSafetensors(h, FileSize(h), head_end, 1000);
  ExpectCovers(plan);
  EXPECT_EQ(plan.Chunk(0), (ByteRange{0, head_end}));
  EXPECT_EQ(plan.size(), 2u);  // the rest of the data in one chunk
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
  ChunkPlan odd_head = ChunkPlan::Aligned(1000, 100, 256);
  ExpectCovers(odd_head);
  EXPECT_EQ(odd_head.Chunk(1), (ByteRange{100, 156}));  // up to the next multiple
}

}  // namespace
}  // namespace tensorfs
