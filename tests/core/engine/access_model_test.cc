// The access model on its own: kernel reads in, what the reader is doing out,
// with no store, cache or engine around it.
#include "core/engine/access_model.h"

#include <gtest/gtest.h>

#include <optional>
#include <utility>
#include <vector>

namespace tensorfs {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kRead = 128 << 10;  // the kernel's default readahead

class AccessModelTest : public ::testing::Test {
 protected:
  // 24 tensors of 1 to 3 MiB: rows of 4 KiB (f32, 1024 columns).
  static ChunkPlan Plan() {
    SafetensorsHeader h;
    h.header_length = 4088;
    for (uint64_t i = 0, at = 0; i < 24; ++i) {
      const uint64_t rows = 256 + 96 * (i % 5);
      h.tensors.push_back(TensorInfo{"t" + std::to_string(i), Dtype::F32, {rows, 1024}, at, at + rows * 4096});
      at += rows * 4096;
    }
    return ChunkPlan::ForSafetensors(h, h.data_start() + h.data_size(), h.data_start(), 8 << 20);
  }

  // One open file's reader: each a reader of its own (an id of its own).
  struct ReaderState {
    AccessModel::Trail trail;
    AccessModel::ReaderClock clock;
    SliceLearner learner{Tuning{}};
    uint64_t process = 0;  // the process that opened its file (0: not known)
    uint64_t id = ++last_id;

    AccessModel::Reader Of(uint64_t file_readahead = 0) {
      return AccessModel::Reader{trail, clock, learner, id, file_readahead, process};
    }
    static inline uint64_t last_id = 0;
  };

  // A file as rank 0 of 16 read it on a mount (files at 64 KiB): tensors of
  // 1.5 to 7.5 MiB, then the embedding, then one it moves on to; its data
  // after a header of `header_length` bytes.
  static ChunkPlan RankZeroPlan(uint64_t header_length = 4088) {
    SafetensorsHeader h;
    h.header_length = header_length;
    uint64_t at = 0;
    for (auto [rows, cols] : {std::pair<uint64_t, uint64_t>{512, 1536}, {1536, 1536}, {1536, 2560}, {32000, 1536},
                              {512, 1536}}) {
      h.tensors.push_back(TensorInfo{"t" + std::to_string(at), Dtype::BF16, {rows, cols}, at, at + rows * cols * 2});
      at += rows * cols * 2;
    }
    return ChunkPlan::ForSafetensors(h, h.data_start() + h.data_size(), h.data_start(), 8 << 20);
  }
  static constexpr uint64_t kFile = 64 << 10;  // RankZeroPlan's files' readahead
  // Reads of [begin, end) of tensor `i` of `plan` in the file's readahead,
  // then reads at its last tensor's start until they settle; the calls they
  // made are added to `calls`.
  void ReadRankZero(AccessModel& model, const ChunkPlan& plan, ReaderState& r, size_t i, uint64_t begin,
                    uint64_t end, std::vector<AccessModel::PlannerCall>* calls) {
    const auto& t = plan.tensors();
    const AccessModel::Reader reader = r.Of(kFile);
    for (uint64_t x = t[i].begin + begin; x < t[i].begin + end; x += kFile) {
      const ByteRange range{x, std::min(kFile, t[i].begin + end - x)};
      const AccessModel::Answer a = model.Classify(plan, "m", reader, range);
      calls->insert(calls->end(), a.calls.begin(), a.calls.end());
    }
    for (int k = 0; k < 10; ++k) {
      const AccessModel::Answer a = model.Classify(plan, "m", reader, ByteRange{t[4].begin + k * kPage, kPage});
      calls->insert(calls->end(), a.calls.begin(), a.calls.end());
    }
  }
  // Rank 0's first three slices, which 0/15 fits: `r` learns 0/15.
  void TeachZeroOfFifteen(AccessModel& model, const ChunkPlan& plan, ReaderState& r,
                          std::vector<AccessModel::PlannerCall>* calls) {
    ReadRankZero(model, plan, r, 0, 0, 224248, calls);
    ReadRankZero(model, plan, r, 1, 0, 420856, calls);
    ReadRankZero(model, plan, r, 2, 0, 610296, calls);
  }

  AccessModel::Answer Read(ReaderState& r, ByteRange range) {
    return model_.Classify(plan_, "model.safetensors", r.Of(), range);
  }
  // The kernel's reads for a copy of [begin, end) out of an mmap: the page
  // at its start, the one at its end (each with the readahead around it),
  // then the rest in readahead-sized reads.
  std::vector<ByteRange> CopyReads(uint64_t begin, uint64_t end) const {
    std::vector<ByteRange> out{ByteRange{begin, kPage}, ByteRange{end - kPage, kPage}};
    for (uint64_t at = begin + kPage; at < end - kPage; at += kRead) {
      out.push_back(ByteRange{at, std::min(kRead, end - kPage - at)});
    }
    return out;
  }
  // The kernel's reads for a copy of [begin, end) out of an mmap at its
  // default readahead: around the first page, around the last, then the
  // rest in readahead-sized reads.
  std::vector<ByteRange> FaultReads(uint64_t begin, uint64_t end) const {
    std::vector<ByteRange> out;
    for (uint64_t at : {begin, end - 1}) out.push_back(ByteRange{(at - kRead / 2) & ~(kPage - 1), kRead});
    for (uint64_t at = (begin + kRead / 2) & ~(kPage - 1); at < end - kRead / 2; at += kRead) {
      out.push_back(ByteRange{at, std::min(kRead, end - kRead / 2 - at)});
    }
    return out;
  }
  // A file as a qwen2 checkpoint lays out its attention weights (bf16, rows
  // of 2 KiB): a 1 MiB tensor, a bias (one row), a 2 MiB tensor, a layer
  // norm (one row), a 2 MiB tensor; tensor boundaries off the page grid, as
  // a header's length leaves them.
  static ChunkPlan NormsAroundPlan() {
    SafetensorsHeader h;
    h.header_length = 5088;
    uint64_t at = 0;
    for (auto [name, shape] : {std::pair<const char*, std::vector<uint64_t>>{"a", {512, 1024}}, {"bias", {1024}},
                               {"t", {1024, 1024}}, {"norm", {1024}}, {"u", {1024, 1024}}}) {
      const uint64_t bytes = 2 * (shape.size() == 2 ? shape[0] * shape[1] : shape[0]);
      h.tensors.push_back(TensorInfo{name, Dtype::BF16, shape, at, at + bytes});
      at += bytes;
    }
    return ChunkPlan::ForSafetensors(h, h.data_start() + h.data_size(), h.data_start(), 8 << 20);
  }
  // The kernel's read around a fault at byte `at`, in a file opened at `readahead`.
  static ByteRange Around(uint64_t at, uint64_t readahead) {
    return ByteRange{(at & ~(kPage - 1)) - readahead / 2, readahead};
  }
  // Rows rank/world..(rank+1)/world of `t`.
  static ByteRange RowsOf(const TensorSpan& t, uint64_t rank, uint64_t world) {
    const uint64_t n = t.rows();
    return ByteRange{t.begin + rank * n / world * t.row_bytes, ((rank + 1) * n / world - rank * n / world) * t.row_bytes};
  }

  const TensorSpan& T(size_t i) const { return plan_.tensors()[i]; }
  // Rows rank/world..(rank+1)/world of tensor `i`.
  ByteRange Rows(size_t i, uint64_t rank, uint64_t world) const {
    const uint64_t n = T(i).rows();
    return ByteRange{T(i).begin + rank * n / world * T(i).row_bytes,
                     ((rank + 1) * n / world - rank * n / world) * T(i).row_bytes};
  }

  Tuning tuning_;
  AccessModel model_{tuning_, std::nullopt};
  const ChunkPlan plan_ = Plan();
};

TEST_F(AccessModelTest, CopyOfAWholeTensorMakesAWholeReaderAndAsksForTheRestOfIt) {
  ReaderState r;
  const std::vector<ByteRange> reads = CopyReads(T(3).begin, T(3).end);
  EXPECT_EQ(Read(r, reads[0]).mode, AccessModel::Mode::kUnknown);
  EXPECT_EQ(Read(r, reads[1]).mode, AccessModel::Mode::kWholeEnd) << "the last page right after the first";
  const AccessModel::Answer third = Read(r, reads[2]);
  EXPECT_EQ(third.mode, AccessModel::Mode::kWhole);
  ASSERT_EQ(third.calls.size(), 1u);
  EXPECT_EQ(third.calls[0].kind, AccessModel::PlannerCall::Kind::kWholeTensor);
  EXPECT_EQ(third.calls[0].tensor, 3u);
  EXPECT_EQ(Read(r, ByteRange{T(9).begin + 5 * kPage, kPage}).mode, AccessModel::Mode::kWhole)
      << "a whole reader's read anywhere";
  EXPECT_TRUE(model_.patterns().empty());
}

// The kernel's reads of a copy's readahead are several at once, which the
// mount's threads take up in any order: pieces past the first page's touch
// come before the piece that grows it, before or after the last page, and lie
// between the two as touches of their own. The copy is told as the first
// page's touch grows, as when the reads come in order.
TEST_F(AccessModelTest, CopyOfAWholeTensorReadOutOfOrderMakesAWholeReader) {
  const std::vector<ByteRange> reads = CopyReads(T(3).begin, T(3).end);
  ASSERT_GE(reads.size(), 5u);
  for (const std::vector<size_t>& order : {std::vector<size_t>{0, 1, 3, 4, 2}, std::vector<size_t>{0, 3, 4, 1, 2}}) {
    ReaderState r;
    std::vector<AccessModel::PlannerCall> calls;
    for (size_t i : order) {
      const AccessModel::Answer a = Read(r, reads[i]);
      if (i == 2) {
        EXPECT_EQ(a.mode, AccessModel::Mode::kWhole) << "the first page's touch grown after the last page";
      } else {
        EXPECT_NE(a.mode, AccessModel::Mode::kWhole) << "read " << i << ", before the first page's grew";
      }
      calls.insert(calls.end(), a.calls.begin(), a.calls.end());
    }
    ASSERT_EQ(calls.size(), 1u);
    EXPECT_EQ(calls[0].kind, AccessModel::PlannerCall::Kind::kWholeTensor);
    EXPECT_EQ(calls[0].tensor, 3u);
  }
}

// glibc's memcpy copies large blocks backward when the destination's offset
// from the source would alias in 4 KiB: the first page, the last, then the
// rest down from the last. Such a copy is told as soon as the last page's
// touch grows down, as a forward one is when the first page's grows up.
TEST_F(AccessModelTest, BackwardCopyOfAWholeTensorMakesAWholeReader) {
  ReaderState r;
  EXPECT_EQ(Read(r, ByteRange{T(3).begin, kPage}).mode, AccessModel::Mode::kUnknown);
  EXPECT_EQ(Read(r, ByteRange{T(3).end - kPage, kPage}).mode, AccessModel::Mode::kWholeEnd);
  const AccessModel::Answer third = Read(r, ByteRange{T(3).end - kPage - kRead, kRead});
  EXPECT_EQ(third.mode, AccessModel::Mode::kWhole);
  ASSERT_EQ(third.calls.size(), 1u);
  EXPECT_EQ(third.calls[0].kind, AccessModel::PlannerCall::Kind::kWholeTensor);
  EXPECT_EQ(third.calls[0].tensor, 3u);
}

TEST_F(AccessModelTest, BackwardCopyOfASliceAsksForTheBytesBetweenItsFirstAndLastPages) {
  ReaderState r;
  const ByteRange slice = Rows(3, 1, 4);
  Read(r, ByteRange{slice.offset, kPage});
  Read(r, ByteRange{slice.end() - kPage, kPage});
  const AccessModel::Answer third = Read(r, ByteRange{slice.end() - kPage - kRead, kRead});
  ASSERT_EQ(third.calls.size(), 1u);
  EXPECT_EQ(third.calls[0].kind, AccessModel::PlannerCall::Kind::kCopyGap);
  EXPECT_EQ(third.calls[0].range, (ByteRange{slice.offset + kPage, slice.length - 2 * kPage - kRead}));
  EXPECT_EQ(third.copy_end, slice.end());
  EXPECT_EQ(Read(r, ByteRange{slice.end(), kPage}).mode, AccessModel::Mode::kAround) << "past the copy";
}

// A slice reader (rank 5 of 8) copies its row of the bias, then its row of
// the layer norm: the kernel reads around the first across the start of the
// 2 MiB tensor between them, and around the second back across its end.
// That is what a copy of the tensor makes the kernel read (its first page,
// then its last), but the second fault lay past the tensor: its end is not
// the last page of a copy of it, and only the bytes read are fetched.
TEST_F(AccessModelTest, AReadAroundAFaultPastATensorIsNoCopysLastPage) {
  const ChunkPlan plan = NormsAroundPlan();
  const auto& t = plan.tensors();
  for (const uint64_t readahead : {kFile, kRead}) {
    AccessModel model(tuning_, std::nullopt);
    ReaderState r;
    const ByteRange bias = RowsOf(t[1], 5, 8), norm = RowsOf(t[3], 5, 8);
    // The bias's row is on the tensor's first page; the norm's past its last.
    ASSERT_EQ(bias.offset & ~(kPage - 1), t[2].begin & ~(kPage - 1));
    ASSERT_GE(norm.offset & ~(kPage - 1), t[2].end);
    model.Classify(plan, "m", r.Of(readahead), Around(bias.offset, readahead));
    const AccessModel::Answer second = model.Classify(plan, "m", r.Of(readahead), Around(norm.offset, readahead));
    EXPECT_EQ(second.mode, AccessModel::Mode::kAround) << "readahead " << readahead;
    EXPECT_TRUE(second.calls.empty()) << "readahead " << readahead;
    // Its own row of the tensor, copied in order, is no copy of the tensor.
    const ByteRange rows = RowsOf(t[2], 5, 8);
    for (uint64_t at = Around(rows.offset, readahead).offset; at < rows.end() + readahead; at += readahead) {
      const AccessModel::Answer a = model.Classify(plan, "m", r.Of(readahead), ByteRange{at, readahead});
      EXPECT_TRUE(a.calls.empty()) << "readahead " << readahead << ", at " << at;
    }
    EXPECT_LE(r.clock.whole_until, r.clock.reads) << "readahead " << readahead << ": taken for a whole reader";
  }
}

// A slice reader's rows near a tensor's end (a late rank's of a tensor of a
// few MiB, read at a slice host's small readahead) reach neither edge of the
// tensor: they are a place the reader chose, and once it has left them they
// are remembered among the touches it left (where the fetch planner looks for
// where its rows of the next tensor likely end), which the kernel's reads
// across an edge are not.
TEST_F(AccessModelTest, RowsLeftNearATensorsEndAreRemembered) {
  constexpr uint64_t kSmall = 16 << 10;
  AccessModel model(tuning_, std::nullopt);
  ReaderState r;
  // Rows 6/8 of three tensors, one after the other, each as the kernel reads
  // it: around its first page, then on in readahead windows to one past it.
  for (size_t i : {0, 5, 10}) {
    const ByteRange rows = Rows(i, 6, 8);
    ASSERT_LT(T(i).end - rows.end(), tuning_.spill_max) << "not near the tensor's end";
    for (uint64_t at = Around(rows.offset, kSmall).offset; at < rows.end() + kSmall; at += kSmall) {
      model.Classify(plan_, "m", r.Of(kSmall), ByteRange{at, kSmall});
    }
  }
  // The first two are left; each is remembered with its rows, not an edge's.
  for (size_t i : {0, 5}) {
    const auto left = std::find_if(r.trail.left.begin(), r.trail.left.end(),
                                   [&](const AccessModel::Trail::Left& x) { return x.tensor == static_cast<int>(i); });
    ASSERT_NE(left, r.trail.left.end()) << "tensor " << i;
    EXPECT_LE(left->range.offset, Rows(i, 6, 8).offset) << "tensor " << i;
    EXPECT_GE(left->range.end(), Rows(i, 6, 8).end()) << "tensor " << i;
    EXPECT_LT(left->range.end(), T(i).end) << "tensor " << i;
    EXPECT_TRUE(left->edge) << "tensor " << i;
  }
}

// The same reads a copy of that tensor makes the kernel read: around its
// first page (the bias's page), then around its last, across its end into
// the tensors after. That fault lay in the tensor: a whole-tensor copy.
TEST_F(AccessModelTest, AWholeCopysReadAroundItsLastPageIntoTheNextTensorsIsItsLastPage) {
  const ChunkPlan plan = NormsAroundPlan();
  const auto& t = plan.tensors();
  for (const uint64_t readahead : {kFile, kRead}) {
    AccessModel model(tuning_, std::nullopt);
    ReaderState r;
    EXPECT_EQ(model.Classify(plan, "m", r.Of(readahead), Around(t[2].begin, readahead)).mode,
              AccessModel::Mode::kUnknown);
    const ByteRange last = Around(t[2].end - 1, readahead);
    ASSERT_GT(last.end(), t[3].end) << "the read runs on into the tensors after";
    EXPECT_EQ(model.Classify(plan, "m", r.Of(readahead), last).mode, AccessModel::Mode::kWholeEnd)
        << "readahead " << readahead;
    const AccessModel::Answer third = model.Classify(
        plan, "m", r.Of(readahead), ByteRange{Around(t[2].begin, readahead).end(), readahead});
    EXPECT_EQ(third.mode, AccessModel::Mode::kWhole) << "readahead " << readahead;
    ASSERT_EQ(third.calls.size(), 1u) << "readahead " << readahead;
    EXPECT_EQ(third.calls[0].kind, AccessModel::PlannerCall::Kind::kWholeTensor);
    EXPECT_EQ(third.calls[0].tensor, 2u);
  }
}

// The last rank's slice ends with its tensor. Its reader copies its row of
// the bias (the kernel reads around it across the tensor's start), then its
// rows of the tensor, in order, up to the tensor's end; the kernel's
// readahead of the bias's page then runs on into the tensor. The touch at
// the start grows after the one at the end appeared: the shape of a copy's
// first page, last page, then the rest. But the touch at the end grew before
// it, read on from its first page: the start of the reader's rows, not a
// copy's last page, which is read once before the copy goes back to its
// first.
TEST_F(AccessModelTest, RowsReadOnFromTheirFirstPageAreNoCopysLastPage) {
  const ChunkPlan plan = NormsAroundPlan();
  const auto& t = plan.tensors();
  ReaderState r;
  const ByteRange bias = RowsOf(t[1], 7, 8), rows = RowsOf(t[2], 7, 8);
  ASSERT_EQ(bias.offset & ~(kPage - 1), t[2].begin & ~(kPage - 1));
  ASSERT_EQ(rows.end(), t[2].end);
  std::vector<AccessModel::PlannerCall> calls;
  auto read = [&](ByteRange range) {
    const AccessModel::Answer a = model_.Classify(plan, "m", r.Of(kFile), range);
    calls.insert(calls.end(), a.calls.begin(), a.calls.end());
    return a;
  };
  const ByteRange first = Around(bias.offset, kFile);
  read(first);
  for (uint64_t at = Around(rows.offset, kFile).offset; at < rows.end() + kFile / 2; at += kFile) {
    read(ByteRange{at, kFile});
  }
  const AccessModel::Answer on = read(ByteRange{first.end(), kFile});
  EXPECT_NE(on.mode, AccessModel::Mode::kWhole);
  EXPECT_TRUE(calls.empty()) << "calls for " << calls.size() << " copies";
  EXPECT_LE(r.clock.whole_until, r.clock.reads) << "taken for a whole reader";
}

TEST_F(AccessModelTest, SliceReaderTeachesItsRowsAndItsReadsFallInTheirWindows) {
  ReaderState r;
  size_t learned_at = 0;
  for (size_t i = 0; i < 16 && learned_at == 0; ++i) {
    const ByteRange rows = Rows(i, 1, 4);
    for (const ByteRange& read : FaultReads(rows.offset, rows.end())) Read(r, read);
    if (!model_.patterns().empty()) learned_at = i + 1;
  }
  ASSERT_NE(learned_at, 0u) << "no pattern after 16 tensors";
  EXPECT_TRUE(model_.patterns()[0].learned.pattern.SameSlice(SlicePattern::Shard(1, 4)))
      << model_.patterns()[0].learned.pattern.ToString();
  const AccessModel::Answer inside = Read(r, ByteRange{Rows(20, 1, 4).offset + kRead, kRead});
  EXPECT_EQ(inside.mode, AccessModel::Mode::kSlice);
  ASSERT_NE(inside.pattern, nullptr);
  EXPECT_EQ(model_.WindowOf(plan_, inside.pattern->learned.pattern, 20).offset,
            Rows(20, 1, 4).offset - inside.pattern->learned.pattern.before);
  EXPECT_NE(Read(r, ByteRange{Rows(21, 3, 4).offset + kRead, kRead}).mode, AccessModel::Mode::kSlice)
      << "another rank's rows";
  // Another reader, reading whole tensors, is not taken for a slice reader.
  ReaderState whole;
  const std::vector<ByteRange> copy = CopyReads(T(22).begin, T(22).end);
  for (const ByteRange& read : copy) Read(whole, read);
  EXPECT_GT(whole.clock.whole_until, whole.clock.reads);
}

// Slices at a tensor's edge smaller than Tuning::spill_max: the first
// rank's (the read-around of its first page reaches back across the edge
// into the tensor before) and the last rank's (its readahead runs on across
// the edge into the tensor after). Each reader's own rows are learned; what
// the kernel read across the edge is not taken for them.
TEST_F(AccessModelTest, SlicesAtATensorsEdgeAreLearnedAndTheReadsAcrossItAreNot) {
  for (const uint64_t rank : {uint64_t{0}, uint64_t{7}}) {
    AccessModel model(tuning_, std::nullopt);
    ReaderState r;
    for (size_t i = 1; i < 16 && model.patterns().empty(); ++i) {
      const ByteRange rows = Rows(i, rank, 8);
      ASSERT_LT(rows.length + kRead, tuning_.spill_max);
      for (const ByteRange& read : FaultReads(rows.offset, rows.end())) {
        model.Classify(plan_, "m", r.Of(), read);
      }
    }
    ASSERT_EQ(model.patterns().size(), 1u) << "rank " << rank;
    EXPECT_TRUE(model.patterns()[0].learned.pattern.SameSlice(SlicePattern::Shard(rank, 8)))
        << "rank " << rank << ": " << model.patterns()[0].learned.pattern.ToString();
  }
}

// A reader whose first slices fit a wider fraction than its own (rank 0 of
// 16 taken for 0/15, as a mount saw it: files at 64 KiB, tensors of 1.5 to
// 7.5 MiB, then the embedding) is given its own once a larger tensor shows
// it: the wider pattern is dropped, its sweeps with it, and the reader's
// reads past its own rows are no longer in a window. Readers of other
// processes (or of none known), which did not learn it, do not narrow it.
TEST_F(AccessModelTest, AReaderThatLeavesRowsOfItsLearnedPatternUnreadNarrowsIt) {
  const ChunkPlan plan = RankZeroPlan();
  const auto& t = plan.tensors();
  AccessModel model(tuning_, std::nullopt);
  std::vector<AccessModel::PlannerCall> calls;
  ReaderState r{.process = 41};
  TeachZeroOfFifteen(model, plan, r, &calls);
  ASSERT_EQ(model.patterns().size(), 1u);
  const AccessModel::ActivePattern wide = model.patterns()[0];
  ASSERT_TRUE(wide.learned.pattern.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 15}))
      << wide.learned.pattern.ToString();
  EXPECT_EQ(wide.process, 41u);
  EXPECT_FALSE(wide.learned.support.empty());

  // They read the same rows, as r will.
  for (const uint64_t process : {uint64_t{0}, uint64_t{42}}) {
    ReaderState other{.process = process};
    ReadRankZero(model, plan, other, 3, 62456, 6222840, &calls);
    ASSERT_EQ(model.patterns().size(), 1u) << "process " << process;
    EXPECT_EQ(model.patterns()[0].id, wide.id) << "process " << process;
    EXPECT_TRUE(calls.empty()) << "process " << process;
  }

  ReadRankZero(model, plan, r, 3, 62456, 6222840, &calls);
  ASSERT_EQ(model.patterns().size(), 1u);
  EXPECT_TRUE(model.patterns()[0].learned.pattern.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 16}))
      << model.patterns()[0].learned.pattern.ToString();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kind, AccessModel::PlannerCall::Kind::kPatternDropped);
  EXPECT_EQ(calls[0].pattern_id, wide.id);
  EXPECT_EQ(model.Pattern(wide.id), nullptr);
  // 1/15's last rows of the embedding, 330 KiB past 1/16's: no window's now.
  const ByteRange past{t[3].begin + 32000 / 15 * 3072 - kPage, kPage};
  EXPECT_NE(model.Classify(plan, "m", r.Of(kFile), past).mode,
            AccessModel::Mode::kSlice);
}

// A process reads its rows of every shard, each through a file of its own:
// a pattern learned too wide in its first file is narrowed by its reader of
// another file (a new reader, whose learner never learned it), as the
// reader that learned it would.
TEST_F(AccessModelTest, AReaderOfAnotherFileOfTheSameProcessNarrowsItsPattern) {
  const ChunkPlan first = RankZeroPlan();
  const ChunkPlan next = RankZeroPlan(/*header_length=*/12280);
  AccessModel model(tuning_, std::nullopt);
  std::vector<AccessModel::PlannerCall> calls;
  ReaderState r{.process = 41};
  TeachZeroOfFifteen(model, first, r, &calls);
  ASSERT_EQ(model.patterns().size(), 1u);
  const AccessModel::ActivePattern wide = model.patterns()[0];
  ASSERT_TRUE(wide.learned.pattern.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 15}))
      << wide.learned.pattern.ToString();

  ReaderState sibling{.process = 41};
  ReadRankZero(model, next, sibling, 3, 62456, 6222840, &calls);
  ASSERT_EQ(model.patterns().size(), 1u);
  const AccessModel::ActivePattern narrow = model.patterns()[0];
  EXPECT_TRUE(narrow.learned.pattern.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 16}))
      << narrow.learned.pattern.ToString();
  EXPECT_EQ(narrow.process, 41u);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].kind, AccessModel::PlannerCall::Kind::kPatternDropped);
  EXPECT_EQ(calls[0].pattern_id, wide.id);
}

// -o shard=R/N: the pattern is there from the start, and is never dropped.
TEST_F(AccessModelTest, ShardPatternIsKnownBeforeAnyRead) {
  AccessModel model(tuning_, SlicePattern::Shard(2, 4, tuning_));
  ASSERT_EQ(model.patterns().size(), 1u);
  ReaderState r;
  const AccessModel::Answer a = model.Classify(plan_, "m", r.Of(),
                                               ByteRange{Rows(0, 2, 4).offset + kPage, kPage});
  EXPECT_EQ(a.mode, AccessModel::Mode::kSlice);
  EXPECT_EQ(a.pattern, &model.patterns()[0]);
}

// A slice of a layer norm (a few rows in one page) is copied without reaching
// the page the kernel marks for readahead: its window ends where the
// read-around of its page does, not the learned margin past it, deep in the
// tensor after. A slice that runs past that page keeps the margin.
TEST_F(AccessModelTest, ASliceWithinAPageIsReadAroundNoFurther) {
  SafetensorsHeader h;
  h.header_length = 4088;
  uint64_t at = 0;
  for (auto [name, shape] : {std::pair<const char*, std::vector<uint64_t>>{"a", {256, 1024}}, {"norm", {1024}},
                             {"b", {256, 1024}}}) {
    const uint64_t bytes = 4 * (shape.size() == 2 ? shape[0] * shape[1] : shape[0]);
    h.tensors.push_back(TensorInfo{name, Dtype::F32, shape, at, at + bytes});
    at += bytes;
  }
  const ChunkPlan plan = ChunkPlan::ForSafetensors(h, h.data_start() + h.data_size(), h.data_start(), 8 << 20);
  SlicePattern p = SlicePattern::Shard(1, 4, tuning_);
  p.before = 68 << 10;
  p.after = 212 << 10;
  AccessModel model(tuning_, std::nullopt);
  for (uint64_t readahead : {uint64_t{0}, uint64_t{16} << 10}) {
    const uint64_t half = model.ReadAroundHalf(readahead);
    const ByteRange norm = p.Core(plan.tensors()[1]);
    ASSERT_LT(norm.length, kPage);
    EXPECT_EQ(model.WindowOf(plan, p, 1, readahead).end(), (norm.offset & ~(kPage - 1)) + half)
        << "readahead " << readahead;
    const ByteRange b = p.Core(plan.tensors()[2]);
    EXPECT_EQ(model.WindowOf(plan, p, 2, readahead).end(), b.end() + std::min(p.after, readahead ? 2 * half : p.after))
        << "readahead " << readahead;
  }
}

// At the slice readahead, the windows' margins are no wider than what the
// kernel reads around a fault there.
TEST_F(AccessModelTest, SliceReadaheadNarrowsTheWindows) {
  const Tuning tuning = Tuning::For(8 << 20, 1 << 20, 32 << 10);
  SlicePattern wide = SlicePattern::Shard(1, 4, tuning);
  wide.before = wide.after = 512 << 10;
  AccessModel model(tuning, wide);
  const ByteRange before = model.WindowOf(plan_, wide, 5);
  model.SetReadahead(32 << 10);
  const ByteRange narrow = model.WindowOf(plan_, wide, 5);
  EXPECT_LT(narrow.length, before.length);
  EXPECT_EQ(narrow.offset, Rows(5, 1, 4).offset - tuning.slice_read_around_half);
  // The small slices' readahead: half those margins, but for an object
  // whose files were opened at the slice readahead, the kernel reading
  // around its slices by that.
  model.SetReadahead(16 << 10);
  const ByteRange narrower = model.WindowOf(plan_, wide, 5);
  EXPECT_EQ(narrower.offset, Rows(5, 1, 4).offset - (8 << 10));
  EXPECT_EQ(narrower.end(), Rows(5, 1, 4).end() + (16 << 10));
  EXPECT_EQ(model.ReadAroundHalf(0), 8u << 10);
  EXPECT_EQ(model.WindowOf(plan_, wide, 5, /*file_readahead=*/32 << 10), narrow);
  EXPECT_EQ(model.ReadAroundHalf(32 << 10), 16u << 10);
  EXPECT_EQ(model.WindowOf(plan_, wide, 5, /*file_readahead=*/1 << 20), before);
  EXPECT_EQ(model.ReadAroundHalf(1 << 20), tuning.read_around_half);
  model.SetReadahead(1 << 20);
  EXPECT_EQ(model.WindowOf(plan_, wide, 5), before);
}

}  // namespace
}  // namespace tensorfs
