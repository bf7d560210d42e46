#include "core/engine/read_engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <future>
#include <random>
#include <thread>

#include "tests/support/test_util.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/controlled_store.h"
#include "tests/support/memory_store.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using testing::ControlledStore;
using testing::MemoryStore;

std::string Bytes(const ReadResult& r) {
  std::string s;
  for (auto p : r.pieces) s.append(reinterpret_cast<const char*>(p.data()), p.size());
  return s;
}

// No byte of `object` was fetched twice (a chunk may come whole or as pieces).
void ExpectNoByteFetchedTwice(const std::vector<testing::RecordedRead>& reads, const std::string& object) {
  std::map<uint64_t, uint64_t> ranges;  // offset -> end
  for (const auto& r : reads) {
    if (r.object != object) continue;
    auto next = ranges.lower_bound(r.offset);
    if (next != ranges.end()) {
      EXPECT_LE(r.offset + r.length, next->first) << "fetched twice: " << r.offset;
    }
    if (next != ranges.begin()) {
      EXPECT_LE(std::prev(next)->second, r.offset) << "fetched twice: " << r.offset;
    }
    ranges[r.offset] = r.offset + r.length;
  }
}

// Reads synchronously through the engine.
StatusOr<std::string> ReadSync(ReadEngine& engine, const ObjectInfo& object, uint64_t offset, size_t size) {
  std::promise<StatusOr<ReadResult>> promise;
  engine.Read(object, offset, size, [&](StatusOr<ReadResult> r) { promise.set_value(std::move(r)); });
  StatusOr<ReadResult> r = promise.get_future().get();
  if (!r.ok()) return r.status();
  return Bytes(*r);
}

// A small checkpoint: a few MiB, tensors of many sizes, in 2 shards.
class ReadEngineTest : public ::testing::Test {
 protected:
  ReadEngineTest() {
    testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 3, .hidden = 128, .intermediate = 512,
                            .vocab = 1024, .dtype = Dtype::F32};
    auto files = testing::BuildCheckpointFiles(spec, {.num_shards = 2});
    EXPECT_TRUE(files.ok());
    for (auto& [name, bytes] : *files) {
      sources_[name] = bytes;
      memory_.Put(name, bytes);
    }
    shard_ = *memory_.Stat("model-00001-of-00002.safetensors");
  }
  EngineOptions SmallOptions() const {
    return EngineOptions{.chunk_size = 64 << 10, .cache_size = 4 << 20, .max_fetches = 4,
                         .prefetch_window = 256 << 10, .head_size = 16 << 10};
  }
  const std::string& Source(const ObjectInfo& o) { return sources_.at(o.name); }
  // Waits until the engine has no fetch queued or running (no read comes
  // meanwhile to start more); fails after kHang, which only a runaway
  // prefetch takes.
  void WaitIdle(ReadEngine& engine) {
    ASSERT_TRUE(testing::WaitUntil([&] { return engine.Idle(); }, "the engine's fetches to stop"));
  }

  MemoryStore memory_;
  std::map<std::string, std::string> sources_;
  ObjectInfo shard_;
  Metrics metrics_;
};

TEST_F(ReadEngineTest, ReadReturnsTheSourceBytes) {
  ReadEngine engine(memory_, SmallOptions(), metrics_);
  auto bytes = ReadSync(engine, shard_, 1000, 300000);
  ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
  EXPECT_EQ(*bytes, Source(shard_).substr(1000, 300000));
}

TEST_F(ReadEngineTest, ReadPastTheEndIsEmptyAndShortAtTheEnd) {
  ReadEngine engine(memory_, SmallOptions(), metrics_);
  EXPECT_EQ(*ReadSync(engine, shard_, shard_.size, 100), "");
  EXPECT_EQ(*ReadSync(engine, shard_, shard_.size - 10, 100), Source(shard_).substr(shard_.size - 10));
}

TEST_F(ReadEngineTest, FirstReadFetchesHeaderAndPlansByTensor) {
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, SmallOptions(), metrics_);
  ASSERT_TRUE(ReadSync(engine, shard_, 0, 8).ok());
  auto plan = engine.PlanOf(shard_.id());
  ASSERT_NE(plan, nullptr);
  auto header = ParseSafetensorsFile(shard_.name, std::as_bytes(std::span(Source(shard_))));
  ASSERT_TRUE(header.ok());
  ChunkPlan expected = ChunkPlan::ForSafetensors(*header, shard_.size, 16 << 10, 64 << 10);
  ASSERT_EQ(plan->size(), expected.size());
  ASSERT_GE(store.reads().size(), 1u);
  EXPECT_EQ(store.reads()[0].offset, 0u);
  EXPECT_EQ(store.reads()[0].length, 16u << 10) << "header and start of data in one request";
}

TEST_F(ReadEngineTest, ConcurrentReadsOfOneChunkShareOneFetch) {
  ControlledStore store(memory_, /*hold=*/false);
  EngineOptions options = SmallOptions();
  options.prefetch_window = 64 << 10;
  ReadEngine engine(store, options, metrics_);
  ASSERT_TRUE(ReadSync(engine, shard_, 0, 8).ok());  // plan known
  WaitIdle(engine);
  auto plan = engine.PlanOf(shard_.id());
  // The last chunk: no prefetch can have fetched it.
  ByteRange target = plan->Chunk(plan->size() - 1);
  store.Hold();
  size_t reads_before = store.reads().size();
  std::vector<std::promise<StatusOr<ReadResult>>> results(8);
  for (int i = 0; i < 8; ++i) {
    engine.Read(shard_, target.offset + i, 100, [&results, i](StatusOr<ReadResult> r) { results[i].set_value(std::move(r)); });
  }
  ASSERT_TRUE(store.WaitForBlocked(1));
  store.ReleaseAll();  // every fetch of the target is counted below: one for the eight readers
  for (int i = 0; i < 8; ++i) {
    auto r = results[i].get_future().get();
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(Bytes(*r), Source(shard_).substr(target.offset + i, 100));
  }
  int fetches_of_target = 0;
  auto reads = store.reads();
  for (size_t i = reads_before; i < reads.size(); ++i) fetches_of_target += reads[i].offset == target.offset;
  EXPECT_EQ(fetches_of_target, 1);
}

TEST_F(ReadEngineTest, ReadDoesNotBlockTheCallerWhileFetching) {
  ControlledStore store(memory_, /*hold=*/true);
  ReadEngine engine(store, SmallOptions(), metrics_);
  std::promise<StatusOr<ReadResult>> result;
  std::promise<void> returned;
  std::thread caller([&] {
    engine.Read(shard_, 0, 4096, [&](StatusOr<ReadResult> r) { result.set_value(std::move(r)); });
    returned.set_value();
  });
  // The store holds every fetch until released: a Read that waited for its
  // fetch would not return (the 60 s only bounds that hang).
  EXPECT_EQ(returned.get_future().wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "Read held its caller until the fetch completed";
  EXPECT_TRUE(store.WaitForBlocked(1));
  store.ReleaseAll();
  caller.join();
  EXPECT_TRUE(result.get_future().get().ok());
}

TEST_F(ReadEngineTest, SequentialReadFetchesEveryChunkOnceAndPrefetchesAhead) {
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, SmallOptions(), metrics_);
  const std::string& src = Source(shard_);
  for (uint64_t off = 0; off < shard_.size; off += 128 << 10) {
    auto bytes = ReadSync(engine, shard_, off, 128 << 10);
    ASSERT_TRUE(bytes.ok());
    ASSERT_EQ(*bytes, src.substr(off, 128 << 10));
  }
  ExpectNoByteFetchedTwice(store.reads(), shard_.name);
  EXPECT_GT(metrics_.prefetches.load(), 0u);
  EXPECT_EQ(metrics_.bytes_fetched.load(), shard_.size);
}

// glibc's memcpy of >= 1 MiB touches the first page, the last page, then the
// rest: through mmap each tensor reads as a jump forward and a jump back.
TEST_F(ReadEngineTest, MemcpyPatternFetchesEachChunkOnce) {
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, SmallOptions(), metrics_);
  const std::string& src = Source(shard_);
  auto header = ParseSafetensorsFile(shard_.name, std::as_bytes(std::span(src)));
  ASSERT_TRUE(header.ok());
  for (const TensorInfo& t : header->tensors) {
    uint64_t begin = header->data_start() + t.begin, end = header->data_start() + t.end;
    uint64_t first_page = begin & ~uint64_t{4095};
    uint64_t last_page = (end - 1) & ~uint64_t{4095};
    ASSERT_TRUE(ReadSync(engine, shard_, first_page, 4096).ok());
    ASSERT_TRUE(ReadSync(engine, shard_, last_page, 4096).ok());
    for (uint64_t p = first_page + 4096; p < last_page; p += 4096) {
      auto page = ReadSync(engine, shard_, p, 4096);
      ASSERT_TRUE(page.ok());
      ASSERT_EQ(*page, src.substr(p, 4096));
    }
  }
  ExpectNoByteFetchedTwice(store.reads(), shard_.name);
  EXPECT_EQ(metrics_.bytes_fetched.load(), shard_.size);
}

TEST_F(ReadEngineTest, RandomTensorOrderFetchesEachChunkAtMostOnce) {
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, SmallOptions(), metrics_);
  const std::string& src = Source(shard_);
  auto header = ParseSafetensorsFile(shard_.name, std::as_bytes(std::span(src)));
  std::vector<TensorInfo> tensors = header->tensors;
  std::shuffle(tensors.begin(), tensors.end(), std::mt19937(3));
  for (const TensorInfo& t : tensors) {
    uint64_t begin = header->data_start() + t.begin;
    auto bytes = ReadSync(engine, shard_, begin, t.size());
    ASSERT_TRUE(bytes.ok());
    ASSERT_EQ(*bytes, src.substr(begin, t.size()));
  }
  ExpectNoByteFetchedTwice(store.reads(), shard_.name);
  EXPECT_LE(metrics_.bytes_fetched.load(), shard_.size);
}

TEST_F(ReadEngineTest, FarJumpFetchesOnlyTheTensorItLandsIn) {
  ControlledStore store(memory_, /*hold=*/false);
  EngineOptions options = SmallOptions();
  ReadEngine engine(store, options, metrics_);
  const std::string& src = Source(shard_);
  auto header = ParseSafetensorsFile(shard_.name, std::as_bytes(std::span(src)));
  ASSERT_TRUE(ReadSync(engine, shard_, 0, 8).ok());
  WaitIdle(engine);
  size_t before = store.reads().size();
  // The largest tensor that does not start in the head chunk.
  auto plan = engine.PlanOf(shard_.id());
  const TensorInfo* big = nullptr;
  for (const auto& t : header->tensors) {
    if (header->data_start() + t.begin >= plan->Chunk(0).end() && (big == nullptr || t.size() > big->size())) big = &t;
  }
  ASSERT_NE(big, nullptr);
  uint64_t begin = header->data_start() + big->begin;
  ASSERT_TRUE(ReadSync(engine, shard_, begin, 4096).ok());
  WaitIdle(engine);
  size_t after_jump = store.reads().size();
  uint64_t fetched = 0;
  for (size_t i = before; i < after_jump; ++i) fetched += store.reads()[i].length;
  EXPECT_LE(fetched, big->size() + (64 << 10)) << "nothing much beyond the tensor";
  // The whole tensor is in memory now: reading it fetches none of it again
  // (the reader moving on may start prefetching the next tensor).
  auto whole = ReadSync(engine, shard_, begin, big->size());
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, src.substr(begin, big->size()));
  auto reads = store.reads();
  for (size_t i = after_jump; i < reads.size(); ++i) {
    EXPECT_GE(reads[i].offset, begin + big->size()) << "fetched again: " << reads[i].offset;
  }
}

// A loader reading the shards one after another, each in its own order (W2):
// its first jump in the next shard, whose start was prefetched for it, shows it
// reads that one out of order too, and the shard comes whole, in storage order.
TEST_F(ReadEngineTest, ReaderComingToTheNextShardOutOfOrderGetsItWholeAtItsFirstJump) {
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, SmallOptions(), metrics_);
  const ObjectInfo second = *memory_.Stat("model-00002-of-00002.safetensors");
  engine.SetReadOrder({shard_, second});
  for (uint64_t off = 0; off < shard_.size; off += 128 << 10) ASSERT_TRUE(ReadSync(engine, shard_, off, 128 << 10).ok());
  WaitIdle(engine);

  auto header = ParseSafetensorsFile(second.name, std::as_bytes(std::span(Source(second))));
  ASSERT_TRUE(header.ok());
  const TensorInfo& last = *std::max_element(header->tensors.begin(), header->tensors.end(),
                                             [](const TensorInfo& a, const TensorInfo& b) { return a.begin < b.begin; });
  const uint64_t begin = header->data_start() + last.begin;
  ASSERT_GT(begin, 2 * SmallOptions().prefetch_window) << "the last tensor must lie past what was prefetched";
  ASSERT_TRUE(ReadSync(engine, second, begin, 4096).ok());
  WaitIdle(engine);

  uint64_t fetched = 0;
  for (const auto& r : store.reads()) fetched += r.object == second.name ? r.length : 0;
  EXPECT_EQ(fetched, second.size);
  ExpectNoByteFetchedTwice(store.reads(), second.name);
}

TEST_F(ReadEngineTest, ConsumedChunksAreEvictedFirst) {
  ControlledStore store(memory_, /*hold=*/false);
  // Room for 3 chunks of 64 KiB; no prefetch beyond the tensor.
  EngineOptions options{.chunk_size = 64 << 10, .cache_size = 192 << 10, .max_fetches = 1,
                        .prefetch_window = 64 << 10, .head_size = 64 << 10};
  ReadEngine engine(store, options, metrics_);
  std::string big(2 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  memory_.Put("blob.bin", big);
  ObjectInfo blob = *memory_.Stat("blob.bin");  // not safetensors: aligned 64 KiB chunks
  // Chunk 0 read whole (consumed); chunk 5 read in part.
  ASSERT_TRUE(ReadSync(engine, blob, 0, 64 << 10).ok());
  ASSERT_TRUE(ReadSync(engine, blob, 5 * (64 << 10) + 100, 100).ok());
  // Far reads (never sequential, so nothing is prefetched) fill the cache and
  // force evictions.
  for (uint64_t c = 10; c < 14; c += 3) ASSERT_TRUE(ReadSync(engine, blob, c * (64 << 10), 10).ok());
  size_t before = store.reads().size();
  ASSERT_TRUE(ReadSync(engine, blob, 5 * (64 << 10) + 200, 100).ok());
  EXPECT_EQ(store.reads().size(), before) << "the partly read chunk stayed";
  ASSERT_TRUE(ReadSync(engine, blob, 100, 100).ok());
  EXPECT_EQ(store.reads().size(), before + 1) << "the consumed chunk went first";
  EXPECT_GT(metrics_.cache_evictions.load(), 0u);
}

// A reader streaming through a file larger than the window: the chunks the
// kernel has all of go once more than consumed_keep bytes of them are held, so
// the cache holds a window of the file, not the file, and fetches take the
// buffers of the chunks the reader is done with instead of mapping new ones.
TEST_F(ReadEngineTest, StreamingReaderHoldsAWindowAndFetchesIntoReusedBuffers) {
  ControlledStore store(memory_, /*hold=*/false);
  const uint64_t chunk = 64 << 10;
  EngineOptions options{.chunk_size = chunk, .cache_size = 16 << 20, .max_fetches = 4,
                        .prefetch_window = 256 << 10, .head_size = chunk, .consumed_keep = 4 * chunk};
  BufferPool::Options pool_options;
  pool_options.max_idle_bytes = 16 * chunk;
  auto pool = std::make_shared<BufferPool>(pool_options);
  ReadEngine engine(store, options, metrics_, pool);
  std::string big(4 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13);
  memory_.Put("blob.bin", big);
  const ObjectInfo blob = *memory_.Stat("blob.bin");  // not safetensors: aligned 64 KiB chunks

  uint64_t most_cached = 0;
  for (uint64_t off = 0; off < blob.size; off += 128 << 10) {
    auto bytes = ReadSync(engine, blob, off, 128 << 10);
    ASSERT_TRUE(bytes.ok());
    ASSERT_EQ(*bytes, big.substr(off, 128 << 10));
    most_cached = std::max(most_cached, metrics_.cache_bytes.load());
  }
  WaitIdle(engine);
  ExpectNoByteFetchedTwice(store.reads(), blob.name);
  // At most consumed_keep + the window + what a read and its fetches in flight hold.
  const uint64_t bound = options.consumed_keep + options.prefetch_window + (2 + options.max_fetches) * chunk;
  EXPECT_LE(most_cached, bound) << "the cache held " << most_cached << " bytes of a " << blob.size << "-byte file";
  const BufferPool::Counters counters = pool->counters();
  EXPECT_LE(counters.mapped, bound / chunk + 2) << "buffers mapped for " << blob.size / chunk << " chunks";
  EXPECT_GE(counters.reused, blob.size / chunk / 2);
}

// Sequential readers share prefetch_window: one alone whose reads wait for
// its prefetches (a link with a long first byte) grows its window past the
// least, four at once a quarter each, so that many readers do not fill the
// cache with chunks none of them has read yet.
TEST_F(ReadEngineTest, ConcurrentSequentialReadersShareThePrefetchWindow) {
  const uint64_t chunk = 64 << 10;
  const EngineOptions options{.chunk_size = chunk, .cache_size = 32 << 20, .max_fetches = 4,
                              .prefetch_window = 1 << 20, .head_size = chunk, .consumed_keep = chunk};
  std::vector<ObjectInfo> blobs;
  for (int b = 0; b < 4; ++b) {
    std::string bytes(4 << 20, static_cast<char>('a' + b));
    const std::string name = "blob" + std::to_string(b) + ".bin";
    memory_.Put(name, bytes);
    blobs.push_back(*memory_.Stat(name));
  }
  const uint64_t step = 128 << 10;
  {
    Metrics metrics;
    ControlledStore store(memory_, /*hold=*/true);
    ReadEngine engine(store, options, metrics);
    uint64_t most = 0;
    for (uint64_t off = 0; off < 8 * step; off += step) {
      // Each read finds its chunks still being prefetched, and waits for them:
      // fetches are let through one at a time, oldest first, only until the
      // read is answered, so the prefetches ahead of it stay in flight.
      std::promise<Status> done;
      engine.Read(blobs[0], off, step, [&](StatusOr<ReadResult> r) { done.set_value(r.status()); });
      std::future<Status> result = done.get_future();
      for (int i = 0; i < 60000 && result.wait_for(std::chrono::milliseconds(1)) != std::future_status::ready; ++i) {
        if (store.blocked() > 0) store.Release(1);
      }
      ASSERT_EQ(result.wait_for(std::chrono::seconds(0)), std::future_status::ready) << "a read hung for 60 s";
      ASSERT_TRUE(result.get().ok());
      most = std::max(most, metrics.cache_bytes.load());
    }
    store.ReleaseAll();
    // The least window is 4 chunks; each wait doubles it. Without a wait the
    // cache holds at most the window, the 2 chunks a read spans and the kept
    // one: 7 chunks. Which reads wait depends on the order the workers hand
    // fetches to the store, so the test asks for one doubling at least.
    EXPECT_GE(most, 9 * chunk) << "a reader alone that waits grows past the least window";
  }
  Metrics metrics;
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, options, metrics);
  uint64_t most = 0;
  for (uint64_t off = 0; off < blobs[0].size; off += step) {
    for (const ObjectInfo& blob : blobs) {
      auto bytes = ReadSync(engine, blob, off, step);
      ASSERT_TRUE(bytes.ok());
      ASSERT_EQ(*bytes, std::string(step, blob.name[4] - '0' + 'a'));
      most = std::max(most, metrics.cache_bytes.load());
    }
  }
  WaitIdle(engine);
  for (const ObjectInfo& blob : blobs) ExpectNoByteFetchedTwice(store.reads(), blob.name);
  // The window, plus per reader what its read and the chunk it is in hold, plus the kept chunk.
  const uint64_t bound = options.prefetch_window + blobs.size() * (step + chunk) + options.consumed_keep;
  EXPECT_LE(most, bound) << "four readers held " << most << " bytes";
}

// A reader whose prefetches arrive before it needs them (a store that keeps
// up, such as a local directory) is read ahead no further than the least
// window: the cache holds no more fresh buffers than that.
TEST_F(ReadEngineTest, AReaderNeverWaitingIsReadAheadTheLeastWindow) {
  const uint64_t chunk = 64 << 10;
  const EngineOptions options{.chunk_size = chunk, .cache_size = 32 << 20, .max_fetches = 4,
                              .prefetch_window = 1 << 20, .head_size = chunk, .consumed_keep = chunk};
  memory_.Put("blob.bin", std::string(4 << 20, 'a'));
  const ObjectInfo blob = *memory_.Stat("blob.bin");
  Metrics metrics;
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, options, metrics);
  uint64_t most = 0;
  for (uint64_t off = 0; off < blob.size; off += 128 << 10) {
    ASSERT_TRUE(ReadSync(engine, blob, off, 128 << 10).ok());
    // Its prefetches are in before its next read.
    WaitIdle(engine);
    most = std::max(most, metrics.cache_bytes.load());
  }
  // The least window (4 chunks), the chunks the read spans, the kept one.
  EXPECT_LE(most, 4 * chunk + 3 * chunk + options.consumed_keep);
}

TEST_F(ReadEngineTest, ReplacedObjectReadsAsStale) {
  ReadEngine engine(memory_, SmallOptions(), metrics_);
  ASSERT_TRUE(ReadSync(engine, shard_, 0, 100).ok());
  memory_.Put(shard_.name, std::string(shard_.size, 'n'));
  auto r = ReadSync(engine, shard_, shard_.size - 1000, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kStale);
  EXPECT_THAT(r.status().message(), HasSubstr(shard_.name));
}

TEST_F(ReadEngineTest, FailedFetchIsReportedAndRetriedByTheNextRead) {
  testing::FaultInjectingStore faulty(memory_);
  ReadEngine engine(faulty, SmallOptions(), metrics_);
  faulty.FailReads(1, UnavailableError("server down"));
  auto r = ReadSync(engine, shard_, 0, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("server down"));
  auto again = ReadSync(engine, shard_, 0, 100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, Source(shard_).substr(0, 100));
  EXPECT_EQ(metrics_.errors_by_code[static_cast<size_t>(ErrorCode::kUnavailable)].load(), 1u);
}

TEST_F(ReadEngineTest, MalformedSafetensorsIsServedAsPlainBytes) {
  std::string bad = Source(shard_);
  bad[0] = '\xff';
  bad[6] = '\x7f';  // header length beyond the file
  memory_.Put("bad.safetensors", bad);
  ObjectInfo info = *memory_.Stat("bad.safetensors");
  ReadEngine engine(memory_, SmallOptions(), metrics_);
  auto r = ReadSync(engine, info, 0, info.size);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, bad);
}

// Random reads from many threads always equal the source, and the cache stays
// within its bound while 16 readers run.
TEST_F(ReadEngineTest, RandomConcurrentReadsEqualTheSourceWithinTheMemoryBound) {
  EngineOptions options{.chunk_size = 64 << 10, .cache_size = 1 << 20, .max_fetches = 4,
                        .prefetch_window = 256 << 10, .head_size = 16 << 10};
  ReadEngine engine(memory_, options, metrics_);
  std::vector<ObjectInfo> objects;
  for (const auto& [name, bytes] : sources_) objects.push_back(*memory_.Stat(name));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> peak{0};
  std::thread sampler([&] {
    while (!stop) {
      uint64_t used = metrics_.cache_bytes.load();
      uint64_t p = peak.load();
      while (used > p && !peak.compare_exchange_weak(p, used)) {
      }
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> readers;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 16; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int i = 0; i < 150; ++i) {
        const ObjectInfo& o = objects[rng() % objects.size()];
        uint64_t off = rng() % (o.size + 10);
        size_t len = 1 + rng() % (300 << 10);
        auto r = ReadSync(engine, o, off, len);
        std::string want = off >= o.size ? "" : sources_.at(o.name).substr(off, len);
        if (!r.ok() || *r != want) ++mismatches;
      }
    });
  }
  for (auto& r : readers) r.join();
  stop = true;
  sampler.join();
  EXPECT_EQ(mismatches.load(), 0);
  // Demand reads may exceed the bound by the chunks they need when the cache is
  // full of loading chunks: 16 readers x (300 KiB / 64 KiB + 1) chunks at most.
  EXPECT_LE(peak.load(), options.cache_size + 16 * 6 * (64 << 10));
  // Idle, the cache is back within the bound but for the pieces of the last
  // reads that found it full of chunks readers were using (chunk_cache.h): a
  // later request evicts those chunks once no read has taken bytes of them
  // for a cache's worth of bytes delivered.
  EXPECT_LE(metrics_.cache_bytes.load(), options.cache_size + 16 * 6 * (64 << 10)) << "back near the bound when idle";
}

TEST(EngineOptionsTest, CacheTooSmallForTheFetchesSaysWhatToChange) {
  EngineOptions options{.chunk_size = 8 << 20, .cache_size = 64 << 20, .max_fetches = 32};
  Status s = options.Validate();
  EXPECT_THAT(s.message(), HasSubstr("raise cache_size"));
  EXPECT_TRUE(EngineOptions{}.Validate().ok());
}


TEST_F(ReadEngineTest, PrefetchFetchesExactlyTheChunksOfTheRange) {
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, SmallOptions(), metrics_);
  ASSERT_TRUE(ReadSync(engine, shard_, 0, 8).ok());  // the plan
  WaitIdle(engine);
  auto plan = engine.PlanOf(shard_.id());
  const size_t before = store.reads().size();
  const uint64_t prefetches = metrics_.prefetches.load();
  const ByteRange chunk = plan->Chunk(plan->size() - 2);
  engine.Prefetch(shard_, ByteRange{chunk.offset + 10, 100});
  WaitIdle(engine);
  ASSERT_EQ(store.reads().size(), before + 1);
  EXPECT_EQ(store.reads().back().offset, chunk.offset);
  EXPECT_EQ(store.reads().back().length, chunk.length);
  EXPECT_EQ(metrics_.prefetches.load(), prefetches + 1);
}

TEST_F(ReadEngineTest, ReadWithoutPrefetchHintFetchesOnlyWhatItNeeds) {
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, SmallOptions(), metrics_);
  ReadHints exact{.prefetch = false, .delivered = false};
  for (uint64_t off = 0; off < 600000; off += 4096) {
    std::promise<StatusOr<ReadResult>> done;
    engine.Read(shard_, off, 4096, [&](StatusOr<ReadResult> r) { done.set_value(std::move(r)); }, exact);
    ASSERT_TRUE(done.get_future().get().ok());
  }
  WaitIdle(engine);
  uint64_t fetched = 0;
  for (const auto& r : store.reads()) fetched += r.length;
  EXPECT_LE(fetched, 600000u + (64u << 10));
  EXPECT_EQ(metrics_.prefetches.load(), 0u);
}

TEST_F(ReadEngineTest, DerivedChunkIsComputedOnceForConcurrentReaders) {
  ReadEngine engine(memory_, SmallOptions(), metrics_);
  const ChunkKey key{ObjectId{"\nderived", Generation{1}}, 7};
  std::atomic<int> computed{0};
  std::function<void(StatusOr<std::shared_ptr<Chunk>>)> publish;
  DeriveFn derive = [&](std::function<void(StatusOr<std::shared_ptr<Chunk>>)> p) {
    ++computed;
    publish = std::move(p);  // completed below, after every reader waits
  };
  std::vector<std::promise<std::string>> got(4);
  for (auto& promise : got) {
    engine.ReadDerived(key, 5, derive, [&promise](const StatusOr<std::shared_ptr<const Chunk>>& chunk) {
      promise.set_value(chunk.ok() ? std::string(reinterpret_cast<const char*>((*chunk)->bytes().data()), 5) : "error");
    });
  }
  EXPECT_EQ(computed.load(), 1);
  auto chunk = std::make_shared<Chunk>(ByteRange{0, 5});
  std::memcpy(chunk->writable().data(), "hello", 5);
  publish(chunk);
  for (auto& promise : got) EXPECT_EQ(promise.get_future().get(), "hello");
  // Cached now.
  std::promise<bool> again;
  engine.ReadDerived(key, 5, derive, [&](const StatusOr<std::shared_ptr<const Chunk>>& c) { again.set_value(c.ok()); });
  EXPECT_TRUE(again.get_future().get());
  EXPECT_EQ(computed.load(), 1);
}

TEST_F(ReadEngineTest, FailedDerivedChunkIsReportedAndComputedAgainNextTime) {
  ReadEngine engine(memory_, SmallOptions(), metrics_);
  const ChunkKey key{ObjectId{"\nderived", Generation{1}}, 0};
  int computed = 0;
  DeriveFn failing = [&](auto publish) {
    ++computed;
    publish(UnavailableError("source unreachable"));
  };
  std::promise<Status> first;
  engine.ReadDerived(key, 5, failing, [&](const StatusOr<std::shared_ptr<const Chunk>>& c) { first.set_value(c.status()); });
  EXPECT_THAT(first.get_future().get().message(), HasSubstr("source unreachable"));
  std::promise<Status> second;
  engine.ReadDerived(key, 5, failing, [&](const StatusOr<std::shared_ptr<const Chunk>>& c) { second.set_value(c.status()); });
  EXPECT_FALSE(second.get_future().get().ok());
  EXPECT_EQ(computed, 2);
}


TEST_F(ReadEngineTest, ReadWithinFetchesOnlyInsideItsRange) {
  ControlledStore store(memory_, /*hold=*/false);
  ReadEngine engine(store, SmallOptions(), metrics_);
  ASSERT_TRUE(ReadSync(engine, shard_, 0, 8).ok());  // the plan
  WaitIdle(engine);
  auto plan = engine.PlanOf(shard_.id());
  ASSERT_GE(plan->size(), 4u);
  // A range that starts and ends inside chunks it shares with others.
  const ByteRange within{plan->Chunk(1).offset + 1000, plan->Chunk(2).end() - plan->Chunk(1).offset - 2000};
  const size_t before = store.reads().size();
  std::promise<StatusOr<ReadResult>> done;
  engine.Read(shard_, within.offset, within.length, [&](StatusOr<ReadResult> r) { done.set_value(std::move(r)); },
              ReadHints{.prefetch = false, .delivered = true, .within = within});
  StatusOr<ReadResult> r = done.get_future().get();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Bytes(*r), Source(shard_).substr(within.offset, within.length));
  WaitIdle(engine);
  uint64_t fetched = 0;
  for (size_t i = before; i < store.reads().size(); ++i) fetched += store.reads()[i].length;
  EXPECT_EQ(fetched, within.length);
  // A plain read of the same chunks fetches them whole, and answers correctly.
  auto whole = ReadSync(engine, shard_, plan->Chunk(1).offset, plan->Chunk(1).length);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, Source(shard_).substr(plan->Chunk(1).offset, plan->Chunk(1).length));
}

}  // namespace
}  // namespace tensorfs
