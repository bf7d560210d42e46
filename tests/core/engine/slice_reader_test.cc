// The read engine with readers of a slice of every tensor (one host of a
// sharded job): the kernel's reads of an mmap slice reader are replayed against
// the engine over a controlled store, and the store's reads are checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "core/engine/read_engine.h"
#include "tests/core/engine/single_shard_checkpoint.h"
#include "tests/support/test_util.h"
#include "tests/support/controlled_store.h"
#include "tests/support/memory_store.h"

namespace tensorfs {
namespace {

using testing::ControlledStore;
using testing::MemoryStore;
using testing::SingleShardCheckpoint;
using testing::RecordedRead;

constexpr uint64_t kPage = 4096;
constexpr uint64_t kRead = 128 << 10;  // the kernel's read size (default readahead)
constexpr uint64_t kNearWindowSlack = 512 << 10;  // reads this close to a window are its reader's

class SliceReaderTest : public ::testing::Test {
 protected:
  EngineOptions Options() const {
    return EngineOptions{.chunk_size = 1 << 20, .cache_size = 256 << 20, .max_fetches = 4,
                         .prefetch_window = 16 << 20, .head_size = 64 << 10};
  }
  // Options() with -o shard=rank/world.
  EngineOptions ShardOptions(uint64_t rank, uint64_t world) const {
    EngineOptions options = Options();
    options.shard_rank = rank;
    options.shard_world = world;
    return options;
  }

  // Reads [offset, offset + size) and checks the bytes.
  void Read(ReadEngine& engine, uint64_t offset, uint64_t size, ReadHints hints = {}) {
    size = std::min(size, checkpoint_.shard.size - offset);
    std::promise<StatusOr<ReadResult>> promise;
    engine.Read(
        checkpoint_.shard, offset, size, [&](StatusOr<ReadResult> r) { promise.set_value(std::move(r)); }, hints);
    StatusOr<ReadResult> r = promise.get_future().get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    std::string got;
    for (auto p : r->pieces) got.append(reinterpret_cast<const char*>(p.data()), p.size());
    ASSERT_EQ(got, checkpoint_.source.substr(offset, size)) << "at " << offset;
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

  // Rows [rank*n/world, (rank+1)*n/world) of `t`.
  static ByteRange Rows(const TensorSpan& t, uint64_t rank, uint64_t world) {
    const uint64_t n = t.rows();
    return ByteRange{t.begin + rank * n / world * t.row_bytes, ((rank + 1) * n / world - rank * n / world) * t.row_bytes};
  }

  void ReadSlice(ReadEngine& engine, const TensorSpan& t, uint64_t rank, uint64_t world) {
    const ByteRange rows = Rows(t, rank, world);
    for (const ByteRange& r : KernelReads(rows.offset, rows.end())) Read(engine, r.offset, r.length);
  }

  // Waits until the engine has no fetch queued or running (no read comes
  // meanwhile to start more); fails after kHang, which only a runaway
  // prefetch takes.
  void WaitIdle(ReadEngine& engine) {
    ASSERT_TRUE(testing::WaitUntil([&] { return engine.Idle(); }, "the engine's fetches to stop"));
  }

  std::vector<TensorSpan> Tensors(ReadEngine& engine) {
    Read(engine, 0, 8);  // the plan
    return engine.PlanOf(checkpoint_.shard.id())->tensors();
  }

  // Bytes of `reads` (from index `from`) that fall outside every range of `allowed`.
  static uint64_t BytesOutside(const std::vector<RecordedRead>& reads, size_t from,
                               const std::vector<ByteRange>& allowed) {
    uint64_t outside = 0;
    for (size_t i = from; i < reads.size(); ++i) {
      uint64_t covered = 0;
      for (const ByteRange& a : allowed) {
        const uint64_t b = std::max(a.offset, reads[i].offset);
        const uint64_t e = std::min(a.end(), reads[i].offset + reads[i].length);
        if (e > b) covered += e - b;
      }
      outside += reads[i].length - std::min(covered, reads[i].length);
    }
    return outside;
  }

  static uint64_t BytesFrom(const std::vector<RecordedRead>& reads, size_t from) {
    uint64_t n = 0;
    for (size_t i = from; i < reads.size(); ++i) n += reads[i].length;
    return n;
  }

  // The windows of `pattern` in every tensor, widened by `slack` each side.
  std::vector<ByteRange> Windows(ReadEngine& engine, const SlicePattern& pattern, uint64_t slack = 0) {
    auto plan = engine.PlanOf(checkpoint_.shard.id());
    std::vector<ByteRange> out;
    for (const TensorSpan& t : plan->tensors()) {
      ByteRange w = pattern.Window(t, plan->data_start(), plan->data_end());
      const uint64_t b = w.offset > slack ? w.offset - slack : 0;
      out.push_back(ByteRange{b, w.end() + slack - b});
    }
    return out;
  }

  // Reads slices of `world` of the tensors in `order` until the engine has
  // learned a pattern; returns how many tensors that took.
  size_t ReadUntilLearned(ReadEngine& engine, const std::vector<TensorSpan>& order, uint64_t rank, uint64_t world) {
    for (size_t i = 0; i < order.size(); ++i) {
      ReadSlice(engine, order[i], rank, world);
      if (!engine.SlicePatterns().empty()) return i + 1;
    }
    return order.size();
  }

  SingleShardCheckpoint checkpoint_;
  Metrics metrics_;
};

TEST_F(SliceReaderTest, StorageOrderSliceReaderFetchesOnlyItsWindowsOnceLearned) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  std::vector<TensorSpan> tensors = Tensors(engine);
  const size_t learned_after = ReadUntilLearned(engine, tensors, 1, 4);
  ASSERT_LT(learned_after, 8u) << "a few tensors are enough";
  const SlicePattern pattern = engine.SlicePatterns().front();
  EXPECT_NEAR(double(pattern.lo_num) / pattern.den, 0.25, 1e-3) << pattern.ToString();
  EXPECT_NEAR(double(pattern.hi_num) / pattern.den, 0.50, 1e-3) << pattern.ToString();

  WaitIdle(engine);
  const size_t mark = store.reads().size();
  uint64_t needed = 0;
  for (size_t i = learned_after; i < tensors.size(); ++i) {
    ReadSlice(engine, tensors[i], 1, 4);
    needed += Rows(tensors[i], 1, 4).length;
  }
  WaitIdle(engine);
  const auto reads = store.reads();
  EXPECT_EQ(BytesOutside(reads, mark, Windows(engine, pattern, kPage)), 0u) << "fetched outside the windows";
  EXPECT_LE(BytesFrom(reads, mark), needed + (tensors.size() - learned_after) * (kRead + kRead / 2))
      << "no more than the rows and the kernel's read-around";
  EXPECT_EQ(BytesOutside(reads, mark, {ByteRange{0, 1}}), BytesFrom(reads, mark)) << "sanity";
}

// Before the pattern is known, a memcpy of part of a tensor shows where it
// ends (its last page is read second): what lies between is fetched, nothing
// past it, so that learning costs little more than the slices read meanwhile.
TEST_F(SliceReaderTest, LearningFetchesLittleOutsideTheSlicesRead) {
  for (uint64_t rank : {0u, 1u, 3u}) {
    ControlledStore store(checkpoint_.memory, /*hold=*/false);
    Metrics metrics;
    ReadEngine engine(store, Options(), metrics);
    std::vector<TensorSpan> tensors = Tensors(engine);
    std::shuffle(tensors.begin(), tensors.end(), std::mt19937(5));
    const size_t mark = store.reads().size();
    const size_t learned_after = ReadUntilLearned(engine, tensors, rank, 4);
    ASSERT_FALSE(engine.SlicePatterns().empty()) << "rank " << rank;
    WaitIdle(engine);
    // Everything fetched, the tensors read while learning included, lies in
    // the windows of the pattern (the slices and the kernel's read-around of
    // each), give or take a page per tensor.
    const uint64_t outside = BytesOutside(store.reads(), mark, Windows(engine, engine.SlicePatterns().front(), kPage));
    EXPECT_LE(outside, learned_after * kPage) << "rank " << rank << ": " << outside << " bytes outside the windows";
  }
}

// A copy that touches its pages in order only (a large memcpy, past glibc's
// non-temporal threshold) does not show where it ends. A reader not known yet
// is read ahead within a tensor by as much as it has read there; once it has
// left one tensor, one that begins the next at the fraction of its rows it
// began that one at is read ahead no further than that fraction ends and the
// kernel's readahead past it (FetchPlanner::LikelySliceEnd).
// The reader's touch of the tensor before is left only some reads into the
// next one: its rows there bound the next tensor from its first read on.
TEST_F(SliceReaderTest, LearningReadsInOrderFetchesLittleMoreThanTheKernelReads) {
  for (auto [rank, world] : {std::pair<uint64_t, uint64_t>{1, 4}, {2, 4}, {1, 3}}) {
    ControlledStore store(checkpoint_.memory, /*hold=*/false);
    Metrics metrics;
    ReadEngine engine(store, Options(), metrics);
    // Tensors of 3 MiB and more: slices of 768 KiB and more, which a reader
    // read ahead by as much as it has read would be read past by as much.
    std::vector<TensorSpan> tensors = Tensors(engine);
    std::erase_if(tensors, [](const TensorSpan& t) { return t.size() < (3u << 20); });
    std::shuffle(tensors.begin(), tensors.end(), std::mt19937(5));
    const size_t mark = store.reads().size();
    std::vector<ByteRange> kernel;  // what the kernel read, each tensor's as one range
    for (size_t i = 0; i < tensors.size() && engine.SlicePatterns().empty(); ++i) {
      const ByteRange rows = Rows(tensors[i], rank, world);
      // The read-around of the first page, then readahead windows in order, up
      // to one past the slice.
      const ReadHints reader{.reader = ReaderId{1}};  // one open file
      const uint64_t begin = (rows.offset - kRead / 2) & ~(kPage - 1);
      Read(engine, begin, kRead, reader);
      const uint64_t until = std::min(rows.end() + kRead, checkpoint_.shard.size);
      uint64_t at = (rows.offset + kRead / 2) & ~(kPage - 1);
      for (; at < until; at += kRead) Read(engine, at, kRead, reader);
      kernel.push_back(ByteRange{begin, at - begin});
    }
    ASSERT_FALSE(engine.SlicePatterns().empty()) << "rank " << rank << " of " << world;
    WaitIdle(engine);
    // In the tensors read after the first (whose reads were read ahead by up
    // to twice as much as was read there), past what the kernel read there
    // (the bytes of the tensors not read are the learned pattern's sweep): no
    // more than the kernel may read past a slice.
    std::vector<ByteRange> allowed = kernel;
    allowed.push_back(ByteRange{tensors[0].begin, tensors[0].size()});
    std::vector<TensorSpan> read(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(kernel.size()));
    std::sort(read.begin(), read.end(), [](const TensorSpan& x, const TensorSpan& y) { return x.begin < y.begin; });
    uint64_t from = 0;
    for (const TensorSpan& t : read) {
      allowed.push_back(ByteRange{from, t.begin - from});
      from = t.end;
    }
    allowed.push_back(ByteRange{from, checkpoint_.shard.size - from});
    const uint64_t beyond = BytesOutside(store.reads(), mark, allowed);
    EXPECT_LE(beyond, (kernel.size() - 1) * (kRead / 2 + 2 * kRead + kPage))
        << "rank " << rank << " of " << world << ": " << beyond << " bytes fetched past the kernel's reads of " << kernel.size()
        << " tensors";
  }
}

// A reader not known yet that began within a tensor reads a slice of it: it is
// read ahead there by no more than it has read (one that began at a tensor's
// start may read it whole, and is read ahead by twice as much).
TEST_F(SliceReaderTest, FirstSliceIsReadAheadNoFurtherThanItsReaderRead) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  Metrics metrics;
  ReadEngine engine(store, Options(), metrics);
  const std::vector<TensorSpan> tensors = Tensors(engine);
  const auto t = std::find_if(tensors.begin(), tensors.end(), [](const TensorSpan& x) { return x.size() >= (3u << 20); });
  ASSERT_NE(t, tensors.end());
  const size_t mark = store.reads().size();
  // Rows 1/4..2/4 (a quarter of the tensor), copied as the kernel reads
  // them: the read-around of the first page, then readahead windows up to
  // one past the slice.
  const ReadHints reader{.reader = ReaderId{1}};
  const ByteRange rows = Rows(*t, 1, 4);
  const uint64_t begin = (rows.offset - kRead / 2) & ~(kPage - 1);
  uint64_t at = (rows.offset + kRead / 2) & ~(kPage - 1);
  Read(engine, begin, kRead, reader);
  for (; at < rows.end() + kRead; at += kRead) Read(engine, at, kRead, reader);
  WaitIdle(engine);
  const uint64_t read = at - begin;
  const uint64_t past = BytesOutside(store.reads(), mark, {ByteRange{0, at}});
  EXPECT_LE(past, read) << past << " bytes fetched past the " << read << " the kernel read of the tensor";
}

// A reader's touch of a tensor's first bytes no further than one read-around
// (the kernel reading around a layer norm's page into the tensor after it)
// tells no fraction of its rows while a touch of another tensor does: a slice
// begun in a third tensor is bounded by that one's rows, not read ahead by as
// much as was read of it.
TEST_F(SliceReaderTest, ReadAroundIntoATensorsStartDoesNotHideTheRowsOfTheTensorBefore) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  Metrics metrics;
  ReadEngine engine(store, Options(), metrics);
  const std::vector<TensorSpan> tensors = Tensors(engine);
  auto large = [](const TensorSpan& x) { return x.size() >= (3u << 20); };
  // A layer norm followed by a large tensor, with large tensors before and after.
  size_t norm = 0;
  for (size_t i = 1; i + 1 < tensors.size() && norm == 0; ++i) {
    if (tensors[i].size() < kPage && large(tensors[i + 1]) &&
        std::any_of(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(i), large) &&
        std::count_if(tensors.begin() + static_cast<std::ptrdiff_t>(i) + 2, tensors.end(), large) > 0) {
      norm = i;
    }
  }
  ASSERT_NE(norm, 0u);
  const TensorSpan first = *std::find_if(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(norm), large);
  const TensorSpan third = *std::find_if(tensors.begin() + static_cast<std::ptrdiff_t>(norm) + 2, tensors.end(), large);
  const ReadHints reader{.reader = ReaderId{1}};
  auto copy = [&](const TensorSpan& t) {
    const ByteRange rows = Rows(t, 1, 4);
    const uint64_t begin = (rows.offset - kRead / 2) & ~(kPage - 1);
    uint64_t at = (rows.offset + kRead / 2) & ~(kPage - 1);
    Read(engine, begin, kRead, reader);
    for (; at < rows.end() + kRead; at += kRead) Read(engine, at, kRead, reader);
    return ByteRange{begin, at - begin};
  };
  copy(first);
  // The layer norm's page faulted: its read-around reaches half a read-around
  // into the tensor after it.
  const uint64_t around = (tensors[norm].begin - kRead / 2) & ~(kPage - 1);
  Read(engine, around, kRead, reader);
  ASSERT_TRUE(engine.SlicePatterns().empty()) << "learned from one slice";
  const size_t mark = store.reads().size();
  const ByteRange kernel = copy(third);
  WaitIdle(engine);
  ASSERT_TRUE(engine.SlicePatterns().empty()) << "learned from two slices";
  const uint64_t past = BytesOutside(store.reads(), mark, {ByteRange{0, kernel.end()}});
  EXPECT_LE(past, kRead / 2 + 2 * kRead + kPage) << past << " bytes fetched past the kernel's reads of the third tensor";
}

// A reader not known yet whose read ends within a tensor is fetched no
// further than that tensor's end, by the read's own request as by its
// prefetch: its rows there may end with the tensor (the last rank's), and what
// it needs of the tensor after is not known yet.
TEST_F(SliceReaderTest, AReaderNotKnownYetIsNotFetchedPastTheTensorItsReadEndsIn) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  Metrics metrics;
  ReadEngine engine(store, Options(), metrics);
  const std::vector<TensorSpan> tensors = Tensors(engine);
  auto plan = engine.PlanOf(checkpoint_.shard.id());
  // A tensor whose last chunk runs on into the tensor after it, so that the
  // chunk does not bound the read's request there.
  const auto t = std::find_if(tensors.begin(), tensors.end(), [&](const TensorSpan& x) {
    return x.size() >= (1u << 20) && x.end < checkpoint_.shard.size &&
           plan->Chunk(plan->ChunkAt(x.end - 1)).end() >= x.end + 4 * kPage;
  });
  ASSERT_NE(t, tensors.end());
  const size_t mark = store.reads().size();
  // The last eighth of its rows, as the kernel reads them at a 16 KiB
  // readahead: the pages around the first, then on to the tensor's end.
  const ReadHints reader{.reader = ReaderId{1}};
  const ByteRange rows = Rows(*t, 7, 8);
  for (uint64_t at = rows.offset & ~(kPage - 1); at < t->end; at += 16 << 10) {
    Read(engine, at, std::min<uint64_t>(16 << 10, t->end - at), reader);
  }
  WaitIdle(engine);
  const uint64_t past = BytesOutside(store.reads(), mark, {ByteRange{0, (t->end + kPage - 1) & ~(kPage - 1)}});
  EXPECT_EQ(past, 0u) << past << " bytes fetched past the end of the tensor the reader's rows end with";
}

// A loader copying whole tensors (the header parsed through mmap, then each
// tensor copied: its first page, its last, the rest) is told from a slice
// reader by its first copy, early enough that every chunk still comes in one
// request: no pieces around its first reads (with the default head, and
// chunks of a few MiB: the first reads' pages are then a small part of them).
TEST_F(SliceReaderTest, WholeTensorCopiesFromTheFirstReadAreFetchedInWholeChunks) {
  for (bool shuffled : {false, true}) {
    ControlledStore store(checkpoint_.memory, /*hold=*/false);
    Metrics metrics;
    EngineOptions options = Options();
    options.chunk_size = 4 << 20;
    options.head_size = 256 << 10;
    ReadEngine engine(store, options, metrics);
    std::vector<TensorSpan> tensors = Tensors(engine);
    if (shuffled) std::shuffle(tensors.begin(), tensors.end(), std::mt19937(3));
    Read(engine, 0, kRead);  // the header, parsed from the mapping
    for (const TensorSpan& t : tensors) {
      for (const ByteRange& r : KernelReads(t.begin, t.end)) Read(engine, r.offset, r.length);
    }
    WaitIdle(engine);
    // In storage order every chunk comes in one request. A shuffled loader's
    // first read may land next to a tensor boundary, where nothing is known
    // yet: its pages come as a piece, fetched again with their chunk.
    auto plan = engine.PlanOf(checkpoint_.shard.id());
    const std::vector<RecordedRead> reads = store.reads();
    size_t pieces = 0;
    uint64_t bytes = 0;
    for (const RecordedRead& r : reads) {
      const ByteRange chunk = plan->Chunk(plan->ChunkAt(r.offset));
      if (r.offset != chunk.offset || r.length != chunk.length) ++pieces;
      bytes += r.length;
    }
    EXPECT_EQ(reads.size(), plan->size() + pieces) << "every chunk in one request";
    EXPECT_LE(pieces, shuffled ? 1u : 0u) << (shuffled ? "shuffled" : "storage order");
    EXPECT_LE(bytes, checkpoint_.shard.size + pieces * kRead);
  }
}

TEST_F(SliceReaderTest, RandomOrderSliceReaderFetchesOnlyItsWindowsOnceLearned) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  std::vector<TensorSpan> tensors = Tensors(engine);
  std::shuffle(tensors.begin(), tensors.end(), std::mt19937(7));
  const size_t learned_after = ReadUntilLearned(engine, tensors, 2, 4);
  ASSERT_LT(learned_after, 10u);
  const SlicePattern pattern = engine.SlicePatterns().front();
  EXPECT_NEAR(double(pattern.lo_num) / pattern.den, 0.50, 1e-3) << pattern.ToString();

  WaitIdle(engine);
  const size_t mark = store.reads().size();
  for (size_t i = learned_after; i < tensors.size(); ++i) ReadSlice(engine, tensors[i], 2, 4);
  WaitIdle(engine);
  EXPECT_EQ(BytesOutside(store.reads(), mark, Windows(engine, pattern, kPage)), 0u);
  EXPECT_LE(metrics_.bytes_fetched.load(), checkpoint_.shard.size / 2) << "far from the whole file";
}

TEST_F(SliceReaderTest, ReaderSwitchingToWholeTensorsGetsThemWhole) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  std::vector<TensorSpan> tensors = Tensors(engine);
  const size_t learned_after = ReadUntilLearned(engine, tensors, 0, 4);
  ASSERT_FALSE(engine.SlicePatterns().empty());
  // Whole tensors from here on, read in order with the kernel's reads.
  size_t i = learned_after;
  for (int whole = 0; whole < 2 && i < tensors.size(); ++i) {
    for (uint64_t at = tensors[i].begin & ~(kPage - 1); at < tensors[i].end; at += kRead) Read(engine, at, kRead);
    if (tensors[i].size() >= (1 << 20)) ++whole;
  }
  ASSERT_LT(i + 1, tensors.size());
  // The next tensor: reading its first pages brings all of it (it may well be
  // on its way already, ahead of a whole-tensor reader).
  Read(engine, tensors[i].begin & ~(kPage - 1), kRead);
  WaitIdle(engine);
  const auto reads = store.reads();
  std::vector<bool> page(tensors[i].size() / kPage + 2, false);
  for (const RecordedRead& r : reads) {
    for (uint64_t at = std::max(r.offset, tensors[i].begin); at < std::min(r.offset + r.length, tensors[i].end);
         at = (at / kPage + 1) * kPage) {
      page[(at - tensors[i].begin) / kPage] = true;
    }
  }
  EXPECT_EQ(std::count(page.begin(), page.begin() + tensors[i].size() / kPage, false), 0)
      << "every page of the tensor fetched";
}

TEST_F(SliceReaderTest, TwoRanksOnOneMountEachGetTheirOwnWindows) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, Options(), metrics_);
  std::vector<TensorSpan> tensors = Tensors(engine);
  // Ranks 0 and 2 of 4, each reading its slice of every tensor in storage
  // order, their reads interleaved.
  size_t learned_after = tensors.size();
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<ByteRange> a = KernelReads(Rows(tensors[i], 0, 4).offset, Rows(tensors[i], 0, 4).end());
    std::vector<ByteRange> b = KernelReads(Rows(tensors[i], 2, 4).offset, Rows(tensors[i], 2, 4).end());
    for (size_t k = 0; k < std::max(a.size(), b.size()); ++k) {
      if (k < a.size()) Read(engine, a[k].offset, a[k].length);
      if (k < b.size()) Read(engine, b[k].offset, b[k].length);
    }
    if (engine.SlicePatterns().size() >= 2) {
      learned_after = i + 1;
      break;
    }
  }
  ASSERT_LT(learned_after, tensors.size()) << "both readers learned";
  std::vector<SlicePattern> patterns = engine.SlicePatterns();
  std::vector<double> starts;
  for (const SlicePattern& p : patterns) starts.push_back(double(p.lo_num) / p.den);
  std::sort(starts.begin(), starts.end());
  EXPECT_NEAR(starts[0], 0.0, 1e-3);
  EXPECT_NEAR(starts[1], 0.5, 1e-3);

  WaitIdle(engine);
  const size_t mark = store.reads().size();
  for (size_t i = learned_after; i < tensors.size(); ++i) {
    ReadSlice(engine, tensors[i], 0, 4);
    ReadSlice(engine, tensors[i], 2, 4);
  }
  WaitIdle(engine);
  std::vector<ByteRange> allowed = Windows(engine, patterns[0], kPage);
  for (const ByteRange& w : Windows(engine, patterns[1], kPage)) allowed.push_back(w);
  EXPECT_EQ(BytesOutside(store.reads(), mark, allowed), 0u) << "nothing of ranks 1 and 3";
}

TEST_F(SliceReaderTest, ShardOptionPrefetchesExactlyItsWindowsFromTheFirstRead) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, ShardOptions(3, 4), metrics_);
  std::vector<TensorSpan> tensors = Tensors(engine);
  const SlicePattern pattern = SlicePattern::Shard(3, 4);
  ASSERT_EQ(engine.SlicePatterns().size(), 1u);
  EXPECT_TRUE(engine.SlicePatterns().front().SameSlice(pattern));
  const ByteRange first = Rows(tensors[0], 3, 4);
  Read(engine, first.offset, kPage);  // the first read of tensor data
  WaitIdle(engine);
  const auto reads = store.reads();
  std::vector<ByteRange> windows = Windows(engine, pattern);
  // Fetched: every window, and nothing outside them but the head.
  EXPECT_EQ(BytesOutside(reads, 0, windows), std::min<uint64_t>(64 << 10, checkpoint_.shard.size)) << "the head only";
  uint64_t window_bytes = 0;  // of their union: the windows of small tensors overlap
  uint64_t covered_to = 0;
  for (const ByteRange& w : windows) {  // in storage order
    const uint64_t b = std::max(w.offset, covered_to);
    if (w.end() > b) window_bytes += w.end() - b;
    covered_to = std::max(covered_to, w.end());
  }
  uint64_t inside = BytesFrom(reads, 0) - BytesOutside(reads, 0, windows);
  EXPECT_GE(inside + (64 << 10), window_bytes) << "every window prefetched";
  // And the reads of the slices then find everything in memory.
  const size_t mark = reads.size();
  for (const TensorSpan& t : tensors) {
    const ByteRange rows = Rows(t, 3, 4);
    for (uint64_t at = rows.offset; at < rows.end(); at += kRead) Read(engine, at, std::min(kRead, rows.end() - at));
  }
  WaitIdle(engine);
  EXPECT_EQ(store.reads().size(), mark) << "nothing more to fetch";
}

// The kernel's readahead around the header reaches the first tensor's start
// late, after a reader of a known slice touched its window in that tensor: the
// first touch growing then is no memcpy coming back to a copy's start, and
// nothing between the two is fetched.
TEST_F(SliceReaderTest, HeaderReadaheadArrivingLateIsNoCopyUpToTheSlice) {
  ControlledStore store(checkpoint_.memory, /*hold=*/false);
  ReadEngine engine(store, ShardOptions(2, 4), metrics_);
  const std::vector<TensorSpan> tensors = Tensors(engine);
  const TensorSpan& t = tensors[0];
  const ByteRange slice = Rows(t, 2, 4);
  ASSERT_GT(slice.offset, t.begin + (2 << 20)) << "the slice must lie well past the tensor's start";
  Read(engine, 0, kRead);                                          // the header, read around into the tensor
  Read(engine, (slice.offset - kRead / 2) & ~(kPage - 1), kRead);  // the slice's first page, read around
  Read(engine, kRead, kRead);                                      // the header's readahead, late
  WaitIdle(engine);
  std::vector<ByteRange> allowed = Windows(engine, SlicePattern::Shard(2, 4), kNearWindowSlack);
  allowed.push_back(ByteRange{0, 1 << 20});  // the reads at the start and their read-ahead
  EXPECT_EQ(BytesOutside(store.reads(), 0, allowed), 0u);
}

TEST_F(SliceReaderTest, ShardOutOfRangeIsRefusedWithTheRightForm) {
  Status s = ShardOptions(4, 4).Validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("shard=R/N"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tensorfs
