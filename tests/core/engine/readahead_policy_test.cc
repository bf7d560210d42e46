// Which kernel readahead a mount's files get, and when (readahead_policy.h).
#include "core/engine/readahead_policy.h"

#include <gtest/gtest.h>

#include <string>

#include "core/engine/tuning.h"

namespace tensorfs {
namespace {

using Kind = ReadaheadPolicy::Kind;

constexpr uint64_t kProcess = 7;  // the one process of the tests of one process

ReadaheadPolicy Learned() { return ReadaheadPolicy(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/0)); }

TEST(ReadaheadPolicyTest, NothingKnownGivesTheKernelsDefault) {
  EXPECT_EQ(Learned().Wanted(), 128u << 10);
}

TEST(ReadaheadPolicyTest, WholeReaderSeenGivesTheWholeReadahead) {
  ReadaheadPolicy p = Learned();
  p.Change(kProcess, Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
}

TEST(ReadaheadPolicyTest, SliceReaderLearnedGivesTheSliceReadahead) {
  ReadaheadPolicy p = Learned();
  p.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
}

// Slices averaging under kSmallSliceDefault get kSliceSmallDefault, from
// the first size told on; larger ones kSliceDefault.
TEST(ReadaheadPolicyTest, SmallSlicesGetTheSmallSliceReadahead) {
  ReadaheadPolicy small = Learned();
  small.SetSliceSize(kProcess, ReadaheadPolicy::kSmallSliceDefault - 1);
  EXPECT_EQ(small.Wanted(), ReadaheadPolicy::kUnknownDefault) << "no slice reader yet";
  small.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(small.Wanted(), ReadaheadPolicy::kSliceSmallDefault);
  small.SetSliceSize(kProcess, 4 << 20);
  EXPECT_EQ(small.Wanted(), ReadaheadPolicy::kSliceSmallDefault) << "the first size told stays";

  ReadaheadPolicy large = Learned();
  large.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  EXPECT_FALSE(large.slice_size_known(kProcess));
  large.SetSliceSize(kProcess, ReadaheadPolicy::kSmallSliceDefault);
  EXPECT_TRUE(large.slice_size_known(kProcess));
  EXPECT_EQ(large.Wanted(), ReadaheadPolicy::kSliceDefault);

  ReadaheadPolicy shard(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/16));
  EXPECT_EQ(shard.Wanted(), ReadaheadPolicy::kSliceDefault) << "the slices' size not known yet";
  shard.SetSliceSize(kProcess, 256 << 10);
  EXPECT_EQ(shard.Wanted(), ReadaheadPolicy::kSliceSmallDefault);

  ReadaheadPolicy given(ReadaheadPolicy::ForMount(true, 64 << 10, /*shard_world=*/16));
  given.SetSliceSize(kProcess, 256 << 10);
  EXPECT_EQ(given.Wanted(), 64u << 10) << "-o read_ahead= stays";
}

TEST(ReadaheadPolicyTest, TheLastKindStaysOnceItsFilesAreClosed) {
  ReadaheadPolicy p = Learned();
  p.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  p.Change(kProcess, Kind::kSlice, Kind::kUnknown);  // the host's file is closed; its next one opens now
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
  p.Change(kProcess, Kind::kUnknown, Kind::kWhole);
  p.Change(kProcess, Kind::kWhole, Kind::kUnknown);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
}

TEST(ReadaheadPolicyTest, SliceReaderWhileAWholeReaderIsOpenKeepsTheWholeReadahead) {
  ReadaheadPolicy p = Learned();
  p.Change(kProcess, Kind::kUnknown, Kind::kWhole);
  p.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
  p.Change(kProcess, Kind::kWhole, Kind::kUnknown);  // the whole reader is done
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault) << "nothing new learned yet";
  p.Change(kProcess, Kind::kUnknown, Kind::kSlice);  // another slice reader
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
}

TEST(ReadaheadPolicyTest, WholeReaderSeenAfterSliceReadersRaisesItAgain) {
  ReadaheadPolicy p = Learned();
  p.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  p.Change(kProcess, Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
}

TEST(ReadaheadPolicyTest, ShardGivesTheSliceReadaheadFromTheStartAndKeepsIt) {
  ReadaheadPolicy p(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/8));
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
  p.Change(kProcess, Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
}

TEST(ReadaheadPolicyTest, ShardZeroOfOneGivesTheWholeReadaheadFromTheStartAndKeepsIt) {
  ReadaheadPolicy p(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/1));
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
  p.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
}

TEST(ReadaheadPolicyTest, ReadAheadGivenIsKeptWhateverTheReaders) {
  ReadaheadPolicy p(ReadaheadPolicy::ForMount(true, 16 << 20, /*shard_world=*/8));
  EXPECT_EQ(p.Wanted(), 16u << 20);
  p.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), 16u << 20);
  p.Change(kProcess, Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), 16u << 20);
}

// While nothing is known of the readers a shard of several is opened at half
// the kernel's default; once a kind of reader is known, or declared, or the
// value fixed, every file gets the same.
TEST(ReadaheadPolicyTest, AShardOfSeveralGetsItsOwnValueOnlyWhileNothingIsKnown) {
  ReadaheadPolicy p = Learned();
  EXPECT_EQ(p.WantedFor(kProcess, /*shard=*/true), ReadaheadPolicy::kUnknownShardDefault);
  EXPECT_EQ(p.WantedFor(kProcess, /*shard=*/false), ReadaheadPolicy::kUnknownDefault);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kUnknownDefault) << "the mount's value";
  p.Change(kProcess, Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.WantedFor(kProcess, /*shard=*/true), ReadaheadPolicy::kWholeDefault);
  p.Change(kProcess, Kind::kWhole, Kind::kUnknown);
  EXPECT_EQ(p.WantedFor(kProcess, /*shard=*/true), ReadaheadPolicy::kWholeDefault) << "the last kind seen stays";

  ReadaheadPolicy slice = Learned();
  slice.Change(kProcess, Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(slice.WantedFor(kProcess, /*shard=*/true), ReadaheadPolicy::kSliceDefault);
  EXPECT_EQ(ReadaheadPolicy(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/1)).WantedFor(kProcess, true),
            ReadaheadPolicy::kWholeDefault);
  EXPECT_EQ(ReadaheadPolicy(ReadaheadPolicy::ForMount(false, 0, /*shard_world=*/8)).WantedFor(kProcess, true),
            ReadaheadPolicy::kSliceDefault);
  EXPECT_EQ(ReadaheadPolicy(ReadaheadPolicy::ForMount(true, 16 << 20, /*shard_world=*/0)).WantedFor(kProcess, true),
            16u << 20);
}

// A process's files get the value of what its own readers do: a whole-tensor
// loader in one process leaves another process's files at the kernel's
// default while nothing is known of that one's readers, and at the slice
// readahead once it reads slices (the whole loader still reading).
TEST(ReadaheadPolicyTest, EachProcessGetsTheValueOfItsOwnReaders) {
  constexpr uint64_t kLoader = 100, kHost = 200;
  ReadaheadPolicy p = Learned();
  p.Change(kLoader, Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.WantedFor(kLoader, /*shard=*/true), ReadaheadPolicy::kWholeDefault);
  EXPECT_EQ(p.WantedFor(kHost, /*shard=*/true), ReadaheadPolicy::kUnknownShardDefault);
  EXPECT_EQ(p.WantedFor(kHost, /*shard=*/false), ReadaheadPolicy::kUnknownDefault);
  p.Change(kHost, Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.WantedFor(kHost, /*shard=*/true), ReadaheadPolicy::kSliceDefault);
  EXPECT_EQ(p.WantedFor(kLoader, /*shard=*/true), ReadaheadPolicy::kWholeDefault);
  EXPECT_EQ(p.WantedFor(/*process=*/300, /*shard=*/false), ReadaheadPolicy::kUnknownDefault) << "a new process";
}

// A process not known yet opens a file by what that file's readers were: a
// loader run again (a new process on a mount that stays up) gets the whole
// readahead for the files its last run read whole, not the kernel's default.
TEST(ReadaheadPolicyTest, ANewProcessOpensAFileOnlyWholeReadersReadAtTheWholeReadahead) {
  constexpr uint64_t kFirstRun = 100, kSecondRun = 101;
  ReadaheadPolicy p = Learned();
  p.Change(kFirstRun, Kind::kUnknown, Kind::kWhole, "ckpt/model-00001-of-00002.safetensors");
  p.Change(kFirstRun, Kind::kWhole, Kind::kUnknown, "ckpt/model-00001-of-00002.safetensors");  // closed
  EXPECT_EQ(p.WantedFor(kSecondRun, /*shard=*/true, "ckpt/model-00001-of-00002.safetensors"),
            ReadaheadPolicy::kWholeDefault);
  EXPECT_EQ(p.WantedFor(kSecondRun, /*shard=*/true, "ckpt/model-00002-of-00002.safetensors"),
            ReadaheadPolicy::kUnknownShardDefault)
      << "a file no reader was told apart on";
  EXPECT_EQ(p.WantedFor(kSecondRun, /*shard=*/true), ReadaheadPolicy::kUnknownShardDefault) << "no file named";
}

// A file a slice reader read is no whole readers' file, whatever else read
// it: a new process opens it at the kernel's default, where slices are
// learned; and a process known to read slices keeps its own value whatever
// the file's readers were.
TEST(ReadaheadPolicyTest, AFileASliceReaderReadGivesANewProcessTheKernelsDefault) {
  constexpr char kFile[] = "ckpt/model-00001-of-00002.safetensors";
  ReadaheadPolicy p = Learned();
  p.Change(/*process=*/1, Kind::kUnknown, Kind::kWhole, kFile);
  p.Change(/*process=*/2, Kind::kUnknown, Kind::kSlice, kFile);
  EXPECT_EQ(p.WantedFor(/*process=*/3, /*shard=*/true, kFile), ReadaheadPolicy::kUnknownShardDefault);
  EXPECT_EQ(p.WantedFor(/*process=*/2, /*shard=*/true, kFile), ReadaheadPolicy::kSliceDefault);

  ReadaheadPolicy q = Learned();
  q.Change(/*process=*/1, Kind::kUnknown, Kind::kWhole, kFile);
  q.Change(/*process=*/2, Kind::kUnknown, Kind::kSlice, "other/model.safetensors");
  EXPECT_EQ(q.WantedFor(/*process=*/2, /*shard=*/true, kFile), ReadaheadPolicy::kSliceDefault)
      << "a process's own kind comes first";
}

// Files whose readers are remembered are bounded: the least recently told go.
TEST(ReadaheadPolicyTest, FilesRememberedAreBounded) {
  ReadaheadPolicy p = Learned();
  for (size_t i = 0; i < 2 * ReadaheadPolicy::kFiles; ++i) {
    p.Change(/*process=*/1, Kind::kUnknown, Kind::kWhole, "f" + std::to_string(i));
    p.Change(/*process=*/1, Kind::kWhole, Kind::kUnknown, "f" + std::to_string(i));
  }
  EXPECT_LE(p.files(), ReadaheadPolicy::kFiles);
  EXPECT_EQ(p.WantedFor(/*process=*/2, /*shard=*/false, "f" + std::to_string(2 * ReadaheadPolicy::kFiles - 1)),
            ReadaheadPolicy::kWholeDefault);
  EXPECT_EQ(p.WantedFor(/*process=*/2, /*shard=*/false, "f0"), ReadaheadPolicy::kUnknownDefault) << "forgotten";
}

// The slices' size is the process's: a host of 16 (small slices) and a
// host of 2 of another checkpoint each get the slice readahead of theirs.
TEST(ReadaheadPolicyTest, EachProcessGetsTheSliceReadaheadOfItsOwnSlices) {
  ReadaheadPolicy p = Learned();
  p.Change(1, Kind::kUnknown, Kind::kSlice);
  p.SetSliceSize(1, 256 << 10);
  p.Change(2, Kind::kUnknown, Kind::kSlice);
  p.SetSliceSize(2, 4 << 20);
  EXPECT_EQ(p.WantedFor(1, /*shard=*/true), ReadaheadPolicy::kSliceSmallDefault);
  EXPECT_EQ(p.WantedFor(2, /*shard=*/true), ReadaheadPolicy::kSliceDefault);
  EXPECT_TRUE(p.slice_size_known(1));
  EXPECT_FALSE(p.slice_size_known(3));
}

// The files no process's kind decides (views, other files) get the value of
// the process whose value changed last; a process's next reader of the
// same kind changes nothing.
TEST(ReadaheadPolicyTest, OtherFilesGetTheValueThatChangedLast) {
  ReadaheadPolicy p = Learned();
  p.Change(1, Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kWholeDefault);
  p.Change(2, Kind::kUnknown, Kind::kSlice);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
  p.Change(1, Kind::kWhole, Kind::kUnknown);  // the loader's next file: a new whole reader
  p.Change(1, Kind::kUnknown, Kind::kWhole);
  EXPECT_EQ(p.Wanted(), ReadaheadPolicy::kSliceDefault);
}

// Processes come and go unseen: the policy remembers kProcesses of them, and
// keeps one with a whole-tensor reader open.
TEST(ReadaheadPolicyTest, ProcessesRememberedAreBounded) {
  ReadaheadPolicy p = Learned();
  p.Change(1, Kind::kUnknown, Kind::kWhole);
  for (uint64_t process = 2; process < 2 + 4 * ReadaheadPolicy::kProcesses; ++process) {
    p.Change(process, Kind::kUnknown, Kind::kSlice);
    p.Change(process, Kind::kSlice, Kind::kUnknown);
  }
  EXPECT_LE(p.processes(), ReadaheadPolicy::kProcesses);
  EXPECT_EQ(p.WantedFor(1, /*shard=*/true), ReadaheadPolicy::kWholeDefault);
  EXPECT_EQ(p.WantedFor(2, /*shard=*/true), ReadaheadPolicy::kUnknownShardDefault) << "forgotten: a new one";
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
