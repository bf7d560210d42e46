// The read engine's state per reader (an open file) and its bounds: readers
// interleaved on one mount each keep their own access pattern, and the state
// kept stays bounded however many objects, generations and readers come.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "core/engine/read_engine.h"
#include "tests/core/engine/single_shard_checkpoint.h"
#include "tests/support/test_util.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/controlled_store.h"
#include "tests/support/memory_store.h"

namespace tensorfs {
namespace {

using testing::ControlledStore;
using testing::MemoryStore;
using testing::RecordedRead;
using testing::SingleShardCheckpoint;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kRead = 128 << 10;  // the kernel's read size at the default readahead

// One kernel read of one reader.
struct KernelRead {
  ReaderId reader;
  ByteRange range;
};

class ReaderStateTest : public ::testing::Test {
 protected:
  EngineOptions Options() const {
    return EngineOptions{.chunk_size = 1 << 20, .cache_size = 256 << 20, .max_fetches = 4,
                         .prefetch_window = 16 << 20, .head_size = 64 << 10};
  }

  void Read(ReadEngine& engine, const ObjectInfo& object, const std::string& source, KernelRead r) {
    const uint64_t size = std::min(r.range.length, object.size - r.range.offset);
    std::promise<StatusOr<ReadResult>> promise;
    engine.Read(object, r.range.offset, size, [&](StatusOr<ReadResult> x) { promise.set_value(std::move(x)); },
                ReadHints{.reader = r.reader});
    StatusOr<ReadResult> result = promise.get_future().get();
    ASSERT_TRUE(result.ok()) << result.status().ToString();
    std::string got;
    for (auto p : result->pieces) got.append(reinterpret_cast<const char*>(p.data()), p.size());
    ASSERT_EQ(got, source.substr(r.range.offset, size)) << "at " << r.range.offset;
  }

  // The kernel's reads for an mmap reader copying [begin, end) with memcpy: the
  // read-around of the first page, of the last page, then the pages between.
  std::vector<ByteRange> KernelReads(uint64_t begin, uint64_t end) const {
    std::vector<ByteRange> out;
    auto around = [&](uint64_t at) {
      const uint64_t b = (at > kRead / 2 ? at - kRead / 2 : 0) & ~(kPage - 1);
      out.push_back(ByteRange{b, std::min(kRead, checkpoint_.shard.size - b)});
    };
    around(begin);
    around(end - 1);
    for (uint64_t at = (begin + kRead / 2) & ~(kPage - 1); at < end - kRead / 2; at += kRead) {
      out.push_back(ByteRange{at, std::min(kRead, end - kRead / 2 - at)});
    }
    return out;
  }

  static ByteRange Rows(const TensorSpan& t, uint64_t rank, uint64_t world) {
    const uint64_t n = t.rows();
    return ByteRange{t.begin + rank * n / world * t.row_bytes, ((rank + 1) * n / world - rank * n / world) * t.row_bytes};
  }

  // Whole readers copy every tensor; slice readers copy rows rank/world of
  // every tensor; all in storage order, their kernel reads interleaved one by
  // one. Checks that every slice reader's fraction is learned.
  void InterleaveWholeAndSliceReaders(int whole_readers, const std::vector<uint64_t>& ranks, uint64_t world) {
    ControlledStore store(checkpoint_.memory, /*hold=*/false);
    ReadEngine engine(store, Options(), metrics_);
    ReadInterleaved(engine, whole_readers, ranks, world, /*first_reader=*/100);
    if (::testing::Test::HasFatalFailure()) return;
    const std::vector<SlicePattern> learned = engine.SlicePatterns();
    for (uint64_t rank : ranks) {
      const SlicePattern want{.lo_num = rank, .hi_num = rank + 1, .den = world};
      EXPECT_TRUE(std::any_of(learned.begin(), learned.end(), [&](const SlicePattern& p) { return p.SameSlice(want); }))
          << "rank " << rank << " of " << world << " not learned";
    }
  }

  // The kernel reads of `whole_readers` whole-tensor readers and of slice
  // readers of `ranks` of `world`, readers numbered from `first_reader`.
  void ReadInterleaved(ReadEngine& engine, int whole_readers, const std::vector<uint64_t>& ranks, uint64_t world,
                       uint64_t first_reader) {
    Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{ReaderId{1}, ByteRange{0, 8}});
    const std::vector<TensorSpan> tensors = engine.PlanOf(checkpoint_.shard.id())->tensors();
    std::vector<std::vector<KernelRead>> lists;
    uint64_t next_reader = first_reader;
    for (int w = 0; w < whole_readers; ++w) {
      std::vector<KernelRead>& list = lists.emplace_back();
      const ReaderId id{next_reader++};
      for (const TensorSpan& t : tensors) {
        for (const ByteRange& r : KernelReads(t.begin, t.end)) list.push_back(KernelRead{id, r});
      }
    }
    for (uint64_t rank : ranks) {
      std::vector<KernelRead>& list = lists.emplace_back();
      const ReaderId id{next_reader++};
      for (const TensorSpan& t : tensors) {
        if (t.rows() < world) continue;
        const ByteRange rows = Rows(t, rank, world);
        for (const ByteRange& r : KernelReads(rows.offset, rows.end())) list.push_back(KernelRead{id, r});
      }
    }
    for (size_t step = 0;; ++step) {
      bool any = false;
      for (const auto& list : lists) {
        if (step >= list.size()) continue;
        any = true;
        Read(engine, checkpoint_.shard, checkpoint_.source, list[step]);
        if (::testing::Test::HasFatalFailure()) return;
      }
      if (!any) break;
    }
  }

  SingleShardCheckpoint checkpoint_;
  Metrics metrics_;
};

// Two whole-tensor readers and two slice readers of other ranks read the same
// tensors at once: the slice readers' fractions are learned from their own
// reads (the whole readers' reads of the same tensors used to merge into
// theirs and teach nothing).
TEST_F(ReaderStateTest, TwoWholeAndTwoSliceReadersInterleavedEachKeepTheirPattern) {
  InterleaveWholeAndSliceReaders(2, {0, 2}, 4);
}

// The last rank's slice ends with its tensor, so the kernel's readahead after
// it goes on into the next tensor: a read across the edge, then reads inside
// the next tensor's first pages. Those reads are not a place the reader chose:
// taking them for one made its own rows of that tensor, read next, a "return
// at another place", and the reader a scattered one that is never learned.
TEST_F(ReaderStateTest, LastRanksReadaheadIntoTheNextTensorIsNoPlaceItChose) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  const ReaderId reader{300};
  Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, ByteRange{0, 8}});
  const std::vector<TensorSpan> tensors = engine.PlanOf(checkpoint_.shard.id())->tensors();
  constexpr uint64_t kWorld = 4;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSpan& t = tensors[i];
    if (t.rows() < kWorld) continue;
    const ByteRange rows = Rows(t, kWorld - 1, kWorld);
    for (const ByteRange& r : KernelReads(rows.offset, rows.end())) {
      Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, r});
      if (::testing::Test::HasFatalFailure()) return;
    }
    // The readahead's next window, inside the next tensor past the read
    // across the edge.
    if (i + 1 < tensors.size() && tensors[i + 1].size() > kRead) {
      const uint64_t at = (tensors[i + 1].begin + kRead / 2 + kPage - 1) & ~(kPage - 1);
      Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, ByteRange{at, kRead / 2}});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  const SlicePattern want{.lo_num = kWorld - 1, .hi_num = kWorld, .den = kWorld};
  const std::vector<SlicePattern> learned = engine.SlicePatterns();
  EXPECT_TRUE(std::any_of(learned.begin(), learned.end(), [&](const SlicePattern& p) { return p.SameSlice(want); }))
      << "rank 3 of 4 not learned";
}

// What the engine learns of its readers sets the readahead of the files
// opened next (readahead_policy.h), handed to the sink the mount gives.
class ReadaheadSinkTest : public ReaderStateTest {
 protected:
  EngineOptions Options() const {
    EngineOptions o = ReaderStateTest::Options();
    o.readahead = ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/0);
    return o;
  }
  // A mount given -o shard=rank/world.
  EngineOptions ShardOptions(uint64_t rank, uint64_t world) const {
    EngineOptions o = Options();
    o.readahead = ReadaheadPolicy::ForMount(false, 0, world);
    o.shard_rank = rank;
    o.shard_world = world;
    return o;
  }
  std::vector<uint64_t> applied_;  // the sink's calls, in order
};

// The slice readahead follows the slices' size: rank 1 of 2 of this
// checkpoint's tensors averages more than ReadaheadPolicy::kSmallSliceDefault,
// rank 1 of 4 less, where the kernel's reads around each slice at
// kSliceDefault would add more than a tenth.
TEST_F(ReadaheadSinkTest, SliceReaderLearnedSetsTheSliceReadaheadOfItsSlicesSize) {
  for (const uint64_t world : {2u, 4u}) {
    applied_.clear();
    ControlledStore store(checkpoint_.memory, /*hold=*/false);
    ReadEngine engine(store, Options(), metrics_);
    engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
    EXPECT_EQ(applied_, std::vector<uint64_t>{128 << 10});
    ReadInterleaved(engine, 0, {1}, world, /*first_reader=*/100);
    engine.ReleaseReader(ReaderId{100});
    const SlicePattern slice{.lo_num = 1, .hi_num = 2, .den = world};
    const uint64_t mean = slice.MeanCore(engine.PlanOf(checkpoint_.shard.id())->tensors());
    ASSERT_EQ(mean < ReadaheadPolicy::kSmallSliceDefault, world == 4) << "the checkpoint's slices average " << mean;
    const uint64_t want = world == 4 ? ReadaheadPolicy::kSliceSmallDefault : ReadaheadPolicy::kSliceDefault;
    EXPECT_EQ(applied_, (std::vector<uint64_t>{128 << 10, want})) << "rank 1 of " << world;
    EXPECT_EQ(engine.WantedReadahead(), want) << "rank 1 of " << world;
  }
}

// A safetensors file being opened gets its own value through the sink before
// the open is answered: a shard of several half the kernel's default while
// nothing is known of the readers; other files leave the value in force.
TEST_F(ReadaheadSinkTest, AFileBeingOpenedGetsItsOwnReadaheadFirst) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
  engine.Opening("m/model-00001-of-00002.safetensors");
  engine.Opening("m/model-00002-of-00002.safetensors");
  EXPECT_EQ(applied_, (std::vector<uint64_t>{128 << 10, ReadaheadPolicy::kUnknownShardDefault}));
  engine.Opening("m/config.json");
  engine.Opening("m/model.safetensors");
  EXPECT_EQ(applied_, (std::vector<uint64_t>{128 << 10, ReadaheadPolicy::kUnknownShardDefault,
                                              ReadaheadPolicy::kUnknownDefault}));
  ReadInterleaved(engine, 1, {0, 2}, 4, /*first_reader=*/100);
  ASSERT_EQ(applied_.back(), ReadaheadPolicy::kWholeDefault);
  const size_t calls = applied_.size();
  engine.Opening("m/model-00002-of-00002.safetensors");
  EXPECT_EQ(applied_.size(), calls) << "a whole reader seen: every file gets the whole readers' value";
}

TEST_F(ReadaheadSinkTest, WholeReaderSetsTheWholeReadaheadAndSliceReadersDoNotWhileItReads) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
  ReadInterleaved(engine, 1, {0, 2}, 4, /*first_reader=*/100);
  EXPECT_EQ(applied_, (std::vector<uint64_t>{128 << 10, ReadaheadPolicy::kWholeDefault}));
  // Once the whole reader's file is closed, a slice reader learned anew sets it.
  engine.ReleaseReader(ReaderId{100});
  ReadInterleaved(engine, 0, {3}, 4, /*first_reader=*/200);
  EXPECT_EQ(applied_.back(), ReadaheadPolicy::kSliceSmallDefault);  // slices of 4 hosts: small ones
}

// Readers of two processes on one mount: a whole-tensor loader (process
// kLoader) of one checkpoint, whole/, and a slice host (process kHost) of
// another of the same shapes, slice/ (or of whole/ itself). What each
// fetches is what it fetches alone: neither takes the other's mode, the
// readahead its files are opened with, nor the other's slice patterns.
class TwoProcessesTest : public ReadaheadSinkTest {
 protected:
  static constexpr uint64_t kLoader = 1001;
  static constexpr uint64_t kHost = 1002;
  static constexpr uint64_t kWorld = 4;
  static constexpr uint64_t kRank = 1;

  TwoProcessesTest() {
    checkpoint_.memory.Put("whole/model.safetensors", checkpoint_.source);
    checkpoint_.memory.Put("slice/model.safetensors", checkpoint_.source);
    whole_ = *checkpoint_.memory.Stat("whole/model.safetensors");
    slice_ = *checkpoint_.memory.Stat("slice/model.safetensors");
  }

  // One fetch at a time, the engine settling after each read: the requests
  // are the same on every run.
  EngineOptions Options() const {
    EngineOptions o = ReadaheadSinkTest::Options();
    o.max_fetches = 1;
    return o;
  }

  struct ObjectRead {
    const ObjectInfo* object;
    KernelRead read;
  };

  // The tensors of the checkpoint (both objects hold the same bytes).
  std::vector<TensorSpan> Tensors() {
    ControlledStore store(checkpoint_.memory, /*hold=*/false);
    Metrics metrics;
    ReadEngine engine(store, Options(), metrics);
    Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{ReaderId{1}, ByteRange{0, 8}});
    return engine.PlanOf(checkpoint_.shard.id())->tensors();
  }

  // A loader of `object` copying every tensor in storage order, its header
  // read first.
  std::vector<ObjectRead> Loader(const ObjectInfo& object, ReaderId reader) {
    std::vector<ObjectRead> out{{&object, KernelRead{reader, ByteRange{0, kRead}}}};
    for (const TensorSpan& t : Tensors()) {
      for (const ByteRange& r : KernelReads(t.begin, t.end)) out.push_back({&object, KernelRead{reader, r}});
    }
    return out;
  }

  // A host of `object` copying rows kRank/kWorld of every tensor.
  std::vector<ObjectRead> Host(const ObjectInfo& object, ReaderId reader) {
    std::vector<ObjectRead> out{{&object, KernelRead{reader, ByteRange{0, kRead}}}};
    for (const TensorSpan& t : Tensors()) {
      if (t.rows() < kWorld) continue;
      const ByteRange rows = Rows(t, kRank, kWorld);
      for (const ByteRange& r : KernelReads(rows.offset, rows.end())) out.push_back({&object, KernelRead{reader, r}});
    }
    return out;
  }

  // Makes `reads` in order, the engine settling after each (a fetch that
  // never ends fails the test).
  void ReadAll(ReadEngine& engine, const std::vector<ObjectRead>& reads) {
    for (const ObjectRead& r : reads) {
      Read(engine, *r.object, checkpoint_.source, r.read);
      if (::testing::Test::HasFatalFailure()) return;
      for (int waited = 0; !engine.Idle(); ++waited) {
        ASSERT_LT(waited, 600000) << "the engine did not settle";  // 60 s: a hang
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
  }

  // The requests made for `object` (offset, length), sorted: the fetch
  // queue's order among a read's requests is not the engine's choice.
  static std::vector<std::pair<uint64_t, uint64_t>> RequestsFor(const ControlledStore& store,
                                                                const ObjectInfo& object) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const RecordedRead& r : store.reads()) {
      if (r.object == object.name) out.emplace_back(r.offset, r.length);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  // Runs `reads` on a fresh engine with a sink, as a mount has; returns the
  // requests for `object`, and the slice patterns learned in `patterns`.
  std::vector<std::pair<uint64_t, uint64_t>> Run(const std::vector<ObjectRead>& reads, const ObjectInfo& object,
                                                 std::vector<SlicePattern>* patterns = nullptr) {
    ControlledStore store(checkpoint_.memory, /*hold=*/false);
    Metrics metrics;
    ReadEngine engine(store, Options(), metrics);
    engine.SetReadaheadSink([](uint64_t) {});
    ReadAll(engine, reads);
    if (patterns != nullptr) *patterns = engine.SlicePatterns();
    return RequestsFor(store, object);
  }

  // `a`'s first `lead` reads, then the rest of `a` and `b`, one read of each
  // in turn (two processes reading at once).
  static std::vector<ObjectRead> Together(const std::vector<ObjectRead>& a, size_t lead,
                                          const std::vector<ObjectRead>& b) {
    std::vector<ObjectRead> out(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(std::min(lead, a.size())));
    for (size_t i = lead, j = 0; i < a.size() || j < b.size(); ++i, ++j) {
      if (i < a.size()) out.push_back(a[i]);
      if (j < b.size()) out.push_back(b[j]);
    }
    return out;
  }

  // How many reads a loader makes of its header and first tensor.
  size_t FirstTensorReads() {
    const TensorSpan t = Tensors().front();
    return 1 + KernelReads(t.begin, t.end).size();
  }

  ObjectInfo whole_;
  ObjectInfo slice_;
};

// The host opens its file once the loader of another process is known to
// read whole tensors (the loader 1 s ahead, or its first tensor copied before
// the host's first read): it is not taken for a whole-tensor reader (which
// fetched its file whole), its slice is learned, and it fetches exactly what
// it fetches alone.
TEST_F(TwoProcessesTest, SliceHostFetchesWhatItFetchesAloneBesideAWholeLoaderOfAnotherProcess) {
  const std::vector<ObjectRead> loader = Loader(whole_, ReaderId{10, kLoader});
  const std::vector<ObjectRead> host = Host(slice_, ReaderId{20, kHost});
  ASSERT_FALSE(HasFatalFailure());
  std::vector<SlicePattern> learned;
  const auto alone = Run(host, slice_, &learned);
  ASSERT_EQ(learned.size(), 1u);
  ASSERT_TRUE(learned[0].SameSlice(SlicePattern{.lo_num = kRank, .hi_num = kRank + 1, .den = kWorld}))
      << learned[0].ToString();
  uint64_t fetched = 0;
  for (const auto& [offset, length] : alone) fetched += length;
  ASSERT_LT(fetched, slice_.size / 2) << "alone, the host fetches its slices";

  const std::vector<std::pair<std::string, std::vector<ObjectRead>>> schedules = {
      {"the loader first", Together(loader, loader.size(), host)},
      {"together, the loader's first tensor first", Together(loader, FirstTensorReads(), host)}};
  for (const auto& [what, reads] : schedules) {
    SCOPED_TRACE(what);
    std::vector<SlicePattern> beside_learned;
    EXPECT_EQ(Run(reads, slice_, &beside_learned), alone);
    EXPECT_TRUE(std::any_of(beside_learned.begin(), beside_learned.end(),
                            [&](const SlicePattern& p) { return p.SameSlice(learned[0]); }))
        << "the host's slice not learned";
  }
}

// The loader of another process reads its file once the host's slice is
// learned: its reads that fall in the host's windows are still a whole-tensor
// reader's (they were served as the host's slice, window by window), and it
// fetches exactly what it fetches alone.
TEST_F(TwoProcessesTest, WholeLoaderFetchesWhatItFetchesAloneBesideASliceHostOfAnotherProcess) {
  const std::vector<ObjectRead> loader = Loader(whole_, ReaderId{10, kLoader});
  const std::vector<ObjectRead> host = Host(slice_, ReaderId{20, kHost});
  ASSERT_FALSE(HasFatalFailure());
  const auto alone = Run(loader, whole_);
  ASSERT_FALSE(alone.empty());
  EXPECT_EQ(Run(Together(host, host.size(), loader), whole_), alone);
}

// The host reads the loader's checkpoint, whole/, the loader having copied
// its first tensor: the host's own reads are no whole-tensor copy, and it is
// not taken for one; its slice is learned.
TEST_F(TwoProcessesTest, SliceHostOfTheLoadersCheckpointLearnsItsSlice) {
  const std::vector<ObjectRead> loader = Loader(whole_, ReaderId{10, kLoader});
  const std::vector<ObjectRead> host = Host(whole_, ReaderId{20, kHost});
  ASSERT_FALSE(HasFatalFailure());
  std::vector<SlicePattern> learned;
  Run(Together(loader, FirstTensorReads(), host), whole_, &learned);
  EXPECT_TRUE(std::any_of(learned.begin(), learned.end(), [&](const SlicePattern& p) {
    return p.SameSlice(SlicePattern{.lo_num = kRank, .hi_num = kRank + 1, .den = kWorld});
  })) << "the host's slice not learned";
}

// A loader run again (a new process on a mount that stays up, the first
// run's chunks long evicted) is taken for the whole-tensor reader that file's
// readers were from its first read: every request a whole chunk, none of the
// pieces a reader not known yet is first fetched in.
TEST_F(TwoProcessesTest, ALoaderRunAgainFetchesWholeChunksFromItsFirstRead) {
  EngineOptions options = Options();
  options.cache_size = 2 * options.chunk_size;
  options.prefetch_window = options.chunk_size;
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  Metrics metrics;
  ReadEngine engine(store, options, metrics);
  engine.SetReadaheadSink([](uint64_t) {});
  ReadAll(engine, Loader(whole_, ReaderId{10, kLoader}));
  engine.ReleaseReader(ReaderId{10, kLoader});
  ASSERT_FALSE(HasFatalFailure());
  const size_t first_run = store.reads().size();
  ReadAll(engine, Loader(whole_, ReaderId{11, kLoader + 10}));
  ASSERT_FALSE(HasFatalFailure());
  const std::vector<RecordedRead> reads = store.reads();
  ASSERT_GT(reads.size(), first_run) << "the first run's chunks were not evicted: the test tells nothing";
  const auto plan = engine.PlanOf(whole_.id());
  size_t pieces = 0;
  std::string listed;
  for (size_t i = first_run; i < reads.size(); ++i) {
    if (reads[i].object != whole_.name || plan->ChunkAt(reads[i].offset) == 0) continue;  // the head chunk
    const ByteRange chunk = plan->Chunk(plan->ChunkAt(reads[i].offset));
    if (reads[i].offset != chunk.offset || reads[i].length != chunk.length) {
      ++pieces;
      listed += " " + std::to_string(reads[i].offset) + "+" + std::to_string(reads[i].length);
    }
  }
  EXPECT_EQ(pieces, 0u) << "the second run's pieces:" << listed;
}

// Each safetensors file opened gets the readahead of the process opening it:
// the host's the kernel's default (a shard of several: half of it) while its
// readers are not known, whatever the loader does, and the slice readahead
// once its slice is learned; the loader's the whole readers'.
TEST_F(TwoProcessesTest, AFileOpenedGetsTheReadaheadOfItsOwnProcess) {
  const std::string host_next = "slice/model-00002-of-00002.safetensors";
  const std::string loader_next = "whole/model-00002-of-00002.safetensors";
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
  const std::vector<ObjectRead> loader = Loader(whole_, ReaderId{10, kLoader});
  ASSERT_FALSE(HasFatalFailure());
  ReadAll(engine, std::vector<ObjectRead>(loader.begin(),
                                          loader.begin() + static_cast<std::ptrdiff_t>(FirstTensorReads())));
  ASSERT_EQ(applied_.back(), ReadaheadPolicy::kWholeDefault);
  engine.Opening(host_next, ReaderId{21, kHost});
  EXPECT_EQ(applied_.back(), ReadaheadPolicy::kUnknownShardDefault) << "the host's readers are not known yet";
  engine.Opening(loader_next, ReaderId{11, kLoader});
  EXPECT_EQ(applied_.back(), ReadaheadPolicy::kWholeDefault);
  ReadAll(engine, Host(slice_, ReaderId{20, kHost}));
  engine.Opening(host_next, ReaderId{22, kHost});
  EXPECT_EQ(applied_.back(), ReadaheadPolicy::kSliceSmallDefault) << "slices of 4 hosts: small ones";
  engine.Opening(loader_next, ReaderId{12, kLoader});
  EXPECT_EQ(applied_.back(), ReadaheadPolicy::kWholeDefault);
}

// A reader whose first read after its pattern was learned falls near a window
// rather than in it (the kernel reading around its slice; a shuffled loader's
// next tensor) starts that pattern's sweep: it is a slice reader from then on,
// so that the files opened next, and the windows swept meanwhile, are those
// of the slice readahead.
TEST_F(ReadaheadSinkTest, ReadNearAKnownWindowMakesASliceReader) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
  ReadInterleaved(engine, 0, {1}, 4, /*first_reader=*/100);
  engine.ReleaseReader(ReaderId{100});
  ReadInterleaved(engine, 1, {}, 4, /*first_reader=*/200);
  engine.ReleaseReader(ReaderId{200});
  ASSERT_EQ(applied_.back(), ReadaheadPolicy::kWholeDefault);
  const std::vector<TensorSpan> tensors = engine.PlanOf(checkpoint_.shard.id())->tensors();
  const std::vector<SlicePattern> learned = engine.SlicePatterns();
  ASSERT_EQ(learned.size(), 1u);
  const TensorSpan& t = tensors[1];
  const uint64_t window_begin = learned[0].Window(t, 0, UINT64_MAX).offset;
  Read(engine, checkpoint_.shard, checkpoint_.source,
       KernelRead{ReaderId{300}, ByteRange{window_begin - 4 * kPage, kPage}});
  EXPECT_EQ(applied_.back(), ReadaheadPolicy::kSliceSmallDefault);  // slices of 4 hosts: small ones
}

// -o shard=R/N: the slice readahead from the start, and once the first file
// shows the slices are small, the small slices' one.
TEST_F(ReadaheadSinkTest, ShardGivesTheSliceReadaheadFromTheStart) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  const EngineOptions o = ShardOptions(1, 4);
  ReadEngine engine(store, o, metrics_);
  engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
  EXPECT_EQ(applied_, std::vector<uint64_t>{ReadaheadPolicy::kSliceDefault});
  ReadInterleaved(engine, 1, {1}, 4, /*first_reader=*/100);
  EXPECT_EQ(applied_, (std::vector<uint64_t>{ReadaheadPolicy::kSliceDefault, ReadaheadPolicy::kSliceSmallDefault}));
}

// -o shard=R/N: the first file's plan tells the slices' size before any
// window is swept, so the windows swept into the files opened next have the
// margins of the small slices' readahead those files get (swept at the slice
// readahead's, they fetched about a tenth more than the kernel read of them),
// while the first file's, opened at the slice readahead, have its margins.
TEST_F(ReadaheadSinkTest, ShardSweepsTheWindowsOfTheReadaheadTheirFilesGet) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  const EngineOptions o = ShardOptions(1, 4);
  ReadEngine engine(store, o, metrics_);
  engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
  Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{ReaderId{100}, ByteRange{0, 8}});  // the header
  ASSERT_TRUE(testing::WaitUntil([&] { return engine.Idle(); }, "the engine's fetches to stop"));
  EXPECT_EQ(applied_, (std::vector<uint64_t>{ReadaheadPolicy::kSliceDefault, ReadaheadPolicy::kSliceSmallDefault}))
      << "the slices' size known from the first file's header on";
  const std::shared_ptr<const ChunkPlan> plan = engine.PlanOf(checkpoint_.shard.id());
  // What the kernel reads around a slice at 32 KiB: 16 KiB before, 32 KiB past.
  const SlicePattern kernel{.lo_num = 1, .hi_num = 2, .den = 4, .before = 16 << 10, .after = 32 << 10};
  std::vector<ByteRange> windows;
  for (const TensorSpan& t : plan->tensors()) windows.push_back(kernel.Window(t, plan->data_start(), plan->data_end()));
  uint64_t swept = 0, outside = 0;
  for (const RecordedRead& r : store.reads()) {
    if (r.offset < o.chunk_size) continue;  // the first read's chunk, which holds the header: whole
    swept += r.length;
    uint64_t inside = 0;
    for (const ByteRange& w : windows) {
      const uint64_t b = std::max(r.offset, w.offset), e = std::min(r.offset + r.length, w.end());
      if (e > b) inside += e - b;
    }
    outside += r.length - inside;
  }
  EXPECT_GT(swept, 0u) << "no window swept";
  EXPECT_EQ(outside, 0u) << "of " << swept << " bytes swept";
}

TEST_F(ReadaheadSinkTest, ShardZeroOfOneGivesTheWholeReadaheadFromTheStart) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  EngineOptions o = Options();
  o.readahead = ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/1);
  o.shard_world = 1;
  ReadEngine engine(store, o, metrics_);
  engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
  ReadInterleaved(engine, 0, {0}, 2, /*first_reader=*/100);  // even a reader of half the rows
  EXPECT_EQ(applied_, std::vector<uint64_t>{ReadaheadPolicy::kWholeDefault});
  EXPECT_TRUE(engine.SlicePatterns().empty());
}

// Rank 0's slice ends inside its tensor, and the kernel's last readahead of
// it may come after its read around the next tensor's first page (FUSE
// requests run on several threads; the readahead is asynchronous). That read
// touches the end of the tensor before, whose start then grows: no copy of the
// whole tensor (its first page, its last, then the rest), but the first page
// of the reader's next window. Taken for a copy, the reader was a whole one
// and the files opened next got the whole readers' readahead.
TEST_F(ReadaheadSinkTest, FirstRanksLateReadaheadAfterTheNextTensorIsNoCopyOfTheWholeTensor) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  engine.SetReadaheadSink([this](uint64_t bytes) { applied_.push_back(bytes); });
  const ReaderId reader{300};
  Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, ByteRange{0, 8}});
  const std::vector<TensorSpan> tensors = engine.PlanOf(checkpoint_.shard.id())->tensors();
  constexpr uint64_t kWorld = 4;
  std::vector<std::vector<ByteRange>> per_tensor;
  for (const TensorSpan& t : tensors) {
    if (t.rows() < kWorld) continue;
    // The read around the slice's first page, then the readahead in order,
    // its last window past the slice's end.
    const ByteRange rows = Rows(t, 0, kWorld);
    std::vector<ByteRange>& reads = per_tensor.emplace_back();
    const uint64_t first = (rows.offset > kRead / 2 ? rows.offset - kRead / 2 : 0) & ~(kPage - 1);
    for (uint64_t at = first; at < rows.end(); at += kRead) reads.push_back(ByteRange{at, kRead});
  }
  // Each slice's last read comes after the next slice's first.
  for (size_t i = 0; i + 1 < per_tensor.size(); ++i) std::swap(per_tensor[i].back(), per_tensor[i + 1].front());
  for (const std::vector<ByteRange>& reads : per_tensor) {
    for (const ByteRange& r : reads) {
      Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, r});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  const SlicePattern want{.lo_num = 0, .hi_num = 1, .den = kWorld};
  const std::vector<SlicePattern> learned = engine.SlicePatterns();
  EXPECT_TRUE(std::any_of(learned.begin(), learned.end(), [&](const SlicePattern& p) { return p.SameSlice(want); }))
      << "rank 0 of 4 not learned";
  EXPECT_EQ(std::count(applied_.begin(), applied_.end(), ReadaheadPolicy::kWholeDefault), 0)
      << "taken for a whole-tensor reader";
}

// A loader reading its slices in a shuffled order opens a file: the header's
// read-around touches the first tensor's start, and its next read is around
// the first page of a later tensor's window, which touches the first tensor's
// end. Both are in rank 0's windows: no copy of the whole first tensor begun
// (its first page, then its last), whose last chunk would come whole.
TEST_F(ReaderStateTest, FirstRanksNextWindowAfterTheHeaderIsNoCopyOfTheTensorBefore) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{ReaderId{1}, ByteRange{0, 8}});
  const std::vector<TensorSpan> tensors = engine.PlanOf(checkpoint_.shard.id())->tensors();
  constexpr uint64_t kWorld = 4;
  // Rank 0's pattern, learned from a first reader's slices of the first tensors.
  size_t k = 0;
  for (; engine.SlicePatterns().empty() && k < tensors.size(); ++k) {
    if (tensors[k].rows() < kWorld) continue;
    const ByteRange rows = Rows(tensors[k], 0, kWorld);
    for (const ByteRange& r : KernelReads(rows.offset, rows.end())) {
      Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{ReaderId{100}, r});
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
  ASSERT_FALSE(engine.SlicePatterns().empty());
  // Two large tensors in a row, not read yet.
  while (k + 1 < tensors.size() && (tensors[k].size() < (2 << 20) || tensors[k + 1].size() < (2 << 20))) ++k;
  ASSERT_LT(k + 1, tensors.size());
  const TensorSpan& t = tensors[k];
  const ReaderId reader{200};
  Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, ByteRange{t.begin - kRead / 2, kRead}});
  Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, ByteRange{t.end - kRead / 2, kRead}});
  ASSERT_TRUE(testing::WaitUntil([&] { return engine.Idle(); }, "the engine's fetches to stop"));
  // Past rank 0's window and its margins, short of the read at the end (its
  // pieces start at a page).
  const uint64_t beyond = t.begin + t.size() / kWorld + (512 << 10);
  const uint64_t beyond_end = (t.end - kRead / 2) & ~(kPage - 1);  // where the read at the end starts
  uint64_t fetched = 0;
  for (const RecordedRead& r : store.reads()) {
    const uint64_t b = std::max(r.offset, beyond);
    const uint64_t e = std::min(r.offset + r.length, beyond_end);
    if (b < e) fetched += e - b;
  }
  EXPECT_EQ(fetched, 0u) << "tensor " << k << " fetched past rank 0's window: taken for a whole-tensor copy";
}

// The first tensor a reader copies, read from its start in order (a copy too
// large for memcpy to touch its last page first): until the reader is known it
// may be rank 0 of a sliced job, and the tensor comes in pieces ahead of it, as
// far as it has read; with -o shard=0/1 it comes in whole chunks from the
// first read.
class FirstTensorTest : public ReaderStateTest {
 protected:
  // The requests within the first tensor made while a reader reads its first
  // half in order.
  // `read_ahead`: as -o read_ahead= gives it (0: not given).
  std::vector<RecordedRead> RequestsForFirstHalf(uint64_t shard_world, uint64_t read_ahead = 0) {
    ControlledStore store(checkpoint_.memory, /*hold=*/false);
    EngineOptions o = Options();
    o.readahead = ReadaheadPolicy::ForMount(read_ahead > 0, read_ahead, shard_world);
    o.shard_world = shard_world;
    ReadEngine engine(store, o, metrics_);
    const ReaderId reader{7};
    Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, ByteRange{0, 8}});
    tensor_ = engine.PlanOf(checkpoint_.shard.id())->tensors().front();
    for (uint64_t at = tensor_.begin & ~(kPage - 1); at < tensor_.begin + tensor_.size() / 2; at += kRead) {
      Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{reader, ByteRange{at, kRead}});
      if (::testing::Test::HasFatalFailure()) return {};
    }
    std::vector<RecordedRead> out;
    for (const RecordedRead& r : store.reads()) {
      if (r.offset >= tensor_.begin && r.offset < tensor_.end) out.push_back(r);
    }
    return out;
  }

  TensorSpan tensor_;
};

TEST_F(FirstTensorTest, ShardZeroOfOneFetchesTheFirstTensorInWholeChunksFromTheFirstRead) {
  const uint64_t chunk = Options().chunk_size;
  const std::vector<RecordedRead> learned = RequestsForFirstHalf(/*shard_world=*/0);
  ASSERT_FALSE(learned.empty());
  EXPECT_TRUE(std::any_of(learned.begin(), learned.end(), [&](const RecordedRead& r) { return r.length < chunk / 2; }))
      << "an unknown reader's first tensor is expected to come in pieces";
  // Also with the readahead fixed by -o read_ahead=, which leaves the kind of
  // reader to the engine alone.
  for (uint64_t read_ahead : {uint64_t{0}, uint64_t{1} << 20}) {
    const std::vector<RecordedRead> whole = RequestsForFirstHalf(/*shard_world=*/1, read_ahead);
    ASSERT_FALSE(whole.empty());
    for (const RecordedRead& r : whole) {
      // Whole chunks; the tensor's last chunk may be cut at the file's end of the plan.
      EXPECT_TRUE(r.length >= chunk / 2 || r.offset + r.length == tensor_.end)
          << "a piece of " << r.length << " bytes at " << r.offset << " (read_ahead " << read_ahead << ")";
    }
    EXPECT_LT(whole.size(), learned.size());
  }
}

// Sixteen readers: twelve whole-tensor readers and four slice readers of
// ranks of eight.
TEST_F(ReaderStateTest, SixteenInterleavedReadersEachKeepTheirPattern) {
  InterleaveWholeAndSliceReaders(12, {1, 2, 4, 6}, 8);
}

// Sixteen sequential readers of one file, each at its own place, interleaved:
// each is one stream of its own; none is taken for a reader jumping about
// the file (which prefetched the whole file in storage order).
TEST_F(ReaderStateTest, SixteenInterleavedSequentialReadersDoNotPrefetchTheWholeFile) {
  const std::string name = "data.bin";  // no tensors: every read is planned as a sequential reader's
  checkpoint_.memory.Put(name, checkpoint_.source);
  const ObjectInfo file = *checkpoint_.memory.Stat(name);
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  EngineOptions options = Options();
  options.chunk_size = 256 << 10;
  options.prefetch_window = 2 << 20;
  ReadEngine engine(store, options, metrics_);
  constexpr int kReaders = 16;
  const uint64_t spacing = (file.size / kReaders) & ~(kPage - 1);
  for (uint64_t at = 0; at < (1 << 20); at += kRead) {
    for (int i = 0; i < kReaders; ++i) {
      Read(engine, file, checkpoint_.source, KernelRead{ReaderId{static_cast<uint64_t>(i + 1)}, ByteRange{i * spacing + at, kRead}});
      ASSERT_FALSE(HasFatalFailure());
    }
  }
  // The prefetches settle: nothing queued or running (no read comes now to start more).
  ASSERT_TRUE(testing::WaitUntil([&] { return engine.Idle(); }, "the prefetches to settle"));
  uint64_t fetched = 0;
  for (const auto& r : store.reads()) fetched += r.length;
  // Each reader read 1 MiB and is read ahead by its window (1 MiB): about
  // 32 MiB of the 68 MiB file.
  EXPECT_LT(fetched, file.size * 3 / 4) << "fetched " << fetched << " of " << file.size;
}

// `-o read_ahead=16M`: a reader of the whole file reads it in the kernel's
// largest requests (1 MiB), sixteen in flight at once and arriving out of
// order. Its tensors (1 to 8 MiB) are each far less than a few read-arounds
// (16 MiB), yet several requests long: it is a whole-tensor reader, and its
// chunks come whole (an unknown reader's come in pieces, each read waiting).
TEST_F(ReaderStateTest, ReaderOfWholeTensorsAtALargeReadaheadIsAWholeReader) {
  constexpr uint64_t kReadahead = 16 << 20, kRequest = 1 << 20;
  EngineOptions options = Options();
  options.chunk_size = 8 << 20;
  options.prefetch_window = 32 << 20;
  options.readahead = ReadaheadPolicy::ForMount(/*explicit_read_ahead=*/true, kReadahead, /*shard_world=*/0);
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, options, metrics_);
  const uint64_t size = checkpoint_.shard.size;
  for (uint64_t window = 0; window < size; window += kReadahead) {
    // The window's requests, last first: the kernel's async readahead in flight.
    for (uint64_t at = std::min(size, window + kReadahead); at > window;) {
      at -= kRequest;
      Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{ReaderId{1}, ByteRange{at, kRequest}});
      ASSERT_FALSE(HasFatalFailure());
    }
  }
  const size_t chunks = engine.PlanOf(checkpoint_.shard.id())->size();
  uint64_t fetched = 0;
  for (const auto& r : store.reads()) fetched += r.length;
  EXPECT_LE(fetched, size + options.head_size) << "every byte once, and the header";
  // The first window's requests come before any tensor is seen whole: each
  // may be a piece. From then on, a request per chunk.
  EXPECT_LE(store.reads().size(), chunks + kReadahead / kRequest) << "requests for " << chunks << " chunks";
}

// A reader faulting single pages at random places of random tensors (a
// sampler, an inspector) touches places that fit some fraction of rows by
// chance, a few tensors at a time: it comes back to tensors it left, at other
// places, which a slice reader never does, and teaches the learner nothing
// (before, 4000 such faults taught it six patterns, the first after 333).
TEST_F(ReaderStateTest, ScatteredPagesTeachNoSlicePattern) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{ReaderId{1}, ByteRange{0, 8}});
  const std::vector<TensorSpan> tensors = engine.PlanOf(checkpoint_.shard.id())->tensors();
  uint64_t seed = 12345;
  auto next = [&] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return seed >> 33;
  };
  for (int i = 0; i < 4000; ++i) {
    const TensorSpan& t = tensors[next() % tensors.size()];
    const uint64_t at = (t.begin + next() % t.size()) & ~(kPage - 1);
    for (const ByteRange& r : KernelReads(std::max(at, t.begin), std::min(t.end, at + kPage))) {
      Read(engine, checkpoint_.shard, checkpoint_.source, KernelRead{ReaderId{2}, r});
      ASSERT_FALSE(HasFatalFailure());
    }
    ASSERT_TRUE(engine.SlicePatterns().empty()) << "after " << i + 1 << " faults: " << engine.SlicePatterns()[0].ToString();
  }
}

// Objects and generations read once each, by readers opened and (half of
// them) closed: the engine's state stays within its bounds.
TEST_F(ReaderStateTest, TenThousandObjectsAndGenerationsKeepTheStateBounded) {
  EngineOptions options{.chunk_size = 64 << 10, .cache_size = 4 << 20, .max_fetches = 2,
                        .prefetch_window = 256 << 10, .head_size = 16 << 10};
  ReadEngine engine(checkpoint_.memory, options, metrics_);
  const std::string bytes(8192, 'x');
  for (uint64_t i = 0; i < 10000; ++i) {
    // Half new objects, half new generations of one object.
    const std::string name = i % 2 == 0 ? "objects/" + std::to_string(i) + ".bin" : "replaced.bin";
    checkpoint_.memory.Put(name, bytes);
    const ObjectInfo object = *checkpoint_.memory.Stat(name);
    Read(engine, object, bytes, KernelRead{ReaderId{i + 1}, ByteRange{100, 4096}});
    ASSERT_FALSE(HasFatalFailure());
    if (i % 4 < 2) engine.ReleaseReader(ReaderId{i + 1});
  }
  const ReadEngine::StateSizes sizes = engine.Sizes();
  EXPECT_LE(sizes.objects, 512u);
  EXPECT_LE(sizes.readers, 4096u);
  EXPECT_LE(sizes.extents, 512u * 64);
}


// A reader taken for rows 0/15 of every tensor shows, leaving a large tensor
// with rows of 0/15 unread, that it reads 0/16 (the tensors' sizes and the
// reads of AccessModelTest.AReaderThatLeavesRowsOfItsLearnedPatternUnreadNarrowsIt,
// then four tensors of 32 MiB, in files read at 64 KiB). The windows of
// 0/15 its sweep had queued are not fetched: the 0/16 sweep fetches those
// tensors' windows, and no byte of 0/15's last rows past 0/16's window.
TEST_F(ReaderStateTest, WindowsOfANarrowedPatternStillQueuedAreNotFetched) {
  constexpr uint64_t kFile = 64 << 10;
  std::vector<testing::RawTensor> raw;
  for (auto [rows, cols] : {std::pair<uint64_t, uint64_t>{512, 1536}, {1536, 1536}, {1536, 2560}, {32000, 1536},
                            {512, 1536}, {8192, 2048}, {8192, 2048}, {8192, 2048}, {8192, 2048}}) {
    raw.push_back(testing::RawTensor{.name = "t" + std::to_string(raw.size()), .dtype = Dtype::BF16,
                                     .shape = {rows, cols}});
  }
  const std::string source = testing::BuildSafetensorsFile(raw);
  MemoryStore memory;
  memory.Put("model.safetensors", source);
  const ObjectInfo file = *memory.Stat("model.safetensors");
  EngineOptions options = Options();
  options.chunk_size = 1 << 20;  // what the first reads fetch ends in t4
  options.max_fetches = 1;       // the sweep's windows queue behind the one fetch held
  options.prefetch_window = 64 << 20;
  options.readahead = ReadaheadPolicy::ForMount(/*explicit_read_ahead=*/true, kFile, /*shard_world=*/0);
  ControlledStore store(memory, /*hold=*/false);
  ReadEngine engine(store, options, metrics_);
  struct ReleaseAtEnd {  // before the engine's end, which waits for its fetches
    ControlledStore& store;
    ~ReleaseAtEnd() { store.ReleaseAll(); }
  } release_at_end{store};
  auto idle = [&] {
    ASSERT_TRUE(testing::WaitUntil([&] { return engine.Idle(); }, "the engine's fetches to stop"));
  };
  Read(engine, file, source, KernelRead{ReaderId{9}, ByteRange{0, 8}});
  const std::vector<TensorSpan> t = engine.PlanOf(file.id())->tensors();
  ASSERT_EQ(t.size(), raw.size());
  // Reads of [begin, end) of tensor `i` in the file's readahead (the
  // kernel's, or another's that teach nothing).
  auto read = [&](ReaderId reader, size_t i, uint64_t begin, uint64_t end, bool kernel = true) {
    for (uint64_t x = t[i].begin + begin; x < t[i].begin + end; x += kFile) {
      const ByteRange range{x, std::min(kFile, t[i].begin + end - x)};
      std::promise<StatusOr<ReadResult>> done;
      engine.Read(file, range.offset, range.length, [&](StatusOr<ReadResult> r) { done.set_value(std::move(r)); },
                  ReadHints{.reader = reader, .prefetch = kernel});
      ASSERT_TRUE(done.get_future().get().ok());
    }
  };
  // Reads of t4's first pages, one at a time, until the reader's last touch
  // settles.
  auto move_on = [&](ReaderId reader) {
    for (int k = 0; k < 10; ++k) read(reader, 4, k * kPage, (k + 1) * kPage);
  };
  // The embedding's rows the reader will read, and t4's first pages, are
  // cached by reads that are not the kernel's.
  read(ReaderId{2}, 3, 62456, 6222840, /*kernel=*/false);
  read(ReaderId{2}, 4, 0, 10 * kPage, /*kernel=*/false);
  const ReaderId reader{1};
  read(reader, 0, 0, 224248);
  move_on(reader);
  read(reader, 1, 0, 420856);
  move_on(reader);
  read(reader, 2, 0, 610296);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_TRUE(engine.SlicePatterns().empty());
  idle();

  // The one fetch is held; the reader moving on from t2 teaches 0/15, whose
  // sweep queues its windows behind it.
  store.Hold();
  std::promise<StatusOr<ReadResult>> held;
  engine.Read(file, t[8].end - kPage, kPage, [&](StatusOr<ReadResult> r) { held.set_value(std::move(r)); },
              ReadHints{.reader = ReaderId{3}, .prefetch = false});
  ASSERT_TRUE(store.WaitForBlocked(1));
  move_on(reader);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(engine.SlicePatterns().size(), 1u);
  const SlicePattern wide = engine.SlicePatterns()[0];
  ASSERT_TRUE(wide.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 15})) << wide.ToString();

  read(reader, 3, 62456, 6222840);  // cached: no fetch runs
  move_on(reader);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(engine.SlicePatterns().size(), 1u);
  const SlicePattern narrow = engine.SlicePatterns()[0];
  ASSERT_TRUE(narrow.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 16})) << narrow.ToString();
  store.ReleaseAll();
  ASSERT_TRUE(held.get_future().get().ok());
  idle();

  const std::vector<RecordedRead> reads = store.reads();
  const auto plan = engine.PlanOf(file.id());
  for (size_t i = 5; i < t.size(); ++i) {
    // 0/15's last rows past the farthest 0/16 reaches: never fetched.
    const uint64_t lo = narrow.Window(t[i], plan->data_start(), plan->data_end()).end();
    const uint64_t hi = wide.Core(t[i]).end();
    ASSERT_LT(lo, hi);
    const ByteRange core = narrow.Core(t[i]);
    uint64_t core_fetched = 0;
    for (const RecordedRead& r : reads) {
      EXPECT_FALSE(r.offset < hi && r.offset + r.length > lo)
          << "t" << i << ": " << r.offset - t[i].begin << "+" << r.length << " reaches 0/15's rows "
          << lo - t[i].begin << ".." << hi - t[i].begin;
      const uint64_t b = std::max(r.offset, core.offset), e = std::min(r.offset + r.length, core.end());
      if (e > b) core_fetched += e - b;
    }
    EXPECT_EQ(core_fetched, core.length) << "t" << i << ": 0/16's rows, each once";
  }
}

}  // namespace
}  // namespace tensorfs
