// Which kernel readahead a mount's files get, and when (readahead_policy.h).
#include "core/engine/readahead_policy.h"

#include <gtest/gtest.h>

#include "core/engine/tuning.h"

namespace tensorfs {
namespace {

using Kind = ReadaheadPolicy::Kind;

ReadaheadPolicy Learned() { return ReadaheadPolicy(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/0)); }

TEST(ReadaheadPolicyTest, NothingKnownGivesTheKernelsDefault) {
  EXPECT_EQ(Learned().Wanted(), 128u << 10);
}

TEST(ReadaheadPolicyTest, WholeReaderSeenGivesTheWholeReadahead) {
  ReadaheadPolicy p = Learned();
  p.Change(Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
}

TEST(ReadaheadPolicyTest, SliceReaderLearnedGivesTheSliceReadahead) {
  ReadaheadPolicy p = Learned();
  p.Change(Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
}

// Slices averaging under kSmallSliceDefault get kSliceSmallDefault, from
// the first size told on; larger ones kSliceDefault.
TEST(ReadaheadPolicyTest, SmallSlicesGetTheSmallSliceReadahead) {
  ReadaheadPolicy small = Learned();
  small.SetSliceSize(ReadaheadPolicy::kSmallSliceDefault - 1);
  EXPECT_EQ(small.Wanted(), ReadaheadPolicy::kUnknownDefault) << "no slice reader yet";
  small.Change(Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(small.Wanted(), ReadaheadPolicy::kSliceSmallDefault);
  small.SetSliceSize(4 << 20);
  EXPECT_EQ(small.Wanted(), ReadaheadPolicy::kSliceSmallDefault) << "the first size told stays";

  ReadaheadPolicy large = Learned();
  large.Change(Kind::kUnknown, Kind::kSlice);
  EXPECT_FALSE(large.slice_size_known());
  large.SetSliceSize(ReadaheadPolicy::kSmallSliceDefault);
  EXPECT_TRUE(large.slice_size_known());
  EXPECT_EQ(large.Wanted(), ReadaheadPolicy::kSliceDefault);

  ReadaheadPolicy shard(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/16));
  EXPECT_EQ(shard.Wanted(), ReadaheadPolicy::kSliceDefault) << "the slices' size not known yet";
  shard.SetSliceSize(256 << 10);
  EXPECT_EQ(shard.Wanted(), ReadaheadPolicy::kSliceSmallDefault);

  ReadaheadPolicy given(ReadaheadPolicy::ForMount(true, 64 << 10, /*shard_world=*/16));
  given.SetSliceSize(256 << 10);
  EXPECT_EQ(given.Wanted(), 64u << 10) << "-o read_ahead= stays";
}

TEST(ReadaheadPolicyTest, TheLastKindStaysOnceItsFilesAreClosed) {
  ReadaheadPolicy p = Learned();
  p.Change(Kind::kUnknown, Kind::kSlice);
  p.Change(Kind::kSlice, Kind::kUnknown);  // the host's file is closed; its next one opens now
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
  p.Change(Kind::kUnknown, Kind::kWhole);
  p.Change(Kind::kWhole, Kind::kUnknown);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
}

TEST(ReadaheadPolicyTest, SliceReaderWhileAWholeReaderIsOpenKeepsTheWholeReadahead) {
  ReadaheadPolicy p = Learned();
  p.Change(Kind::kUnknown, Kind::kWhole);
  p.Change(Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
  p.Change(Kind::kWhole, Kind::kUnknown);  // the whole reader is done
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault) << "nothing new learned yet";
  p.Change(Kind::kUnknown, Kind::kSlice);  // another slice reader
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
}

TEST(ReadaheadPolicyTest, WholeReaderSeenAfterSliceReadersRaisesItAgain) {
  ReadaheadPolicy p = Learned();
  p.Change(Kind::kUnknown, Kind::kSlice);
  p.Change(Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
}

TEST(ReadaheadPolicyTest, ShardGivesTheSliceReadaheadFromTheStartAndKeepsIt) {
  ReadaheadPolicy p(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/8));
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
  p.Change(Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
}

TEST(ReadaheadPolicyTest, ShardZeroOfOneGivesTheWholeReadaheadFromTheStartAndKeepsIt) {
  ReadaheadPolicy p(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/1));
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
  p.Change(Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
}

TEST(ReadaheadPolicyTest, ReadAheadGivenIsKeptWhateverTheReaders) {
  ReadaheadPolicy p(ReadaheadPolicy::ForMount(true, 16 << 20, /*shard_world=*/8));
  EXPECT_EQ(p.Wanted(), 16u << 20);
  p.Change(Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), 16u << 20);
  p.Change(Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), 16u << 20);
}

// While nothing is known of the readers a shard of several is opened at half
// the kernel's default; once a kind of reader is known, or declared, or the
// value fixed, every file gets the same.
TEST(ReadaheadPolicyTest, AShardOfSeveralGetsItsOwnValueOnlyWhileNothingIsKnown) {
  ReadaheadPolicy p = Learned();
  EXPECT_EQ(p.WantedFor(/*shard=*/true), ReadaheadPolicy::kUnknownShardDefault);
  EXPECT_EQ(p.WantedFor(/*shard=*/false), ReadaheadPolicy::kUnknownDefault);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kUnknownDefault) << "the mount's value";
  p.Change(Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.WantedFor(/*shard=*/true), ReadaheadPolicy::kWholeDefault);
  p.Change(Kind::kWhole, Kind::kUnknown);
  EXPECT_EQ(p.WantedFor(/*shard=*/true), ReadaheadPolicy::kWholeDefault) << "the last kind seen stays";

  ReadaheadPolicy slice = Learned();
  slice.Change(Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(slice.WantedFor(/*shard=*/true), ReadaheadPolicy::kSliceDefault);
  EXPECT_EQ(ReadaheadPolicy(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/1)).WantedFor(true),
            ReadaheadPolicy::kWholeDefault);
  EXPECT_EQ(ReadaheadPolicy(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/8)).WantedFor(true),
            ReadaheadPolicy::kSliceDefault);
  EXPECT_EQ(ReadaheadPolicy(ReadaheadPolicy::ForMount(true, 16 << 20, /*shard_world=*/0)).WantedFor(true),
            16u << 20);
}

TEST(ReadaheadPolicyTest, ReadAheadZeroGivenLeavesTheKernelsAlone) {
  EXPECT_EQ(ReadaheadPolicy(ReadaheadPolicy::ForMount(true, 0, /*shard_world=*/0)).Wanted(), 0u);
}

// A slice's margins are what the kernel reads around a fault at the slice
// readahead, never more than at the readahead the engine learns at.
TEST(ReadaheadPolicyTest, SliceMarginsFollowTheSliceReadahead) {
  const Tuning t = Tuning::For(8 << 20, 128 << 10, ReadaheadPolicy::kSliceDefault);
  EXPECT_EQ(t.read_around_half, 64u << 10);
  EXPECT_EQ(t.slice_read_around_half, ReadaheadPolicy::kSliceDefault / 2);
  EXPECT_EQ(Tuning::For(8 << 20, 128 << 10, 1 << 20).slice_read_around_half, 64u << 10);
  EXPECT_EQ(Tuning::For(8 << 20, 128 << 10).slice_read_around_half, 64u << 10);
}

}  // namespace
}  // namespace tensorfs
