// The read engine where its bookkeeping could go wrong: a cache key reused for
// other bytes while a read still holds the old ones, callbacks and the engine
// lock, a read reaching past the range it named, cache entries that do not
// tile a read. The store here lets the test hold chosen fetches, so each race
// happens in the same order every run.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <set>
#include <thread>

#include "core/engine/read_engine.h"
#include "tests/core/engine/single_shard_checkpoint.h"
#include "tests/support/memory_store.h"

namespace tensorfs {

// Breaks the engine's state as a bug would.
class ReadEngineTestPeer {
 public:
  // Extent `extent` of `object` holds the bytes of `bytes` instead.
  static void PublishWrongBytes(ReadEngine& engine, const ObjectInfo& object, ByteRange extent, ByteRange bytes) {
    MutexLock lock(engine.mu_);
    ObjectState& state = engine.StateOf(object);
    engine.cache_.Reserve(extent.length, ChunkCache::Eviction::kAny);
    const ExtentId id = engine.cache_.InsertLoading(*state.extents, extent, /*prefetched=*/false);
    engine.cache_.Publish(id, std::make_shared<Chunk>(bytes));
  }
};

namespace {

using testing::MemoryStore;
using testing::SingleShardCheckpoint;

constexpr uint64_t kPage = 4096;

// Passes reads through to a MemoryStore, except reads starting at a gated
// offset: those block until the test opens the gate.
class GatedStore : public ObjectStore {
 public:
  explicit GatedStore(ObjectStore& inner) : inner_(inner) {}

  void Gate(uint64_t offset) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    gated_.insert(offset);
  }
  void Open(uint64_t offset) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    gated_.erase(offset);
    cv_.NotifyAll();
  }
  // Waits until a read at `offset` is blocked at its gate.
  bool WaitBlockedAt(uint64_t offset) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return cv_.WaitFor(mu_, std::chrono::seconds(60), [&]() REQUIRES(mu_) { return blocked_.contains(offset); });
  }
  // Waits until a read at `offset` has returned.
  bool WaitServed(uint64_t offset) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return cv_.WaitFor(mu_, std::chrono::seconds(60), [&]() REQUIRES(mu_) { return served_.contains(offset); });
  }

  StatusOr<ObjectInfo> Stat(std::string_view name) override { return inner_.Stat(name); }
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override {
    return inner_.List(prefix, delimiter);
  }
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      blocked_.insert(offset);
      cv_.NotifyAll();
      cv_.Wait(mu_, [&]() REQUIRES(mu_) { return !gated_.contains(offset); });
      blocked_.erase(offset);
    }
    Status status = inner_.Read(object, offset, out);
    MutexLock lock(mu_);
    served_.insert(offset);
    cv_.NotifyAll();
    return status;
  }
  std::string Describe() const override { return "gated " + inner_.Describe(); }

 private:
  ObjectStore& inner_;
  Mutex mu_;
  CondVar cv_;
  std::set<uint64_t> gated_ GUARDED_BY(mu_);
  std::multiset<uint64_t> blocked_ GUARDED_BY(mu_);
  std::set<uint64_t> served_ GUARDED_BY(mu_);
};

std::string Bytes(const ReadResult& r) {
  std::string s;
  for (auto p : r.pieces) s.append(reinterpret_cast<const char*>(p.data()), p.size());
  return s;
}

class ReadEngineDefectsTest : public ::testing::Test {
 protected:
  EngineOptions Options() const {
    return EngineOptions{.chunk_size = 1 << 20, .cache_size = 4 << 20, .max_fetches = 2,
                         .prefetch_window = 1 << 20, .head_size = 64 << 10};
  }

  StatusOr<std::string> ReadSync(ReadEngine& engine, uint64_t offset, uint64_t size, ReadHints hints = {}) {
    std::promise<StatusOr<ReadResult>> promise;
    engine.Read(checkpoint_.shard, offset, size, [&](StatusOr<ReadResult> r) { promise.set_value(std::move(r)); }, hints);
    StatusOr<ReadResult> r = promise.get_future().get();
    if (!r.ok()) return r.status();
    return Bytes(*r);
  }

  SingleShardCheckpoint checkpoint_;
  Metrics metrics_;
};

// A read holds a piece (part of a chunk fetched on its own) while waiting for
// the rest of its range; meanwhile the piece is evicted and another read
// fetches a shorter piece at the same offset. Marking the first read's bytes
// delivered must not touch the new piece (it indexed past its page bitmap).
TEST_F(ReadEngineDefectsTest, DeliveredMarkOfAnEvictedPieceLeavesTheNewPieceAtItsOffsetAlone) {
  GatedStore store(checkpoint_.memory);
  ReadEngine engine(store, Options(), metrics_);
  ASSERT_TRUE(ReadSync(engine, 0, 8).ok());  // the plan
  std::shared_ptr<const ChunkPlan> plan = engine.PlanOf(checkpoint_.shard.id());
  ASSERT_NE(plan, nullptr);
  // Two full chunks c, c + 1 inside one tensor.
  size_t c = plan->size();
  for (size_t i = 1; i + 1 < plan->size(); ++i) {
    const ByteRange a = plan->Chunk(i), b = plan->Chunk(i + 1);
    const int t = plan->TensorAt(a.offset);
    if (t >= 0 && t == plan->TensorAt(b.end() - 1) && a.length == (1u << 20) && b.length == (1u << 20)) {
      c = i;
      break;
    }
  }
  ASSERT_LT(c, plan->size()) << "the checkpoint has a tensor of two chunks or more";
  const ByteRange a = plan->Chunk(c), b = plan->Chunk(c + 1);
  const uint64_t x = (a.end() - (512 << 10)) & ~(kPage - 1);

  // Read 1: 512 KiB of chunk c (a piece at x) and 256 KiB of chunk c + 1,
  // whose fetch is held.
  store.Gate(b.offset);
  std::promise<StatusOr<ReadResult>> first;
  engine.Read(checkpoint_.shard, x, (b.offset - x) + (256 << 10), [&](StatusOr<ReadResult> r) { first.set_value(std::move(r)); });
  ASSERT_TRUE(store.WaitServed(x));
  ASSERT_TRUE(store.WaitBlockedAt(b.offset));

  // Other chunks, read as a view would (no delivery marks), push the piece at
  // x out of the cache.
  int evicting = 0;
  for (size_t i = plan->size() - 1; i > 0 && evicting < 12; --i) {
    const ByteRange r = plan->Chunk(i);
    if (r.end() + (4 << 20) > a.offset && r.offset < b.end() + (4 << 20)) continue;
    ASSERT_TRUE(ReadSync(engine, r.offset, r.length, ReadHints{.prefetch = false, .delivered = false}).ok());
    ++evicting;
  }
  ASSERT_EQ(evicting, 12);

  // Read 2: a page at x: a new, shorter piece there, fetched and read.
  auto second = ReadSync(engine, x, kPage);
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(*second, checkpoint_.source.substr(x, kPage));

  // Read 1 completes and marks its bytes delivered.
  store.Open(b.offset);
  auto future = first.get_future();
  ASSERT_EQ(future.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  StatusOr<ReadResult> r = future.get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(Bytes(*r), checkpoint_.source.substr(x, (b.offset - x) + (256 << 10)));
  // The new piece still serves its bytes.
  auto again = ReadSync(engine, x, kPage);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, checkpoint_.source.substr(x, kPage));
  EXPECT_EQ(metrics_.engine_inconsistencies.load(), 0u);
}

// `done` of a derived read is never called with the engine lock held: a
// callback that calls back into the engine (as a view's reply path may) does
// not deadlock, even when the engine is shutting down.
TEST_F(ReadEngineDefectsTest, DerivedReadRefusedAtUnmountCallsBackWithoutTheEngineLock) {
  GatedStore store(checkpoint_.memory);
  auto engine = std::make_unique<ReadEngine>(store, Options(), metrics_);
  ReadEngine* raw = engine.get();
  ASSERT_TRUE(ReadSync(*raw, 0, 8).ok());
  // A fetch held at its gate keeps the engine's destructor waiting for its worker.
  const uint64_t held = engine->PlanOf(checkpoint_.shard.id())->Chunk(3).offset;
  store.Gate(held);
  std::promise<StatusOr<ReadResult>> pending;
  raw->Read(checkpoint_.shard, held, kPage, [&](StatusOr<ReadResult> r) { pending.set_value(std::move(r)); },
            ReadHints{.prefetch = false});
  ASSERT_TRUE(store.WaitBlockedAt(held));
  std::thread destroy([&] { engine.reset(); });

  // Derived reads until one is refused for the unmount; each callback calls
  // back into the engine.
  auto refused = std::async(std::launch::async, [raw] {
    for (size_t i = 0;; ++i) {
      std::promise<bool> was_refused;
      const ChunkKey key{ObjectId{std::string(1, '\0') + "derived test", Generation{1}}, i};
      raw->ReadDerived(
          key, kPage,
          [](std::function<void(StatusOr<std::shared_ptr<Chunk>>)> publish) {
            publish(std::make_shared<Chunk>(ByteRange{0, kPage}));
          },
          [&](const StatusOr<std::shared_ptr<const Chunk>>& chunk) {
            raw->SlicePatterns();  // takes the engine lock
            was_refused.set_value(!chunk.ok() && chunk.status().code() == ErrorCode::kUnavailable);
          });
      if (was_refused.get_future().get()) return true;
    }
  });
  if (refused.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    ADD_FAILURE() << "a derived read's callback deadlocked on the engine lock";
    std::_Exit(1);  // the engine cannot be torn down from here
  }
  EXPECT_TRUE(refused.get());
  store.Open(held);
  destroy.join();
}

// A read through a view names the part of the object it reads (`within`);
// a chunk of the read lying wholly outside that part is still read, as
// itself (the edge piece's range was computed as a length near 2^64).
TEST_F(ReadEngineDefectsTest, ReadOfAChunkOutsideItsWithinRangeReturnsTheBytes) {
  ReadEngine engine(checkpoint_.memory, Options(), metrics_);
  ASSERT_TRUE(ReadSync(engine, 0, 8).ok());
  auto plan = engine.PlanOf(checkpoint_.shard.id());
  const ByteRange chunk = plan->Chunk(2);
  const ByteRange within = plan->Chunk(5);
  auto bytes = ReadSync(engine, chunk.offset + 100, 5000,
                        ReadHints{.prefetch = false, .delivered = true, .within = within});
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, checkpoint_.source.substr(chunk.offset + 100, 5000));
  engine.Prefetch(checkpoint_.shard, chunk, within);  // nothing of it is inside `within`: nothing to fetch
}

// Cache entries that do not tile a read (a bug) answer that read with an
// error, logged and counted, instead of stopping the daemon.
TEST_F(ReadEngineDefectsTest, EntriesThatDoNotTileAReadAnswerItWithAnErrorAndCountIt) {
  ReadEngine engine(checkpoint_.memory, Options(), metrics_);
  ASSERT_TRUE(ReadSync(engine, 0, 8).ok());
  auto plan = engine.PlanOf(checkpoint_.shard.id());
  const ByteRange chunk = plan->Chunk(4);
  // Chunk 4's extent holds the bytes of another range.
  ReadEngineTestPeer::PublishWrongBytes(engine, checkpoint_.shard, chunk, ByteRange{0, kPage});
  auto bytes = ReadSync(engine, chunk.offset + kPage, kPage, ReadHints{.prefetch = false});
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), ErrorCode::kInternal) << bytes.status().ToString();
  EXPECT_EQ(metrics_.engine_inconsistencies.load(), 1u);
  // The engine goes on serving other reads.
  auto other = ReadSync(engine, plan->Chunk(6).offset, kPage);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(*other, checkpoint_.source.substr(plan->Chunk(6).offset, kPage));
}

}  // namespace
}  // namespace tensorfs
