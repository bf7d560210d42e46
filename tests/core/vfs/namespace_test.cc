#include "core/vfs/namespace.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "core/util/thread_annotations.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/manual_clock.h"
#include "tests/support/memory_store.h"
#include "tests/support/test_util.h"

namespace tensorfs {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using std::chrono::seconds;

std::vector<std::string> EntryNames(const std::vector<DirEntry>& entries) {
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  return names;
}

std::string Bytes(const ReadResult& r) {
  std::string s;
  for (auto p : r.pieces) s.append(reinterpret_cast<const char*>(p.data()), p.size());
  return s;
}

// Records what the namespace reports as changed.
class RecordingObserver : public ChangeObserver {
 public:
  void EntriesChanged(NodeId dir, std::vector<std::string> names) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    changes_.emplace_back(dir, std::move(names));
  }
  std::vector<std::pair<NodeId, std::vector<std::string>>> changes() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return changes_;
  }

 private:
  Mutex mu_;
  std::vector<std::pair<NodeId, std::vector<std::string>>> changes_ GUARDED_BY(mu_);
};

// A store whose listings can be held (to have several callers need one at
// once) or made to fail.
class ListGateStore : public ObjectStore {
 public:
  explicit ListGateStore(ObjectStore& inner) : inner_(inner) {}
  void Hold() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    held_ = true;
  }
  void Release() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    held_ = false;
    cv_.NotifyAll();
  }
  void FailLists(bool fail) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    fail_ = fail;
  }
  StatusOr<ObjectInfo> Stat(std::string_view name) override { return inner_.Stat(name); }
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      cv_.Wait(mu_, [&]() REQUIRES(mu_) { return !held_; });
      if (fail_) return UnavailableError("the test store refuses listings");
    }
    return inner_.List(prefix, delimiter);
  }
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override {
    return inner_.Read(object, offset, out);
  }
  std::string Describe() const override { return "gate"; }

 private:
  ObjectStore& inner_;
  Mutex mu_;
  CondVar cv_;
  bool held_ GUARDED_BY(mu_) = false;
  bool fail_ GUARDED_BY(mu_) = false;
};

const EngineOptions kEngineOptions{.chunk_size = 64 << 10, .cache_size = 1 << 20, .max_fetches = 2,
                                       .prefetch_window = 256 << 10};

// A namespace that lists each directory once (metadata_ttl kForever).
class NamespaceTest : public ::testing::Test {
 protected:
  NamespaceTest() {
    store_.Put("config.json", "{}");
    store_.Put("llama/model.safetensors", std::string(100, 'x'));
    store_.Put("llama/tokenizer.json", "tok");
  }
  StatusOr<ReadResult> ReadSync(NodeId id, uint64_t off, size_t size) {
    std::promise<StatusOr<ReadResult>> result;
    ns_.Read(id, off, size, [&](StatusOr<ReadResult> r) { result.set_value(std::move(r)); });
    return result.get_future().get();
  }
  testing::MemoryStore store_;
  Metrics metrics_;
  ReadEngine engine_{store_, kEngineOptions, metrics_};
  Namespace ns_{store_, engine_};
};

TEST_F(NamespaceTest, RootListsFilesAndDirectories) {
  auto dir = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(dir.ok());
  EXPECT_THAT(EntryNames(dir->entries), ElementsAre("config.json", "llama"));
  EXPECT_FALSE(dir->entries[0].attr.is_dir);
  EXPECT_TRUE(dir->entries[1].attr.is_dir);
}

TEST_F(NamespaceTest, LookupGivesExactSizeAndStableIds) {
  auto dir = ns_.Lookup(kRootNode, "llama");
  ASSERT_TRUE(dir.ok());
  auto file = ns_.Lookup(dir->id, "model.safetensors");
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->size, 100u);
  auto again = ns_.Lookup(dir->id, "model.safetensors");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, file->id);
}

TEST_F(NamespaceTest, WithoutTtlADirectoryIsListedOnce) {
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  ASSERT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  ASSERT_TRUE(ns_.Lookup(kRootNode, "missing").status().code() == ErrorCode::kNotFound);
  store_.Put("late.bin", "x");
  store_.Put("config.json", "{\"new\":1}");
  EXPECT_EQ(ns_.Lookup(kRootNode, "late.bin").status().code(), ErrorCode::kNotFound);
  auto config = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->size, 2u);
  EXPECT_TRUE(ns_.Open(config->id).ok());
  EXPECT_EQ(store_.list_count(), 1);
}

TEST_F(NamespaceTest, ReadClipsAtEndOfFile) {
  auto file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  auto r = ReadSync(file->id, 1, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Bytes(*r), "}");
  auto past = ReadSync(file->id, 5, 10);
  ASSERT_TRUE(past.ok());
  EXPECT_EQ(past->size(), 0u);
  EXPECT_EQ(store_.read_count(), 1);  // nothing fetched for a read past the end
}

TEST_F(NamespaceTest, ReadOfReplacedObjectIsStale) {
  auto file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  store_.Put("config.json", "{\"new\":1}");
  auto r = ReadSync(file->id, 0, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kStale);
  EXPECT_THAT(r.status().message(), HasSubstr("config.json"));
}

TEST_F(NamespaceTest, ReadOfDeletedObjectIsNotFound) {
  auto file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  store_.Remove("config.json");
  auto r = ReadSync(file->id, 0, 2);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("config.json"));
}

TEST_F(NamespaceTest, OpenOfDirectoryFails) {
  auto dir = ns_.Lookup(kRootNode, "llama");
  ASSERT_TRUE(dir.ok());
  EXPECT_FALSE(ns_.Open(dir->id).ok());
}

TEST_F(NamespaceTest, UnknownNodeIsNotFound) {
  EXPECT_EQ(ns_.GetAttr(NodeId{999}).status().code(), ErrorCode::kNotFound);
}

TEST_F(NamespaceTest, StatsCountListedBytes) {
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  auto dir = ns_.Lookup(kRootNode, "llama");
  ASSERT_TRUE(ns_.ReadDir(dir->id).ok());
  EXPECT_EQ(ns_.Stats().total_bytes, 2u + 100u + 3u);
}

TEST_F(NamespaceTest, ReadDirSaysWhenItsEntriesAreNewToTheCaller) {
  auto first = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(first.ok());
  EXPECT_TRUE(first->changed);
  auto second = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->changed);
}

// A namespace with a metadata TTL of 60 s and a negative TTL of 5 s, on a
// clock the test moves.
class NamespaceTtlTest : public ::testing::Test {
 protected:
  NamespaceTtlTest() {
    store_.Put("config.json", "{}");
    store_.Put("ckpt/model.safetensors", std::string(100, 'x'));
    store_.Put("ckpt/tokenizer.json", "tok");
    ns_.SetChangeObserver(&observer_);
  }
  NodeId Dir(std::string_view name) {
    auto dir = ns_.Lookup(kRootNode, name);
    TENSORFS_CHECK(dir.ok());
    return dir->id;
  }
  StatusOr<ReadResult> ReadSync(NodeId id, uint64_t off, size_t size) {
    std::promise<StatusOr<ReadResult>> result;
    ns_.Read(id, off, size, [&](StatusOr<ReadResult> r) { result.set_value(std::move(r)); });
    return result.get_future().get();
  }
  void Forget(NodeId id, uint64_t count) {
    const Namespace::Forgotten forgotten[] = {{id, count}};
    ns_.Forget(forgotten);
  }

  testing::ManualClock clock_;
  testing::MemoryStore store_;
  ListGateStore gate_{store_};
  Metrics metrics_;
  ReadEngine engine_{gate_, kEngineOptions, metrics_};
  RecordingObserver observer_;
  Namespace ns_{gate_, engine_, {}, Freshness{.metadata_ttl = seconds(60), .negative_ttl = seconds(5), .clock = &clock_}};
};

TEST_F(NamespaceTtlTest, LookupsAndReadsWithinTheTtlListOnce) {
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  clock_.Advance(seconds(59));
  for (int i = 0; i < 100; ++i) {
    auto file = ns_.Lookup(kRootNode, "config.json");
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(ns_.Open(file->id).ok());
  }
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  EXPECT_EQ(store_.list_count(), 1);
  EXPECT_EQ(metrics_.listings.load(), 1u);
}

TEST_F(NamespaceTtlTest, NewObjectsAndPrefixesAppearAfterTheTtl) {
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  store_.Put("late.json", "{}");
  store_.Put("step-2000/model.safetensors", "x");
  clock_.Advance(seconds(60));
  auto dir = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(dir.ok());
  EXPECT_THAT(EntryNames(dir->entries), ElementsAre("ckpt", "config.json", "late.json", "step-2000"));
  EXPECT_TRUE(dir->changed);
  EXPECT_EQ(store_.list_count(), 2);
}

TEST_F(NamespaceTtlTest, DeletedObjectIsNotFoundAfterTheTtl) {
  ASSERT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  store_.Remove("config.json");
  clock_.Advance(seconds(59));
  EXPECT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  clock_.Advance(seconds(1));
  EXPECT_EQ(ns_.Lookup(kRootNode, "config.json").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(metrics_.entries_removed.load(), 1u);
}

TEST_F(NamespaceTtlTest, ReplacedObjectIsANewNodeWithTheNewVersion) {
  auto old_file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(old_file.ok());
  store_.Put("config.json", "{\"step\":2000}");
  clock_.Advance(seconds(60));
  auto new_file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(new_file.ok());
  EXPECT_NE(new_file->id, old_file->id);
  EXPECT_EQ(new_file->size, 13u);
  auto bytes = ReadSync(new_file->id, 0, 100);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(Bytes(*bytes), "{\"step\":2000}");
  EXPECT_EQ(metrics_.versions_replaced.load(), 1u);
}

TEST_F(NamespaceTtlTest, ANodeKeepsItsVersionsAttributesAfterTheReplace) {
  auto old_file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(old_file.ok());
  store_.Put("config.json", "{\"step\":2000}");
  clock_.Advance(seconds(60));
  ASSERT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  auto attr = ns_.GetAttr(old_file->id);
  ASSERT_TRUE(attr.ok());
  EXPECT_EQ(attr->size, 2u);
}

TEST_F(NamespaceTtlTest, NameNotFoundIsLookedForAgainAfterTheNegativeTtl) {
  ASSERT_EQ(ns_.Lookup(kRootNode, "tokenizer.json").status().code(), ErrorCode::kNotFound);
  store_.Put("tokenizer.json", "tok");
  clock_.Advance(seconds(4));
  EXPECT_EQ(ns_.Lookup(kRootNode, "tokenizer.json").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(store_.list_count(), 1);
  clock_.Advance(seconds(1));
  EXPECT_TRUE(ns_.Lookup(kRootNode, "tokenizer.json").ok());
  EXPECT_EQ(store_.list_count(), 2);
}

TEST_F(NamespaceTtlTest, NamesFoundAreNotLookedForAgainBeforeTheTtl) {
  ASSERT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  clock_.Advance(seconds(30));
  ASSERT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  EXPECT_EQ(store_.list_count(), 1);
}

TEST_F(NamespaceTtlTest, ChangesAreReportedWithTheNamesThatChanged) {
  const NodeId ckpt = Dir("ckpt");
  ASSERT_TRUE(ns_.ReadDir(ckpt).ok());
  store_.Put("ckpt/model.safetensors", std::string(200, 'y'));  // replaced
  store_.Remove("ckpt/tokenizer.json");                         // removed
  store_.Put("ckpt/config.json", "{}");                         // added
  clock_.Advance(seconds(60));
  ASSERT_TRUE(ns_.ReadDir(ckpt).ok());
  auto changes = observer_.changes();
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].first, ckpt);
  EXPECT_THAT(changes[0].second, UnorderedElementsAre("model.safetensors", "tokenizer.json", "config.json"));
}

TEST_F(NamespaceTtlTest, AListingThatFindsNoChangeReportsNothing) {
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  clock_.Advance(seconds(60));
  auto dir = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(dir.ok());
  EXPECT_FALSE(dir->changed);
  EXPECT_EQ(store_.list_count(), 2);
  EXPECT_THAT(observer_.changes(), ::testing::IsEmpty());
  EXPECT_EQ(metrics_.listings_changed.load(), 0u);
}

TEST_F(NamespaceTtlTest, OpenWithinTheTtlAsksTheStoreNothing) {
  auto file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  store_.Put("config.json", "{\"step\":2000}");
  clock_.Advance(seconds(59));
  EXPECT_TRUE(ns_.Open(file->id).ok());
  EXPECT_EQ(store_.list_count(), 1);
}

TEST_F(NamespaceTtlTest, OpenOfAReplacedFileAfterTheTtlIsStale) {
  auto file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  store_.Put("config.json", "{\"step\":2000}");
  clock_.Advance(seconds(60));
  Status open = ns_.Open(file->id);
  EXPECT_EQ(open.code(), ErrorCode::kStale);
  EXPECT_THAT(open.message(), HasSubstr("config.json"));
}

TEST_F(NamespaceTtlTest, OpenOfAFileInADeletedDirectoryIsStale) {
  const NodeId ckpt = Dir("ckpt");
  auto file = ns_.Lookup(ckpt, "tokenizer.json");
  ASSERT_TRUE(file.ok());
  store_.Remove("ckpt/model.safetensors");
  store_.Remove("ckpt/tokenizer.json");
  clock_.Advance(seconds(60));
  EXPECT_EQ(ns_.Open(file->id).code(), ErrorCode::kStale);
}

TEST_F(NamespaceTtlTest, ZeroTtlListsAtEveryLookupAndOpen) {
  Namespace ns(gate_, engine_, {}, Freshness{.metadata_ttl = seconds(0), .negative_ttl = seconds(0), .clock = &clock_});
  auto file = ns.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(ns.Open(file->id).ok());
  ASSERT_TRUE(ns.Lookup(kRootNode, "config.json").ok());
  EXPECT_EQ(store_.list_count(), 3);
}

TEST_F(NamespaceTtlTest, ZeroNegativeTtlLooksForAMissingNameAtEachLookup) {
  Namespace ns(gate_, engine_, {}, Freshness{.metadata_ttl = seconds(60), .negative_ttl = seconds(0), .clock = &clock_});
  ASSERT_EQ(ns.Lookup(kRootNode, "late.json").status().code(), ErrorCode::kNotFound);
  ASSERT_EQ(ns.Lookup(kRootNode, "late.json").status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(store_.list_count(), 2);
  ASSERT_TRUE(ns.Lookup(kRootNode, "config.json").ok());
  EXPECT_EQ(store_.list_count(), 2);
}

TEST_F(NamespaceTtlTest, CallersThatNeedOneDirectoryAtOnceShareOneListing) {
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  clock_.Advance(seconds(60));
  gate_.Hold();
  const uint64_t calls_before = clock_.now_calls();
  constexpr int kCallers = 8;
  std::vector<std::future<bool>> lookups;
  for (int i = 0; i < kCallers; ++i) {
    lookups.push_back(std::async(std::launch::async, [&] { return ns_.Lookup(kRootNode, "config.json").ok(); }));
  }
  // The caller that lists reads the clock twice, each other caller once
  // before it waits for that listing (with the namespace's lock held).
  ASSERT_TRUE(testing::WaitUntil([&] { return clock_.now_calls() >= calls_before + kCallers + 1; },
                        "every caller to reach the listing"));
  gate_.Release();
  for (auto& lookup : lookups) EXPECT_TRUE(lookup.get());
  EXPECT_EQ(store_.list_count(), 2);
}

TEST_F(NamespaceTtlTest, AFailedListingKeepsShowingTheLastOne) {
  ASSERT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  gate_.FailLists(true);
  clock_.Advance(seconds(60));
  EXPECT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  auto dir = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(dir.ok());
  EXPECT_THAT(EntryNames(dir->entries), Contains("config.json"));
}

TEST_F(NamespaceTtlTest, AFirstListingThatFailsSaysWhichDirectory) {
  gate_.FailLists(true);
  StatusOr<NodeAttr> dir = ns_.Lookup(kRootNode, "ckpt");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr("cannot list gate/"));
}

TEST_F(NamespaceTtlTest, ANodeThatLeftTheListingIsFreedWhenTheKernelForgetsIt) {
  auto old_file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(old_file.ok());
  const uint64_t nodes = ns_.Stats().nodes;
  store_.Put("config.json", "{\"step\":2000}");
  clock_.Advance(seconds(60));
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  EXPECT_TRUE(ns_.GetAttr(old_file->id).ok()) << "the kernel still holds it";
  EXPECT_EQ(ns_.Stats().nodes, nodes + 1);
  Forget(old_file->id, 1);
  EXPECT_EQ(ns_.GetAttr(old_file->id).status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(ns_.Stats().nodes, nodes);
  EXPECT_EQ(metrics_.nodes.load(), nodes);
}

TEST_F(NamespaceTtlTest, ANodeStaysWhileTheKernelHoldsAReferenceToIt) {
  auto old_file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(ns_.Lookup(kRootNode, "config.json").ok());
  store_.Put("config.json", "{\"step\":2000}");
  clock_.Advance(seconds(60));
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  Forget(old_file->id, 1);
  EXPECT_TRUE(ns_.GetAttr(old_file->id).ok()) << "one of two lookups forgotten";
  Forget(old_file->id, 1);
  EXPECT_FALSE(ns_.GetAttr(old_file->id).ok());
}

TEST_F(NamespaceTtlTest, ANodeTheKernelNeverHeldIsFreedWhenItLeavesTheListing) {
  auto dir = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(dir.ok());
  const NodeId config = dir->entries[1].attr.id;
  store_.Remove("config.json");
  clock_.Advance(seconds(60));
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  EXPECT_EQ(ns_.GetAttr(config).status().code(), ErrorCode::kNotFound);
}

TEST_F(NamespaceTtlTest, ANodeStillListedStaysWhenTheKernelForgetsIt) {
  auto file = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(file.ok());
  Forget(file->id, 1);
  EXPECT_TRUE(ns_.GetAttr(file->id).ok());
  auto again = ns_.Lookup(kRootNode, "config.json");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, file->id);
}

TEST_F(NamespaceTtlTest, AReadDirPlusEntryOfAFreedNodeIsLeftOut) {
  auto dir = ns_.ReadDir(kRootNode);
  ASSERT_TRUE(dir.ok());
  const NodeId config = dir->entries[1].attr.id;
  store_.Remove("config.json");
  clock_.Advance(seconds(60));
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  EXPECT_EQ(ns_.Acquire(config).status().code(), ErrorCode::kNotFound);
  EXPECT_TRUE(ns_.Acquire(dir->entries[0].attr.id).ok());
}

TEST_F(NamespaceTtlTest, FreeingADirectoryFreesTheChildrenTheKernelDoesNotHold) {
  const NodeId ckpt = Dir("ckpt");
  ASSERT_TRUE(ns_.ReadDir(ckpt).ok());
  const uint64_t nodes = ns_.Stats().nodes;  // the root, config.json, ckpt and its two files
  store_.Remove("ckpt/model.safetensors");
  store_.Remove("ckpt/tokenizer.json");
  clock_.Advance(seconds(60));
  ASSERT_TRUE(ns_.ReadDir(kRootNode).ok());
  EXPECT_EQ(ns_.Stats().nodes, nodes) << "ckpt is held by the kernel";
  Forget(ckpt, 1);
  EXPECT_EQ(ns_.Stats().nodes, nodes - 3);
}

TEST_F(NamespaceTtlTest, RepeatedReplacementsKeepTheTableBounded) {
  const NodeId ckpt = Dir("ckpt");
  for (int i = 0; i < 200; ++i) {
    store_.Put("ckpt/model.safetensors", std::string(100 + i, 'x'));
    clock_.Advance(seconds(60));
    auto file = ns_.Lookup(ckpt, "model.safetensors");
    ASSERT_TRUE(file.ok());
    ASSERT_TRUE(ns_.Open(file->id).ok());
    // The head prefetched for the new version is in before the next one
    // comes: the state of a version with a fetch in flight stays (to the
    // engine's own bound).
    ASSERT_TRUE(testing::WaitUntil([&] { return engine_.Idle(); }, "the engine to settle"));
    Forget(file->id, 1);
  }
  EXPECT_LE(ns_.Stats().nodes, 6u);
  EXPECT_LE(engine_.Sizes().objects, 2u);
}

// A namespace with views over a checkpoint, with a metadata TTL.
class NamespaceViewsTtlTest : public NamespaceTtlTest {
 protected:
  std::string Shard(const std::string& tensor, uint64_t rows) {
    return testing::BuildSafetensorsFile({testing::RawTensor{.name = tensor, .dtype = Dtype::F32, .shape = {rows, 4}}});
  }
  Namespace views_{gate_, engine_,
                   ViewOptions{.kinds = {ViewKind::kTensors},
                               .grouper = std::make_shared<const LayerGrouper>(*LayerGrouper::Create(""))},
                   Freshness{.metadata_ttl = seconds(60), .negative_ttl = seconds(5), .clock = &clock_}};
};

TEST_F(NamespaceViewsTtlTest, ViewsOfAReplacedShardAreBuiltFromTheNewVersion) {
  store_.Put("m/model.safetensors", Shard("a.weight", 2));
  auto m = views_.Lookup(kRootNode, "m");
  ASSERT_TRUE(m.ok());
  auto old_view = views_.Lookup(m->id, "@tensors");
  ASSERT_TRUE(old_view.ok());
  auto old_files = views_.ReadDir(old_view->id);
  ASSERT_TRUE(old_files.ok());
  EXPECT_THAT(EntryNames(old_files->entries), ElementsAre("a.weight.safetensors"));

  store_.Put("m/model.safetensors", Shard("b.weight", 3));
  clock_.Advance(seconds(60));
  auto new_view = views_.Lookup(m->id, "@tensors");
  ASSERT_TRUE(new_view.ok());
  EXPECT_NE(new_view->id, old_view->id);
  auto new_files = views_.ReadDir(new_view->id);
  ASSERT_TRUE(new_files.ok());
  EXPECT_THAT(EntryNames(new_files->entries), ElementsAre("b.weight.safetensors"));
  // The old view directory goes on showing the version it was built from.
  auto kept = views_.ReadDir(old_view->id);
  ASSERT_TRUE(kept.ok());
  EXPECT_THAT(EntryNames(kept->entries), ElementsAre("a.weight.safetensors"));
}

TEST_F(NamespaceViewsTtlTest, ViewsOfAnUnchangedCheckpointStayTheSameNodes) {
  store_.Put("m/model.safetensors", Shard("a.weight", 2));
  auto m = views_.Lookup(kRootNode, "m");
  ASSERT_TRUE(m.ok());
  auto view = views_.Lookup(m->id, "@tensors");
  ASSERT_TRUE(view.ok());
  clock_.Advance(seconds(60));
  auto again = views_.Lookup(m->id, "@tensors");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->id, view->id);
}

TEST_F(NamespaceViewsTtlTest, AViewFileOfAReplacedShardOpenedAgainIsStale) {
  store_.Put("m/model.safetensors", Shard("a.weight", 2));
  auto m = views_.Lookup(kRootNode, "m");
  ASSERT_TRUE(m.ok());
  auto view = views_.Lookup(m->id, "@tensors");
  ASSERT_TRUE(view.ok());
  auto file = views_.Lookup(view->id, "a.weight.safetensors");
  ASSERT_TRUE(file.ok());
  ASSERT_TRUE(views_.Open(file->id).ok());
  store_.Put("m/model.safetensors", Shard("a.weight", 3));
  clock_.Advance(seconds(60));
  EXPECT_EQ(views_.Open(file->id).code(), ErrorCode::kStale);
}

}  // namespace
}  // namespace tensorfs
