#include "core/engine/slice_pattern.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace tensorfs {
namespace {

// Tensors of a Llama-like layer (bf16, hidden 2048): sizes differ, as the
// learner needs.
std::vector<TensorSpan> Tensors() {
  std::vector<TensorSpan> out;
  uint64_t at = 4096;
  for (auto [rows, cols] : {std::pair<uint64_t, uint64_t>{32000, 2048}, {5632, 2048}, {2048, 2048}, {256, 2048},
                            {2048, 5632}, {2048, 2048}}) {
    out.push_back(TensorSpan{at, at + rows * cols * 2, cols * 2});
    at += rows * cols * 2;
  }
  return out;
}

// What the kernel reads for a reader of rows rank/world of `t`: its rows, 64 KiB
// before (mmap read-around) and `after` bytes past them, in whole pages.
SliceObservation Observed(const TensorSpan& t, uint64_t rank, uint64_t world, uint64_t after = 192 << 10) {
  const uint64_t n = t.rows();
  const uint64_t begin = t.begin + rank * n / world * t.row_bytes;
  const uint64_t end = t.begin + (rank + 1) * n / world * t.row_bytes;
  return SliceObservation{t, std::max(t.begin, (begin - std::min(begin, uint64_t{64} << 10)) & ~uint64_t{4095}),
                          std::min(t.end, (end + after + 4095) & ~uint64_t{4095})};
}

// The pattern an observation completed, if any.
std::optional<SlicePattern> PatternOf(const std::optional<LearnedPattern>& learned) {
  if (!learned) return std::nullopt;
  return learned->pattern;
}

// What a learner makes of `seen`, observed in order until a pattern comes.
std::optional<SlicePattern> LearnFrom(const std::vector<SliceObservation>& seen) {
  SliceLearner learner;
  std::optional<SlicePattern> learned;
  for (const SliceObservation& o : seen) {
    if (!learned) learned = PatternOf(learner.Observe(o));
  }
  return learned;
}

TEST(SlicePatternTest, LearnsTheRowFractionFromAFewTensorsOfDifferentSizes) {
  for (uint64_t world : {2u, 4u, 8u, 16u}) {
    for (uint64_t rank : {uint64_t{0}, world / 2, world - 1}) {
      SliceLearner learner;
      std::optional<SlicePattern> learned;
      for (const TensorSpan& t : Tensors()) {
        if (!learned) learned = PatternOf(learner.Observe(Observed(t, rank, world)));
      }
      ASSERT_TRUE(learned.has_value()) << "nothing learned for " << rank << "/" << world;
      // The rows, give or take a thousandth of the tensor (a fraction that
      // fits every tensor with less margin wins a tie).
      EXPECT_NEAR(double(learned->lo_num) / learned->den, double(rank) / world, 1e-3) << learned->ToString();
      EXPECT_NEAR(double(learned->hi_num) / learned->den, double(rank + 1) / world, 1e-3) << learned->ToString();
    }
  }
}

// The kernel's asynchronous readahead past a slice varies from tensor to
// tensor (here 68 to 191 KiB): a fraction a little narrower than the reader's
// own (rows 7/28..10/28 for 2/8..3/8) explains the same reads with margins
// that vary less, and must not win over the simpler one.
TEST(SlicePatternTest, LearnsTheReadersOwnFractionNotANarrowerNeighbour) {
  // Reads of rank 2 of 8 as a mount saw them (bf16, hidden 2400).
  const TensorSpan mlp{1000000, 1000000 + 23040000, 9600};
  const TensorSpan attn1{50000000, 50000000 + 11520000, 4800};
  const TensorSpan attn2{70000000, 70000000 + 11520000, 4800};
  const std::optional<SlicePattern> learned =
      LearnFrom({SliceObservation{mlp, mlp.begin + 5693064, mlp.begin + 8707720},
                 SliceObservation{attn1, attn1.begin + 2811464, attn1.begin + 4511304},
                 SliceObservation{attn2, attn2.begin + 2811400, attn2.begin + 4503048}});
  ASSERT_TRUE(learned.has_value());
  EXPECT_TRUE(learned->SameSlice(SlicePattern{.lo_num = 2, .hi_num = 3, .den = 8})) << learned->ToString();
}

// Reads of ranks of 8 as mounts saw them, in a shuffled order (bf16, hidden
// 736: tensors of 2 and 1 MiB), the first three informative ones each made
// (the second, a header's read-around, teaches nothing).
struct SeenRank {
  uint64_t rank;
  std::vector<std::pair<uint64_t, uint64_t>> reads;  // in tensors 2 MiB, 1 MiB, 1 MiB, 1 MiB
};
std::vector<SliceObservation> SmallTensorReads(const SeenRank& seen) {
  const TensorSpan mlp{10000000, 10000000 + 2166784, 2944};
  const TensorSpan attn0{20000000, 20000000 + 1083392, 1472};
  const TensorSpan attn1{30000000, 30000000 + 1083392, 1472};
  const TensorSpan attn2{40000000, 40000000 + 1083392, 1472};
  std::vector<SliceObservation> out;
  const TensorSpan* tensors[] = {&mlp, &attn0, &attn1, &attn2};
  for (size_t i = 0; i < seen.reads.size(); ++i) {
    const TensorSpan& t = *tensors[i];
    out.push_back(SliceObservation{t, t.begin + seen.reads[i].first, t.begin + seen.reads[i].second});
  }
  return out;
}

// The kernel reads 176 to 188 KiB past these slices, more than a row of 8
// in a 1 MiB tensor (132 KiB): the fraction is where the reads end less
// those margins, not in the rows the reads end in (where 2/9..4/9 was found).
TEST(SlicePatternTest, LearnsTheReadersFractionWhenItsMarginsSpanMoreThanARow) {
  const std::optional<SlicePattern> learned = LearnFrom(
      SmallTensorReads({2, {{472696, 988792}, {0, 60472}, {204984, 594104}, {202936, 592056}}}));
  ASSERT_TRUE(learned.has_value());
  EXPECT_TRUE(learned->SameSlice(SlicePattern{.lo_num = 2, .hi_num = 3, .den = 8})) << learned->ToString();
}

// Fractions of smaller denominators also explain these three tensors (1/7,
// 3/6..4/6, 3/5..4/5), but with margins the kernel does not read around a
// slice (85 KiB past one: more than a read-around, less than a readahead
// window): the reader's own fraction, whose margins it does read, wins.
TEST(SlicePatternTest, LearnsTheFractionWhoseMarginsAreTheKernels) {
  for (const SeenRank& seen : {SeenRank{1, {{202360, 726648}, {0, 60472}, {69816, 463032}, {67768, 460984}}},
                               SeenRank{4, {{1017464, 1529464}, {0, 64568}, {475320, 856248}, {473272, 854200}}},
                               SeenRank{5, {{1287800, 1807992}, {0, 64568}, {610488, 1003704}, {608440, 1001656}}}}) {
    const std::optional<SlicePattern> learned = LearnFrom(SmallTensorReads(seen));
    ASSERT_TRUE(learned.has_value()) << "rank " << seen.rank;
    EXPECT_TRUE(learned->SameSlice(SlicePattern{.lo_num = seen.rank, .hi_num = seen.rank + 1, .den = 8}))
        << "rank " << seen.rank << ": " << learned->ToString();
  }
}

// Ranks 4, 8 and 12 of 16 (bf16, hidden 1536: tensors of 1.5, 4.5 and 7.5
// MiB). Rows 3/12..4/12 explain rank 4's three reads too, with margins past
// them that the kernel could read (191 KiB, a readahead window and more; 60
// and 53 KiB, a last page's read-around), but not all one way, where a
// reader copies its slices alike: 4/16..5/16 has 159 to 224 KiB past each.
TEST(SlicePatternTest, LearnsTheFractionWhoseMarginsAreTheKernelsOneWay) {
  const TensorSpan q_proj{10000000, 10000000 + 1572864, 3072};
  const TensorSpan o_proj{20000000, 20000000 + 4718592, 3072};
  const TensorSpan mlp{30000000, 30000000 + 7864320, 5120};
  const std::vector<std::pair<uint64_t, std::vector<std::pair<uint64_t, uint64_t>>>> ranks = {
      {4, {{326648, 715768}, {1113080, 1633272}, {1900536, 2674680}}},
      {8, {{719864, 1108984}, {2292728, 2812920}, {3866616, 4640760}}},
      {12, {{1113080, 1502200}, {3472376, 3992568}, {5832696, 6606840}}}};
  for (const auto& [rank, reads] : ranks) {
    std::vector<SliceObservation> seen;
    const TensorSpan* tensors[] = {&q_proj, &o_proj, &mlp};
    for (size_t i = 0; i < reads.size(); ++i) {
      seen.push_back(SliceObservation{*tensors[i], tensors[i]->begin + reads[i].first,
                                      tensors[i]->begin + reads[i].second});
    }
    const std::optional<SlicePattern> learned = LearnFrom(seen);
    ASSERT_TRUE(learned.has_value()) << "rank " << rank;
    EXPECT_TRUE(learned->SameSlice(SlicePattern{.lo_num = rank, .hi_num = rank + 1, .den = 16}))
        << "rank " << rank << ": " << learned->ToString();
  }
}

// A slice smaller than what the kernel reads around it: rank 1 of 8 of a
// 1.5 MiB tensor is 192 KiB, and the kernel read 65 KiB before it and 251 KiB
// past it. Its own fraction explains it (the read-around of the first page,
// two readahead windows past the last), as it does the larger tensors: a
// wider fraction (rows 9/78..22/78) that fitted all three because its margins
// stayed within its core must not win.
TEST(SlicePatternTest, LearnsAFractionWhoseSmallestSliceIsLessThanTheKernelReadsAroundIt) {
  // Reads of rank 1 of 8 as a mount saw them (bf16, hidden 1536, in the order read).
  const TensorSpan k_proj{10000000, 10000000 + 1572864, 3072};
  const TensorSpan o_proj{20000000, 20000000 + 4718592, 3072};
  const TensorSpan up_proj{30000000, 30000000 + 7864320, 5120};
  const std::optional<SlicePattern> learned =
      LearnFrom({SliceObservation{k_proj, k_proj.begin + 130040, k_proj.begin + 650232},
                 SliceObservation{o_proj, o_proj.begin + 523256, o_proj.begin + 1436664},
                 SliceObservation{up_proj, up_proj.begin + 917496, up_proj.begin + 2215928}});
  ASSERT_TRUE(learned.has_value());
  EXPECT_TRUE(learned->SameSlice(SlicePattern{.lo_num = 1, .hi_num = 2, .den = 8})) << learned->ToString();
}

// Before a slice the kernel reads only the read-around of its first page
// (64 KiB at the default readahead). Rank 1 of 16 read in a shuffled order saw
// no tensor large enough to tell 1/16 from its neighbours; a fraction whose
// rows start 176 KiB into what was read (rows 1/13..2/13) explained the three
// and was learned, and its windows fetched a third more than the reader
// needed.
TEST(SlicePatternTest, LearnedRowsStartWithinTheReadAroundOfWhatWasRead) {
  // Reads of rank 1 of 16 as a mount saw them (bf16, hidden 1536, in the order read).
  const TensorSpan k_proj{10000000, 10000000 + 1572864, 3072};
  const TensorSpan o_proj{20000000, 20000000 + 4718592, 3072};
  const TensorSpan down_proj{30000000, 30000000 + 7864320, 5120};
  const std::vector<SliceObservation> seen = {
      SliceObservation{k_proj, k_proj.begin + 31736, k_proj.begin + 420856},
      SliceObservation{o_proj, o_proj.begin + 228344, o_proj.begin + 748536},
      SliceObservation{down_proj, down_proj.begin + 425976, down_proj.begin + 1200120}};
  const std::optional<SlicePattern> learned = LearnFrom(seen);
  ASSERT_TRUE(learned.has_value());
  for (const SliceObservation& o : seen) {
    EXPECT_LE(learned->Core(o.tensor).offset, o.begin + (128 << 10)) << learned->ToString();
    EXPECT_GE(learned->Core(o.tensor).end() + 2 * o.tensor.row_bytes + 4096, o.end - (512 << 10))
        << learned->ToString();
  }
}

// Rank 0 of 16's first three slices (rows of 3072 and 5120 bytes), files
// opened at 64 KiB: the learner takes them for rows 0/15..1/15.
constexpr uint64_t kRankZeroFile = 64 << 10;
const TensorSpan kRankZeroKv{1 << 20, (1 << 20) + 1572864, 3072};
const TensorSpan kRankZeroAttn{16 << 20, (16 << 20) + 4718592, 3072};
const TensorSpan kRankZeroMlp{32 << 20, (32 << 20) + 7864320, 5120};

std::optional<LearnedPattern> TeachRankZerosFirstSlices(SliceLearner& learner) {
  std::optional<LearnedPattern> learned;
  for (const auto& [t, end] : {std::pair{kRankZeroKv, 224248}, {kRankZeroAttn, 420856}, {kRankZeroMlp, 610296}}) {
    if (!learned) learned = learner.Observe(SliceObservation{t, t.begin, t.begin + end, kRankZeroFile});
  }
  return learned;
}

// Reads of rank 0 of 16 as a mount saw them (bf16, hidden 1536, files opened
// at 64 KiB), in a shuffled order: the kernel's margins past the first three
// slices fit rows 0/15..1/15 as well as the reader's own 0/16..1/16, and the
// simpler is taken. The embedding's slice, 6 MiB, ends 330 KiB before 1/15's
// end (its first pages were read around a neighbour before the reader came):
// with the three, it narrows the pattern to the reader's own, in the learner
// that learned it or in another (the reader of the process's next file)
// given the three.
TEST(SlicePatternTest, ALearnedPatternIsNarrowedByATensorItsReaderLeftPartlyUnread) {
  constexpr uint64_t kFile = kRankZeroFile;
  const TensorSpan& mlp = kRankZeroMlp;
  const TensorSpan embed{64 << 20, (64 << 20) + 98304000, 3072};
  SliceLearner learner;
  const std::optional<LearnedPattern> learned = TeachRankZerosFirstSlices(learner);
  ASSERT_TRUE(learned.has_value());
  const SlicePattern& wide = learned->pattern;
  ASSERT_TRUE(wide.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 15})) << wide.ToString();
  EXPECT_EQ(learned->support.size(), 3u);

  const SliceObservation embedding{embed, embed.begin + 62456, embed.begin + 6222840, kFile};
  const SliceObservation mlp_again{mlp, mlp.begin, mlp.begin + 610296, kFile};
  EXPECT_TRUE(learner.LeavesUnread(embedding, wide));
  EXPECT_FALSE(learner.LeavesUnread(mlp_again, wide)) << "read past 1/15's end";
  const std::optional<LearnedPattern> narrowed = learner.Observe(embedding, &*learned);
  ASSERT_TRUE(narrowed.has_value());
  EXPECT_TRUE(narrowed->pattern.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 16}))
      << narrowed->pattern.ToString();
  EXPECT_EQ(narrowed->support.size(), 4u) << "the three and the embedding";

  SliceLearner sibling;
  const std::optional<LearnedPattern> by_sibling = sibling.Observe(embedding, &*learned);
  ASSERT_TRUE(by_sibling.has_value());
  EXPECT_TRUE(by_sibling->pattern.SameSlice(narrowed->pattern)) << by_sibling->pattern.ToString();

  // Alone, the embedding's slice teaches nothing: one tensor fits many
  // fractions.
  SliceLearner fresh;
  EXPECT_FALSE(fresh.Observe(embedding).has_value());
  const LearnedPattern unsupported{wide, {}};
  EXPECT_FALSE(fresh.Observe(embedding, &unsupported).has_value()) << "narrowing, without the pattern's support";
}

// The same reader's slice of a 7.5 MiB tensor in a file opened at 16 KiB, once
// 0/15 was learned (the bench's rank 0 of 16): the kernel read 23 KiB past
// 0/16's rows, 10 KiB short of 0/15's end. That is within two rows and a
// page, but the kernel reads at least around a copy's last page (8 KiB
// either side): the reader stopped before 0/15's end, and with the slices
// 0/15 was learned from, the tensor narrows it to 0/16.
TEST(SlicePatternTest, ACopyThatTheKernelReadOnlyALittlePastNarrowsAPatternAtTheSliceReadahead) {
  constexpr uint64_t kSliceFile = 16 << 10;
  const TensorSpan gate{48 << 20, (48 << 20) + 7864320, 3072};
  SliceLearner learner;
  const std::optional<LearnedPattern> learned = TeachRankZerosFirstSlices(learner);
  ASSERT_TRUE(learned.has_value());
  const SlicePattern& wide = learned->pattern;
  ASSERT_TRUE(wide.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 15})) << wide.ToString();

  const SliceObservation copy{gate, gate.begin, gate.begin + 515456, kSliceFile};
  ASSERT_TRUE(learner.LeavesUnread(copy, wide));
  const std::optional<LearnedPattern> narrowed = learner.Observe(copy, &*learned);
  ASSERT_TRUE(narrowed.has_value());
  EXPECT_TRUE(narrowed->pattern.SameSlice(SlicePattern{.lo_num = 0, .hi_num = 1, .den = 16}))
      << narrowed->pattern.ToString();
  // 0/16's own reader leaves none of its rows unread.
  EXPECT_FALSE(learner.LeavesUnread(copy, narrowed->pattern));
}

// What a reader read of a tensor leaves a pattern's rows unread only when it
// read at least half of them (less is the kernel reading around a
// neighbour's page) and where its ends are not within one readahead window
// of the tensor's (pages there may have been read before the reader came). A
// copy's kernel reads run on past its slice.
TEST(SlicePatternTest, RowsLeftUnreadAreToldOnlyFromAReadersOwnSlice) {
  const SliceLearner learner;
  const TensorSpan t{1 << 20, (1 << 20) + 8192 * 1024, 8192};  // 1024 rows of 8 KiB
  const SlicePattern quarter{.lo_num = 1, .hi_num = 2, .den = 4};  // rows 256..512: 2 MiB
  constexpr uint64_t kFile = 64 << 10;  // the file's readahead: one window
  const uint64_t lo = t.begin + (2u << 20), hi = t.begin + (4u << 20);
  EXPECT_FALSE(learner.LeavesUnread(SliceObservation{t, lo - kFile, hi + kFile, kFile}, quarter))
      << "all of it, and margins";
  EXPECT_FALSE(learner.LeavesUnread(SliceObservation{t, lo + 8192, hi - 8192 + kFile / 2, kFile}, quarter))
      << "a row each way, and the read-around past it";
  // The kernel reads around a copy's last page: half a read-around, less a
  // page, past it at least.
  EXPECT_TRUE(learner.LeavesUnread(SliceObservation{t, lo, hi, kFile}, quarter)) << "no read past a copy";
  EXPECT_TRUE(learner.LeavesUnread(SliceObservation{t, lo, hi - (256 << 10), kFile}, quarter)) << "its last 32 rows";
  EXPECT_TRUE(learner.LeavesUnread(SliceObservation{t, lo + (256 << 10), hi, kFile}, quarter)) << "its first 32 rows";
  EXPECT_FALSE(learner.LeavesUnread(SliceObservation{t, lo, lo + (512 << 10), kFile}, quarter)) << "a quarter of it";
  const SlicePattern first{.lo_num = 0, .hi_num = 1, .den = 4};
  EXPECT_FALSE(learner.LeavesUnread(SliceObservation{t, t.begin + (48 << 10), lo + kFile / 2, kFile}, first))
      << "begun within a window of its start: its first pages may have been read before";
  EXPECT_TRUE(learner.LeavesUnread(SliceObservation{t, t.begin + (96 << 10), lo + kFile / 2, kFile}, first));
}

TEST(SlicePatternTest, WindowHoldsWhatTheKernelReadsAndLittleMore) {
  SliceLearner learner;
  std::optional<SlicePattern> learned;
  std::vector<TensorSpan> tensors = Tensors();
  for (const TensorSpan& t : tensors) {
    if (!learned) learned = PatternOf(learner.Observe(Observed(t, 3, 8)));
  }
  ASSERT_TRUE(learned.has_value());
  for (const TensorSpan& t : tensors) {
    const SliceObservation o = Observed(t, 3, 8);
    const ByteRange w = learned->Window(t, 0, UINT64_MAX);
    EXPECT_LE(w.offset, o.begin);
    EXPECT_GE(w.end(), o.end);
    EXPECT_LE(w.length, o.end - o.begin + (64 << 10)) << "window of " << t.size() << " bytes";
  }
}

// The mean slice (what the readahead policy goes by) counts the slices of a
// page or more: a norm's few bytes would pull it down to nothing.
TEST(SlicePatternTest, MeanCoreIsTheMeanOfTheSlicesOfAPageOrMore) {
  std::vector<TensorSpan> tensors = Tensors();
  const SlicePattern p{.lo_num = 1, .hi_num = 2, .den = 8};
  uint64_t total = 0;
  for (const TensorSpan& t : tensors) total += p.Core(t).length;
  EXPECT_EQ(p.MeanCore(tensors), total / tensors.size());
  tensors.push_back(TensorSpan{tensors.back().end, tensors.back().end + 2048 * 2, 2});  // a norm: 512 bytes of it
  EXPECT_EQ(p.MeanCore(tensors), total / (tensors.size() - 1));
  EXPECT_EQ(p.MeanCore({}), 0u);
}

TEST(SlicePatternTest, ReadsOfTheSameSizeAtTheTensorStartTeachNothing) {
  // The kernel reading on past the end of each tensor into the next: the
  // first 128 KiB of tensors that all have one size.
  SliceLearner learner;
  for (int i = 0; i < 10; ++i) {
    TensorSpan t{4096 + i * (8ull << 20), 4096 + (i + 1) * (8ull << 20), 4096};
    EXPECT_FALSE(learner.Observe(SliceObservation{t, t.begin, t.begin + (128 << 10)}).has_value());
  }
}

// A mount that learned a slice reader opens its next files at the slice
// readahead (32 KiB), where the kernel reads 16 KiB around a fault. A slice
// reader's fault on a layer norm (a tensor of a page) reads into the tensor
// after it: the first 11 to 28 KiB of tensors of 11 and 22 MB, as a mount
// saw them in shuffled order. Those are no slice, though rows 0/480..1/480
// fit them with margins the kernel reads in such a file.
TEST(SlicePatternTest, ReadsAtTensorStartsInAFileAtTheSliceReadaheadTeachNothing) {
  SliceLearner learner(Tuning::For(64 << 20, 0, 32 << 10));
  const TensorSpan big{10000000, 10000000 + 23040000, 9600};
  const TensorSpan small{40000000, 40000000 + 11520000, 4800};
  const TensorSpan other{60000000, 60000000 + 11520000, 4800};
  const TensorSpan last{80000000, 80000000 + 23040000, 9600};
  for (const auto& [t, read] : {std::pair{big, 28096}, {small, 12288}, {last, 11584}, {other, 13568}}) {
    EXPECT_FALSE(learner.Observe(SliceObservation{t, t.begin, t.begin + read, 32 << 10}).has_value())
        << "rows of " << t.row_bytes;
  }
}

TEST(SlicePatternTest, WholeTensorsAreNotSlices) {
  SliceLearner learner;
  for (const TensorSpan& t : Tensors()) {
    EXPECT_FALSE(SliceLearner::Informative(SliceObservation{t, t.begin, t.end}));
    EXPECT_FALSE(learner.Observe(SliceObservation{t, t.begin, t.end}).has_value());
  }
}

TEST(SlicePatternTest, ShardGivesExactRowsWithReadAroundMargins) {
  SlicePattern p = SlicePattern::Shard(1, 4);
  TensorSpan t{1000, 1000 + 400 * 4096, 4096};
  EXPECT_EQ(p.Core(t).offset, 1000 + 100 * 4096u);
  EXPECT_EQ(p.Core(t).length, 100 * 4096u);
  ByteRange w = p.Window(t, 1000, t.end);
  EXPECT_LE(w.offset, p.Core(t).offset - (64 << 10));
  EXPECT_GE(w.end(), p.Core(t).end() + (128 << 10));
  EXPECT_EQ(w.offset % 4096, 0u);
  // The last slice's window stops at the upper bound.
  EXPECT_EQ(SlicePattern::Shard(3, 4).Window(t, 1000, t.end).end(), t.end);
}

TEST(SlicePatternTest, UnevenRowsRoundOut) {
  SlicePattern p = SlicePattern::Shard(2, 3);
  TensorSpan t{0, 10 * 8, 8};  // 10 rows: rank 2 of 3 reads rows 6..9
  EXPECT_EQ(p.Core(t).offset, 6 * 8u);
  EXPECT_EQ(p.Core(t).end(), 10 * 8u);
  SlicePattern first = SlicePattern::Shard(0, 3);  // rows 0..3 (ceil of 10/3)
  EXPECT_EQ(first.Core(t).end(), 4 * 8u);
}

}  // namespace
}  // namespace tensorfs
