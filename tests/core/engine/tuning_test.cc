// Tuning: the margins that stand for one kernel read-around follow the
// readahead in force, and at the kernel's default are the engine's old values.
#include "core/engine/tuning.h"

#include <gtest/gtest.h>

#include "core/engine/slice_pattern.h"

namespace tensorfs {
namespace {

TEST(TuningTest, UnknownReadaheadIsTheKernelDefaultAndGivesTheTunedValues) {
  const Tuning t = Tuning::For(8 << 20, 0);
  EXPECT_EQ(t.readahead, 128u << 10);
  EXPECT_EQ(t.read_around_half, 64u << 10);
  EXPECT_EQ(t.touch_gap, 64u << 10);
  EXPECT_EQ(t.coalesce_gap, 64u << 10);
  EXPECT_EQ(t.copy_tail_max, 512u << 10);
  EXPECT_EQ(t.spill_max, 512u << 10);
  EXPECT_EQ(t.near_window, 512u << 10);
  EXPECT_EQ(t.max_margin, 1u << 20);
  EXPECT_EQ(t.max_piece, 4u << 20);
  EXPECT_EQ(t.whole_min, 256u << 10);
}

TEST(TuningTest, ReadAroundMarginsFollowTheReadaheadInForce) {
  const Tuning t = Tuning::For(8 << 20, 1 << 20);
  EXPECT_EQ(t.read_around_half, 512u << 10);
  EXPECT_EQ(t.touch_gap, 512u << 10);
  EXPECT_EQ(t.near_window, 4u << 20);
  EXPECT_EQ(t.max_margin, 8u << 20);
  const SlicePattern shard = SlicePattern::Shard(1, 4, t);
  EXPECT_EQ(shard.before, 512u << 10);
  EXPECT_EQ(shard.after, 1u << 20);
  EXPECT_EQ(t.whole_min, 2u << 20);
}

// Past 2 MiB of readahead the kernel's requests (1 MiB at most) are still
// several per tensor: a tensor of four of them is enough to judge a reader.
TEST(TuningTest, WholeTensorThresholdStopsAtFourRequests) {
  EXPECT_EQ(Tuning::For(8 << 20, 2 << 20).whole_min, 4u << 20);
  EXPECT_EQ(Tuning::For(8 << 20, 16 << 20).whole_min, 4u << 20);
  EXPECT_EQ(Tuning::For(8 << 20, 16 << 20).read_around_half, 8u << 20);
}

// A slice's margins are those of the file it is read in: a file opened at the
// slice readahead has the kernel read less around it than the mount's.
TEST(TuningTest, SliceMarginsAreTheFilesReadaheads) {
  const Tuning t = Tuning::For(8 << 20, 0, 32 << 10);
  const Tuning::SliceMargins mount = t.MarginsAt(0);
  EXPECT_EQ(mount.half, 64u << 10);
  EXPECT_EQ(mount.window, 128u << 10);
  EXPECT_EQ(mount.UsualAfter(), 192u << 10);
  EXPECT_EQ(mount.MostAfter(), 320u << 10);
  const Tuning::SliceMargins slice = t.MarginsAt(32 << 10);
  EXPECT_EQ(slice.half, 16u << 10);
  EXPECT_EQ(slice.UsualAfter(), 48u << 10);
  EXPECT_EQ(slice.MostAfter(), 80u << 10);
  EXPECT_EQ(t.MarginsAt(1 << 20).half, 512u << 10);
  EXPECT_EQ(t.MarginsAt(100).window, 4096u);
}

TEST(TuningTest, ReadaheadBelowAPageIsAPage) {
  const Tuning t = Tuning::For(64 << 10, 100);
  EXPECT_EQ(t.readahead, 4096u);
  EXPECT_EQ(t.read_around_half, 4096u);
  EXPECT_EQ(t.max_piece, 64u << 10);
}

}  // namespace
}  // namespace tensorfs
