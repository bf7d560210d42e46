// The fetch planner on its own, with a host that records what it is asked to
// queue: which ranges it requests for a read and for a reader moving on, what
// it leaves out (extents cached or coming, bytes the kernel holds, prefetches
// the cache has no room for), and where it hands over to the next file.
#include "core/engine/fetch_planner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <vector>

namespace tensorfs {

static void PrintTo(const ByteRange& r, std::ostream* os) { *os << r.offset << "+" << r.length; }

namespace {

constexpr uint64_t kChunk = 1 << 20;
constexpr uint64_t kHead = 256 << 10;

class RecordingHost : public FetchPlanner::Host {
 public:
  struct Queued {
    FetchJob job;
    bool prefetch = false;
  };

  explicit RecordingHost(ChunkCache& cache) : cache_(cache) {}

  ObjectState& StateOf(const ObjectInfo& object) override {
    auto [it, inserted] = objects_.try_emplace(object.name);
    if (inserted) {
      it->second.info = object;
      it->second.extents = &cache_.Extents(object.id());
    }
    return it->second;
  }
  void StartHead(ObjectState& state, bool prefetch) override {
    state.head_requested = true;
    heads.push_back(Queued{FetchJob{.object = state.info.id(), .head = true}, prefetch});
  }
  void Enqueue(ObjectState& state, FetchJob job, bool prefetch) override {
    ++state.jobs;
    queued.push_back(Queued{std::move(job), prefetch});
  }
  uint64_t FileReadaheadOf(const ObjectState&, const AccessModel::ActivePattern&) override { return 0; }
  void SweepStarted(const ObjectState&) override {}
  uint64_t SweepsLeft() override { return 0; }

  std::vector<ByteRange> Ranges() const {
    std::vector<ByteRange> out;
    for (const Queued& q : queued) out.push_back(q.job.range);
    return out;
  }

  std::vector<Queued> queued;
  std::vector<Queued> heads;

 private:
  ChunkCache& cache_;
  std::map<std::string, ObjectState> objects_;
};

class FetchPlannerTest : public ::testing::Test {
 protected:
  FetchPlannerTest() {
    state_ = &host_.StateOf(ObjectInfo{.name = "model.bin", .size = 32 * kChunk});
    state_->plan = std::make_shared<const ChunkPlan>(ChunkPlan::Aligned(32 * kChunk, kHead, kChunk));
  }

  // A ready extent over `range` of the object.
  void Cached(ByteRange range) {
    ASSERT_TRUE(cache_.Reserve(range.length, ChunkCache::Eviction::kAny));
    const ExtentId id = cache_.InsertLoading(*state_->extents, range, false);
    ASSERT_TRUE(cache_.Publish(id, std::make_shared<Chunk>(range)).has_value());
  }
  ByteRange ChunkRange(size_t index) const { return state_->plan->Chunk(index); }

  EngineOptions options_{.chunk_size = kChunk, .cache_size = 64 * kChunk, .max_fetches = 4,
                         .prefetch_window = 16 * kChunk};
  Tuning tuning_ = Tuning::For(kChunk, 0);
  Metrics metrics_;
  ChunkCache cache_{options_.cache_size, options_.consumed_keep, metrics_};
  AccessModel model_{tuning_, std::nullopt};
  RecordingHost host_{cache_};
  FetchPlanner planner_{options_, tuning_, cache_, model_, metrics_, host_};
  ObjectState* state_ = nullptr;
};

TEST_F(FetchPlannerTest, AReadCoveredInPartRequestsOnlyTheGapsAndGetsItsExtentsInOrder) {
  const ByteRange chunk = ChunkRange(3);
  Cached(ByteRange{chunk.offset + 256 * 1024, 256 * 1024});
  const FetchPlanner::Want want{chunk, kChunk};

  const auto cover = planner_.Cover(*state_, want, chunk);

  EXPECT_EQ(host_.Ranges(), (std::vector<ByteRange>{ByteRange{chunk.offset, 256 * 1024},
                                                    ByteRange{chunk.offset + 512 * 1024, 512 * 1024}}));
  for (const RecordingHost::Queued& q : host_.queued) EXPECT_FALSE(q.prefetch) << "a read's own bytes are demand";
  ASSERT_EQ(cover.size(), 3u);
  EXPECT_EQ(cover[0].second, nullptr) << "coming";
  EXPECT_NE(cover[1].second, nullptr) << "the cached piece, held for the read";
  EXPECT_EQ(cover[2].second, nullptr) << "coming";
}

TEST_F(FetchPlannerTest, AWholeReaderWantsAChunkNotBegunInOneRequest) {
  const ByteRange chunk = ChunkRange(5);
  const ByteRange part{chunk.offset + 8192, 4096};
  const FetchPlanner::Want want = planner_.WantOf(*state_, chunk, part, FetchPlanner::ReadKind{});
  EXPECT_EQ(want.range, chunk);
  EXPECT_EQ(want.max_piece, chunk.length);
}

TEST_F(FetchPlannerTest, AReaderNotKnownYetWantsTheReadAndAFirstPieceAfterIt) {
  const ByteRange chunk = ChunkRange(5);
  const ByteRange part{chunk.offset + 8192 + 100, 4096};
  const FetchPlanner::Want want =
      planner_.WantOf(*state_, chunk, part, FetchPlanner::ReadKind{.mode = FetchPlanner::Mode::kUnknown});
  EXPECT_EQ(want.range, (ByteRange{chunk.offset + 8192, tuning_.first_piece}));
}

TEST_F(FetchPlannerTest, AViewConfinedToItsTensorsWantsOnlyTheirPartOfAChunk) {
  const ByteRange chunk = ChunkRange(5);
  const ByteRange within{chunk.offset + 300 * 1024, 10 * kChunk};
  const FetchPlanner::Want want =
      planner_.WantOf(*state_, chunk, ByteRange{within.offset, 4096}, FetchPlanner::ReadKind{.within = within});
  EXPECT_EQ(want.range, (ByteRange{within.offset, chunk.end() - within.offset}));
}

TEST_F(FetchPlannerTest, ASequentialReaderIsReadAheadByTheLeastWindowFromItsSecondRead) {
  AccessState access;
  planner_.UpdateStreams(*state_, access, 1, 1, ChunkRange(1).end(), false);
  EXPECT_TRUE(host_.queued.empty()) << "one read says nothing of where the reader goes";
  planner_.UpdateStreams(*state_, access, 2, 2, ChunkRange(2).end(), false);

  std::vector<ByteRange> expected;
  for (size_t i = 3; i < 3 + tuning_.min_stream_window_chunks; ++i) expected.push_back(ChunkRange(i));
  EXPECT_EQ(host_.Ranges(), expected);
  for (const RecordingHost::Queued& q : host_.queued) EXPECT_TRUE(q.prefetch);
}

TEST_F(FetchPlannerTest, AStreamWhoseReadsWaitDoublesItsWindowUpToPrefetchWindow) {
  AccessState access;
  planner_.UpdateStreams(*state_, access, 1, 1, ChunkRange(1).end(), false);
  for (size_t i = 2; i < 6; ++i) planner_.UpdateStreams(*state_, access, i, i, ChunkRange(i).end(), true);
  ASSERT_EQ(access.streams.size(), 1u);
  EXPECT_EQ(access.streams[0].window, options_.prefetch_window);
  EXPECT_EQ(access.streams[0].frontier, 5 + options_.prefetch_window / kChunk);
}

TEST_F(FetchPlannerTest, ChunksTheKernelHoldsAreNotPrefetchedAgain) {
  state_->given.Add(ByteRange{ChunkRange(3).offset, 2 * kChunk});
  AccessState access;
  planner_.UpdateStreams(*state_, access, 1, 1, ChunkRange(1).end(), false);
  planner_.UpdateStreams(*state_, access, 2, 2, ChunkRange(2).end(), false);
  for (const ByteRange& r : host_.Ranges()) {
    EXPECT_NE(r, ChunkRange(3));
    EXPECT_NE(r, ChunkRange(4));
  }
  EXPECT_FALSE(host_.queued.empty());
}

TEST_F(FetchPlannerTest, APrefetchTheCacheHasNoRoomForIsNotMade) {
  // Loading extents are never evicted: fill the budget with them.
  for (size_t i = 1; i <= options_.cache_size / kChunk; ++i) {
    ASSERT_TRUE(cache_.Reserve(kChunk, ChunkCache::Eviction::kAny));
    cache_.InsertLoading(cache_.Extents(ObjectId{"other", Generation{}}),
                         ByteRange{i * kChunk, kChunk}, false);
  }
  planner_.PrefetchRange(*state_, ByteRange{0, 8 * kChunk}, std::nullopt);
  EXPECT_TRUE(host_.queued.empty());
  EXPECT_LE(cache_.used(), cache_.capacity());
}

TEST_F(FetchPlannerTest, AReaderJumpingAroundHasTheObjectSweptInStorageOrder) {
  AccessState access;
  for (size_t at : {2, 20, 9, 27}) planner_.UpdateStreams(*state_, access, at, at, ChunkRange(at).end(), false);
  EXPECT_TRUE(state_->sweep);
  // The sweep runs from the start, in storage order, up to the window in flight.
  std::vector<ByteRange> swept;
  for (const RecordingHost::Queued& q : host_.queued) {
    if (q.job.sweep) swept.push_back(q.job.range);
  }
  ASSERT_FALSE(swept.empty());
  EXPECT_TRUE(std::is_sorted(swept.begin(), swept.end(),
                             [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; }));
  EXPECT_LE(swept.size(), options_.prefetch_window / kChunk);
}

TEST_F(FetchPlannerTest, AReaderNearTheEndHasTheNextFileStartedOnceItsHeadIsIn) {
  const ObjectInfo next{.name = "model-2.bin", .size = 32 * kChunk};
  state_->successor = next;
  AccessState access;
  const size_t last = state_->plan->size() - 1;
  planner_.UpdateStreams(*state_, access, last - 1, last - 1, ChunkRange(last - 1).end(), false);
  planner_.UpdateStreams(*state_, access, last, last, ChunkRange(last).end(), false);

  ASSERT_EQ(host_.heads.size(), 1u);
  EXPECT_EQ(host_.heads[0].job.object.name, next.name);
  EXPECT_TRUE(host_.heads[0].prefetch);
  ObjectState& successor = host_.StateOf(next);
  EXPECT_EQ(successor.continue_bytes, options_.prefetch_window) << "nothing left of this file to fetch";

  // Its head is in: the planner continues into it from its start.
  successor.plan = std::make_shared<const ChunkPlan>(ChunkPlan::Aligned(next.size, kHead, kChunk));
  host_.queued.clear();
  planner_.ContinueInto(successor, successor.continue_bytes, successor.continue_process);
  ASSERT_FALSE(host_.queued.empty());
  EXPECT_EQ(host_.queued.front().job.object.name, next.name);
  EXPECT_EQ(host_.queued.front().job.range, successor.plan->Chunk(1));
}

}  // namespace
}  // namespace tensorfs
