// BufferPool and pooled Chunks: a buffer goes back to the pool only when the
// last holder of its chunk lets go (a reply in flight included), idle buffers
// stay within their bound and lifetime, and the read engine reuses buffers.
#include "core/engine/buffer_pool.h"
#include "tests/support/test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "core/engine/chunk.h"
#include "core/engine/read_engine.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/controlled_store.h"
#include "tests/support/memory_store.h"

namespace tensorfs {
namespace {

using testing::ControlledStore;
using testing::MemoryStore;

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

BufferPool::Options Bounded(uint64_t max_idle_bytes) {
  BufferPool::Options o;
  o.max_idle_bytes = max_idle_bytes;
  o.idle_ttl = std::chrono::hours(1);  // trimming by age only where a test asks for it
  return o;
}

std::shared_ptr<Chunk> Filled(const std::shared_ptr<BufferPool>& pool, size_t length, char fill) {
  auto chunk = std::make_shared<Chunk>(ByteRange{0, length}, pool);
  std::memset(chunk->writable().data(), fill, length);
  return chunk;
}

TEST(BufferPoolTest, BufferOfAChunkStillHeldIsNeverHandedToANewChunk) {
  auto pool = std::make_shared<BufferPool>(Bounded(64 << 20));
  const size_t size = 16 * kPage;
  std::shared_ptr<Chunk> cached = Filled(pool, size, 'a');
  std::shared_ptr<const Chunk> reply = cached;  // a reply still being written to the kernel
  const std::byte* held = reply->bytes().data();
  cached.reset();  // evicted from the cache

  // Chunks come and go (each leaves its buffer idle in the pool for the next).
  for (int i = 0; i < 20; ++i) {
    std::shared_ptr<Chunk> other = Filled(pool, size, 'b');
    EXPECT_NE(other->bytes().data(), held) << "a held buffer was lent to chunk " << i;
  }
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(reply->bytes().data()), size), std::string(size, 'a'));
  EXPECT_GT(pool->counters().reused, 0u);
}

TEST(BufferPoolTest, BufferReturnsWhenTheLastHolderLetsGo) {
  auto pool = std::make_shared<BufferPool>(Bounded(64 << 20));
  std::shared_ptr<const Chunk> reply = Filled(pool, 16 * kPage, 'a');
  const std::byte* held = reply->bytes().data();
  EXPECT_EQ(pool->counters().idle_buffers, 0u);
  reply.reset();
  EXPECT_EQ(pool->counters().idle_buffers, 1u);
  auto next = std::make_shared<Chunk>(ByteRange{0, 16 * kPage}, pool);
  EXPECT_EQ(next->bytes().data(), held);
  EXPECT_EQ(pool->counters().reused, 1u);
}

TEST(BufferPoolTest, LargerIdleBufferServesASmallerChunkAndShrinks) {
  BufferPool pool(Bounded(64 << 20));
  pool.Release(pool.Acquire(8 * kPage));
  BufferPool::Buffer b = pool.Acquire(5 * kPage - 10);
  EXPECT_EQ(b.capacity, 5 * kPage);
  EXPECT_EQ(pool.counters().reused, 1u);
  pool.Release(b);
}

TEST(BufferPoolTest, IdleBufferTwiceTheSizeNeededIsNotUsed) {
  BufferPool pool(Bounded(64 << 20));
  pool.Release(pool.Acquire(16 * kPage));
  BufferPool::Buffer b = pool.Acquire(8 * kPage);
  EXPECT_EQ(pool.counters().reused, 0u);
  EXPECT_EQ(pool.counters().idle_buffers, 1u);
  pool.Release(b);
}

TEST(BufferPoolTest, IdleBytesStayWithinTheBound) {
  BufferPool pool(Bounded(10 * kPage));
  std::vector<BufferPool::Buffer> out;
  for (int i = 0; i < 5; ++i) out.push_back(pool.Acquire(4 * kPage));
  for (const auto& b : out) pool.Release(b);
  BufferPool::Counters c = pool.counters();
  EXPECT_LE(c.idle_bytes, 10 * kPage);
  EXPECT_EQ(c.idle_buffers, 2u);
  EXPECT_EQ(c.unmapped, 3u);
}

TEST(BufferPoolTest, BufferLargerThanTheBoundIsUnmappedAtOnce) {
  BufferPool pool(Bounded(4 * kPage));
  pool.Release(pool.Acquire(8 * kPage));
  EXPECT_EQ(pool.counters().idle_buffers, 0u);
  EXPECT_EQ(pool.counters().unmapped, 1u);
}

// A stream's prefetch window comes back all at once at the end of a file; with
// a budget, the idle buffers keep it (up to what the buffers out leave free of
// the budget) for the next file's fetches instead of mapping fresh ones.
TEST(BufferPoolTest, AWindowReturnedAtOnceIsKeptWithinTheBudget) {
  BufferPool::Options o = Bounded(2 * 16 * kPage);
  o.budget = 8 * 16 * kPage;
  BufferPool pool(o);
  std::vector<BufferPool::Buffer> window;
  for (int i = 0; i < 8; ++i) window.push_back(pool.Acquire(16 * kPage));
  for (BufferPool::Buffer& b : window) {
    pool.Release(b);
    const BufferPool::Counters c = pool.counters();
    EXPECT_LE(c.idle_bytes, o.max_idle_bytes + (o.budget - c.out_bytes));
  }
  EXPECT_EQ(pool.counters().idle_buffers, 8u);
  EXPECT_EQ(pool.counters().unmapped, 0u);
  window.clear();
  for (int i = 0; i < 8; ++i) window.push_back(pool.Acquire(16 * kPage));
  EXPECT_EQ(pool.counters().reused, 8u);
  EXPECT_EQ(pool.counters().mapped, 8u);
  EXPECT_EQ(pool.counters().out_bytes, 8 * 16 * kPage);
  for (BufferPool::Buffer& b : window) pool.Release(b);
}

// Buffers out take their room from the budget: idle buffers never hold more than
// max_idle_bytes plus what the buffers out leave free of it.
TEST(BufferPoolTest, IdleBuffersGiveWayToTheBuffersOut) {
  BufferPool::Options o = Bounded(2 * 16 * kPage);
  o.budget = 8 * 16 * kPage;
  BufferPool pool(o);
  std::vector<BufferPool::Buffer> held;
  for (int i = 0; i < 10; ++i) held.push_back(pool.Acquire(16 * kPage));  // out past the budget
  for (int i = 0; i < 4; ++i) {
    pool.Release(held.back());
    held.pop_back();
  }
  // Out: 6 buffers, so 2 of the budget are free, and 2 more of max_idle_bytes.
  EXPECT_EQ(pool.counters().out_bytes, 6 * 16 * kPage);
  EXPECT_EQ(pool.counters().idle_buffers, 4u);
  held.push_back(pool.Acquire(16 * kPage));  // takes an idle one
  held.push_back(pool.Acquire(64 * kPage));  // maps: out is now 7 x 16 pages + 64 pages, past the budget
  pool.Release(pool.Acquire(16 * kPage));    // the limit is now max_idle_bytes alone: 2 stay idle
  EXPECT_LE(pool.counters().idle_bytes, o.max_idle_bytes);
  for (BufferPool::Buffer& b : held) pool.Release(b);
  EXPECT_EQ(pool.counters().out_bytes, 0u);
}

TEST(BufferPoolTest, IdleBuffersAreUnmappedAfterTheirLifetime) {
  BufferPool::Options o;
  o.max_idle_bytes = 64 << 20;
  o.idle_ttl = std::chrono::milliseconds(40);
  BufferPool pool(o);
  pool.Release(pool.Acquire(4 * kPage));
  ASSERT_EQ(pool.counters().idle_buffers, 1u);
  ASSERT_TRUE(testing::WaitUntil([&] { return pool.counters().idle_buffers == 0; }, "the idle buffer to be unmapped"));
  EXPECT_EQ(pool.counters().idle_bytes, 0u);
}

TEST(BufferPoolTest, ChunkOutlivingItsPoolOwnerStaysReadable) {
  auto pool = std::make_shared<BufferPool>(Bounded(64 << 20));
  std::shared_ptr<const Chunk> reply = Filled(pool, 4 * kPage, 'z');
  pool.reset();  // the engine that owned the pool is gone; the reply is not
  EXPECT_EQ(static_cast<char>(reply->bytes()[4 * kPage - 1]), 'z');
}

// Through the read engine, with the test deciding when each fetch completes:
// a reply held while the cache evicts its chunk and refills with other chunks
// (on reused buffers) keeps its bytes.
TEST(BufferPoolTest, EngineReplyHeldAcrossEvictionKeepsItsBytes) {
  MemoryStore memory;
  testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 3, .hidden = 128, .intermediate = 512,
                          .vocab = 1024, .dtype = Dtype::F32};
  auto files = testing::BuildCheckpointFiles(spec, {.num_shards = 1});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  std::string name, source;
  for (const auto& [file, bytes] : *files) {
    if (file.ends_with(".safetensors")) name = file, source = bytes;
  }
  ASSERT_FALSE(name.empty());
  memory.Put(name, source);
  ObjectInfo object = *memory.Stat(name);
  ASSERT_GT(object.size, 3u << 20);

  ControlledStore store(memory, /*hold=*/true);
  Metrics metrics;
  auto pool = std::make_shared<BufferPool>(Bounded(64 << 20));
  ReadEngine engine(store, EngineOptions{.chunk_size = 64 << 10, .cache_size = 1 << 20, .max_fetches = 2,
                                         .prefetch_window = 128 << 10, .head_size = 16 << 10},
                    metrics, pool);

  auto read = [&](uint64_t offset, size_t size) {
    std::promise<StatusOr<ReadResult>> promise;
    engine.Read(object, offset, size, [&](StatusOr<ReadResult> r) { promise.set_value(std::move(r)); });
    return promise.get_future().get();
  };
  const uint64_t held_offset = 1 << 20;
  std::promise<StatusOr<ReadResult>> first;
  engine.Read(object, held_offset, 64 << 10, [&](StatusOr<ReadResult> r) { first.set_value(std::move(r)); });
  ASSERT_TRUE(store.WaitForBlocked(1));
  store.ReleaseAll();
  StatusOr<ReadResult> reply = first.get_future().get();
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  std::set<const std::byte*> held;
  for (auto piece : reply->pieces) held.insert(piece.data());

  // Read the rest of the object, 3x the cache: the held chunk is evicted and
  // its neighbours' buffers are reused over and over.
  for (uint64_t offset = 2 << 20; offset + (128 << 10) <= object.size; offset += 128 << 10) {
    StatusOr<ReadResult> r = read(offset, 128 << 10);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    for (auto piece : r->pieces) EXPECT_EQ(held.count(piece.data()), 0u) << "at offset " << offset;
  }
  std::string bytes;
  for (auto piece : reply->pieces) bytes.append(reinterpret_cast<const char*>(piece.data()), piece.size());
  EXPECT_EQ(bytes, source.substr(held_offset, 64 << 10));
  EXPECT_GT(pool->counters().reused, 0u);
}

// A loader reading one file after another: each file's prefetch window comes
// back to the pool when the reader reaches its end, and the next file's fetches
// reuse it. Over 8 files of 32 chunks the pool maps no more than twice the
// buffers the cache's budget and the idle bound hold (a chunk evicted while a
// reply holds it is out past the budget for a moment); with the idle bound
// alone it mapped about 90.
TEST(BufferPoolTest, SequentialFilesReuseTheWindowOfTheFileBefore) {
  MemoryStore memory;
  constexpr uint64_t kChunk = 64 << 10;
  constexpr uint64_t kFile = 2 << 20;  // 32 chunks
  std::vector<ObjectInfo> objects;
  for (int f = 0; f < 8; ++f) {
    const std::string name = "file" + std::to_string(f) + ".bin";
    memory.Put(name, std::string(kFile, static_cast<char>('a' + f)));
    objects.push_back(*memory.Stat(name));
  }
  Metrics metrics;
  const EngineOptions options{.chunk_size = kChunk, .cache_size = 512 << 10, .max_fetches = 4,
                              .prefetch_window = 1 << 20, .head_size = 16 << 10, .consumed_keep = 128 << 10};
  BufferPool::Options pool_options = BufferPool::Options::ForCache(options.cache_size);
  pool_options.metrics = &metrics;
  auto pool = std::make_shared<BufferPool>(pool_options);
  ReadEngine engine(memory, options, metrics, pool);
  for (const ObjectInfo& object : objects) {
    for (uint64_t offset = 0; offset < kFile; offset += 128 << 10) {
      std::promise<StatusOr<ReadResult>> promise;
      engine.Read(object, offset, 128 << 10, [&](StatusOr<ReadResult> r) { promise.set_value(std::move(r)); });
      StatusOr<ReadResult> r = promise.get_future().get();
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      ASSERT_EQ(r->size(), 128u << 10);
    }
  }
  const BufferPool::Counters c = pool->counters();
  EXPECT_LE(c.mapped * kChunk, 2 * (options.cache_size + pool_options.max_idle_bytes))
      << c.mapped << " buffers mapped, " << c.reused << " reused, " << c.unmapped << " unmapped";
  EXPECT_GT(c.reused, c.mapped);
  EXPECT_EQ(metrics.buffers_mapped.load(), c.mapped);  // as `tensorfs stats` shows them
  EXPECT_EQ(metrics.buffers_reused.load(), c.reused);
}

}  // namespace
}  // namespace tensorfs
