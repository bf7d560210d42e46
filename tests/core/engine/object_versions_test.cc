// The engine serves each version of an object apart (ObjectId: name and
// generation): reads, prefetches and the read order of a replaced shard never
// reach across versions, and a version forgotten (ReadEngine::ForgetObject)
// leaves nothing behind.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "core/engine/read_engine.h"
#include "core/util/thread_annotations.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/controlled_store.h"
#include "tests/support/memory_store.h"
#include "tests/support/test_util.h"

namespace tensorfs {
namespace {

using testing::MemoryStore;

// Records the object version of every read.
class VersionRecordingStore : public ObjectStore {
 public:
  explicit VersionRecordingStore(ObjectStore& inner) : inner_(inner) {}
  StatusOr<ObjectInfo> Stat(std::string_view name) override { return inner_.Stat(name); }
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override {
    return inner_.List(prefix, delimiter);
  }
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      reads_.push_back(object);
    }
    return inner_.Read(object, offset, out);
  }
  std::string Describe() const override { return "recording"; }
  std::vector<ObjectId> reads() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return reads_;
  }

 private:
  ObjectStore& inner_;
  Mutex mu_;
  std::vector<ObjectId> reads_ GUARDED_BY(mu_);
};

StatusOr<std::string> ReadSync(ReadEngine& engine, const ObjectInfo& object, uint64_t offset, size_t size) {
  std::promise<StatusOr<ReadResult>> promise;
  engine.Read(object, offset, size, [&](StatusOr<ReadResult> r) { promise.set_value(std::move(r)); });
  StatusOr<ReadResult> r = promise.get_future().get();
  if (!r.ok()) return r.status();
  std::string s;
  for (auto p : r->pieces) s.append(reinterpret_cast<const char*>(p.data()), p.size());
  return s;
}

// Fails the test if the engine's fetches never end (a hang).
void WaitIdle(ReadEngine& engine) {
  ASSERT_TRUE(testing::WaitUntil([&] { return engine.Idle(); }, "the engine's fetches to end"));
}

// Two versions of each shard of a small two-shard checkpoint.
class ObjectVersionsTest : public ::testing::Test {
 protected:
  ObjectVersionsTest() {
    for (int version = 0; version < 2; ++version) {
      testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 3, .hidden = 128, .intermediate = 512,
                              .vocab = 1024 + 64 * static_cast<uint64_t>(version), .dtype = Dtype::F32};
      auto files = testing::BuildCheckpointFiles(spec, {.num_shards = 2, .write_extra_files = false});
      EXPECT_TRUE(files.ok());
      files_[version] = std::move(*files);
    }
    s1_ = Put(0, kShard1);
    s2_ = Put(0, kShard2);
  }
  ObjectInfo Put(int version, const std::string& name) {
    memory_.Put(name, files_[version].at(name));
    return *memory_.Stat(name);
  }
  const std::string& Bytes(int version, const std::string& name) { return files_[version].at(name); }

  static inline const std::string kShard1 = "model-00001-of-00002.safetensors";
  static inline const std::string kShard2 = "model-00002-of-00002.safetensors";
  static inline const EngineOptions kOptions{.chunk_size = 64 << 10, .cache_size = 8 << 20, .max_fetches = 4,
                                          .prefetch_window = 256 << 10, .head_size = 16 << 10};
  std::map<std::string, std::string> files_[2];
  MemoryStore memory_;
  VersionRecordingStore recording_{memory_};
  Metrics metrics_;
  ObjectInfo s1_;
  ObjectInfo s2_;
};

TEST_F(ObjectVersionsTest, EachVersionReadsItsOwnBytes) {
  ReadEngine engine(recording_, kOptions, metrics_);
  const uint64_t half = s1_.size / 2;
  auto old_head = ReadSync(engine, s1_, 0, half);
  ASSERT_TRUE(old_head.ok());
  ASSERT_EQ(*old_head, Bytes(0, kShard1).substr(0, half));
  WaitIdle(engine);
  const ObjectInfo s1_new = Put(1, kShard1);
  auto whole = ReadSync(engine, s1_new, 0, s1_new.size);
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(*whole == Bytes(1, kShard1)) << "the new version, whole";
  auto cached = ReadSync(engine, s1_, 0, half);
  ASSERT_TRUE(cached.ok());
  EXPECT_TRUE(*cached == Bytes(0, kShard1).substr(0, half)) << "the old version's cached bytes";
  auto tail = ReadSync(engine, s1_, s1_.size - 4096, 4096);
  if (tail.ok()) {
    EXPECT_TRUE(*tail == Bytes(0, kShard1).substr(s1_.size - 4096)) << "old bytes, or none";
  } else {
    EXPECT_EQ(tail.status().code(), ErrorCode::kStale);
  }
}

TEST_F(ObjectVersionsTest, TheNextShardPrefetchedIsItsVersionInTheReadOrder) {
  ReadEngine engine(recording_, kOptions, metrics_);
  engine.SetReadOrder({s1_, s2_});
  const ObjectInfo s2_new = Put(1, kShard2);
  engine.SetReadOrder({s1_, s2_new});
  for (uint64_t offset = 0; offset < s1_.size; offset += 128 << 10) {
    ASSERT_TRUE(ReadSync(engine, s1_, offset, 128 << 10).ok());
  }
  WaitIdle(engine);
  bool new_version_read = false;
  for (const ObjectId& read : recording_.reads()) {
    EXPECT_NE(read, s2_.id()) << "the replaced version of the next shard was fetched";
    new_version_read |= read == s2_new.id();
  }
  EXPECT_TRUE(new_version_read) << "the start of the next shard was not prefetched";
}

TEST_F(ObjectVersionsTest, AForgottenVersionLeavesNothingCached) {
  ReadEngine engine(recording_, kOptions, metrics_);
  ASSERT_TRUE(ReadSync(engine, s1_, 0, s1_.size).ok());
  WaitIdle(engine);
  ASSERT_EQ(engine.Sizes().objects, 1u);
  ASSERT_GT(engine.Sizes().extents, 0u);
  engine.ForgetObject(s1_.id());
  EXPECT_EQ(engine.Sizes().objects, 0u);
  EXPECT_EQ(engine.Sizes().extents, 0u);
  EXPECT_EQ(metrics_.cache_bytes.load(), 0u);
}

TEST_F(ObjectVersionsTest, AVersionForgottenWhileFetchedIsServedToItsRead) {
  testing::ControlledStore held(memory_);
  ReadEngine engine(held, kOptions, metrics_);
  std::promise<StatusOr<ReadResult>> promise;
  engine.Read(s1_, 0, 4096, [&](StatusOr<ReadResult> r) { promise.set_value(std::move(r)); });
  ASSERT_TRUE(held.WaitForBlocked(1));
  engine.ForgetObject(s1_.id());
  EXPECT_EQ(engine.Sizes().objects, 1u) << "its head fetch still runs";
  held.ReleaseAll();
  StatusOr<ReadResult> r = promise.get_future().get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->size(), 4096u);
}

}  // namespace
}  // namespace tensorfs
