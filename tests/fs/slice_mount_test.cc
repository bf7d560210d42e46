// A sharded job's host reading its slice of every tensor through a real mount
// (numpy.memmap, page faults through the kernel): tensorfs fetches that slice
// and what the kernel reads around it, not the checkpoint.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using testing::ReadAheadKib;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsMount;

nlohmann::json Stats(const std::string& mountpoint) { return testing::MountStats(mountpoint); }

// Waits until no fetch is in flight: every byte the reads made it fetch is counted.
::testing::AssertionResult Settled(const std::string& mountpoint) {
  return testing::WaitUntil([&] { return Stats(mountpoint)["fetches_in_flight"] == 0; },
                            "the fetches in flight to end");
}

class SliceCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    source_ = testing::SharedData("slice_mount_test/llama-4x1024-2shards", [](const std::string& dir) {
      // bf16, hidden 1024: tensors of 2 to 16 MiB, about 75 MiB in 2 shards.
      testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 4, .hidden = 1024, .intermediate = 2816,
                              .vocab = 8192, .dtype = Dtype::BF16};
      auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = dir + "/m"});
      ASSERT_TRUE(written.ok()) << written.status().ToString();
    });
    for (const auto& entry : fsys::directory_iterator(source_ + "/m")) {
      if (entry.path().extension() == ".safetensors") {
        shards_.push_back(entry.path().filename().string());
        total_ += entry.file_size();
      }
    }
    std::sort(shards_.begin(), shards_.end());
  }

  // Runs the slice reader for `rank` of `world` on the mount; returns the bytes it needed.
  uint64_t ReadSlices(const std::string& mountpoint, int rank, int world, const std::string& order) {
    std::string cmd = "/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/slice_reader.py --rank " +
                      std::to_string(rank) + " --world " + std::to_string(world) + " --order " + order +
                      " --compare " + source_ + "/m";
    for (const std::string& s : shards_) cmd += " " + mountpoint + "/m/" + s;
    auto result = RunCommand(cmd);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    auto out = nlohmann::json::parse(result.output, nullptr, false);
    return out.is_discarded() ? 0 : out["needed"].get<uint64_t>();
  }

  std::string source_;  // shared, read-only
  std::vector<std::string> shards_;
  uint64_t total_ = 0;
};

class SliceMountTest : public SliceCheckpointTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(SliceMountTest, SliceReaderFetchesItsSliceNotTheCheckpoint) {
  std::string error;
  auto mount = TensorfsMount::Start(source_, {"-o", "views=none"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  const uint64_t needed = ReadSlices(mount->path(), 1, 4, GetParam());
  ASSERT_GT(needed, total_ / 5);
  ASSERT_TRUE(Settled(mount->path()));
  const uint64_t fetched = Stats(mount->path())["bytes_fetched"].get<uint64_t>();
  std::printf("rank 1 of 4, %s order: needed %llu, fetched %llu (%.3fx), checkpoint %llu\n", GetParam().c_str(),
              static_cast<unsigned long long>(needed), static_cast<unsigned long long>(fetched),
              static_cast<double>(fetched) / static_cast<double>(needed), static_cast<unsigned long long>(total_));
  EXPECT_GE(fetched, needed);
  // The slices, the kernel's read-around of each, and what the first tensors
  // cost before the reader is known: well under half the checkpoint.
  EXPECT_LE(fetched, needed * 2) << "fetched " << fetched << " for " << needed;
  EXPECT_LT(fetched, total_ / 2);
}

TEST_P(SliceMountTest, ShardOptionFetchesItsSliceFromTheStart) {
  std::string error;
  auto mount = TensorfsMount::Start(source_, {"-o", "views=none,shard=2/4"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  const uint64_t needed = ReadSlices(mount->path(), 2, 4, GetParam());
  ASSERT_TRUE(Settled(mount->path()));
  const uint64_t fetched = Stats(mount->path())["bytes_fetched"].get<uint64_t>();
  std::printf("shard=2/4, %s order: needed %llu, fetched %llu (%.3fx)\n", GetParam().c_str(),
              static_cast<unsigned long long>(needed), static_cast<unsigned long long>(fetched),
              static_cast<double>(fetched) / static_cast<double>(needed));
  EXPECT_GE(fetched, needed);
  EXPECT_LE(fetched, needed * 14 / 10) << "fetched " << fetched << " for " << needed;
}

INSTANTIATE_TEST_SUITE_P(Orders, SliceMountTest, ::testing::Values("storage", "random"));

// The FUSE read requests the kernel sent, by size (rounded up to a power of two).
std::map<uint64_t, uint64_t> ReadSizes(const std::string& mountpoint) {
  std::map<uint64_t, uint64_t> sizes;
  const nlohmann::json stats = Stats(mountpoint);
  if (!stats.contains("fuse_read_sizes")) return sizes;
  for (auto it = stats["fuse_read_sizes"].begin(); it != stats["fuse_read_sizes"].end(); ++it) {
    sizes[std::stoull(it.key())] = it.value().get<uint64_t>();
  }
  return sizes;
}

// The requests made between two ReadSizes: how many, and how many larger than `limit`.
std::pair<uint64_t, uint64_t> CountAndOver(const std::map<uint64_t, uint64_t>& before,
                                           const std::map<uint64_t, uint64_t>& after, uint64_t limit) {
  uint64_t count = 0, over = 0;
  for (const auto& [size, n] : after) {
    const uint64_t made = n - (before.contains(size) ? before.at(size) : 0);
    count += made;
    if (size > limit) over += made;
  }
  return {count, over};
}

// A file's header is read with read() (Python's buffered reads of st_blksize),
// which the readahead does not limit: at most this many such requests a file.
constexpr uint64_t kHeaderReads = 2;

// The number of files opened at `bytes` of readahead (stats'
// files_opened_by_read_ahead).
uint64_t OpenedAt(const nlohmann::json& stats, uint64_t bytes) {
  const std::string key = std::to_string(bytes);
  return stats.contains("files_opened_by_read_ahead") && stats["files_opened_by_read_ahead"].contains(key)
             ? stats["files_opened_by_read_ahead"][key].get<uint64_t>()
             : 0;
}

// A host's slice reader on a mount with no options: its first file is read
// at the kernel's default readahead (half of it for one shard of several),
// where its slice is learned; the files it opens after that get the slice
// readahead, so each fault reads little beyond the slice.
TEST_F(SliceCheckpointTest, LearnedSliceReaderGetsTheSliceReadaheadForItsNextFiles) {
  std::string error;
  auto mount = TensorfsMount::Start(source_, {"-o", "views=none"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  EXPECT_EQ(ReadAheadKib(mount->path()), 128) << "the kernel's default while nothing is known";
  ASSERT_EQ(shards_.size(), 2u);
  ASSERT_GT(ReadSlices(mount->path(), 1, 4, "storage"), 0u);  // one process, both shards
  EXPECT_EQ(ReadAheadKib(mount->path()), 32) << mount->Log();
  const nlohmann::json stats = Stats(mount->path());
  EXPECT_GT(OpenedAt(stats, 64 << 10), 0u) << "the first shard: " << stats.dump();
  EXPECT_GT(OpenedAt(stats, 32 << 10), 0u) << "the second shard, once the slice is learned: " << stats.dump();
  const auto [count, over] = CountAndOver({}, ReadSizes(mount->path()), 64 << 10);
  EXPECT_GT(count, 0u) << stats.dump();
  EXPECT_LE(over, kHeaderReads * shards_.size()) << "faults read more than their file's readahead around them: "
                                                 << stats.dump();
}

// A whole-tensor reader (every row of every tensor, through numpy.memmap):
// its first file is read at the kernel's default (half of it for one shard of
// several), and the files it opens once it is known get the whole readahead,
// read in requests of up to 1 MiB.
TEST_F(SliceCheckpointTest, WholeReaderGetsTheWholeReadaheadForItsNextFiles) {
  if (const long pages = testing::FuseMaxPagesLimit(); pages < 256) {
    GTEST_SKIP() << testing::NotRunForKernel("FUSE requests of 1 MiB, fs.fuse.max_pages_limit 256",
                                             "fs.fuse.max_pages_limit is " + std::to_string(pages));
  }
  std::string error;
  auto mount = TensorfsMount::Start(source_, {"-o", "views=none"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  ASSERT_EQ(shards_.size(), 2u);
  ASSERT_GT(ReadSlices(mount->path(), 0, 1, "storage"), 0u);  // one process, both shards
  EXPECT_EQ(ReadAheadKib(mount->path()), 1024) << mount->Log();
  const nlohmann::json stats = Stats(mount->path());
  EXPECT_GT(OpenedAt(stats, 64 << 10), 0u) << "the first shard: " << stats.dump();
  EXPECT_GT(OpenedAt(stats, 1 << 20), 0u) << "the second shard, once the reader is known: " << stats.dump();
  // The first file's requests are of its readahead at most; past it, the
  // second's grow to max_read as the kernel's readahead window ramps up.
  const std::map<uint64_t, uint64_t> sizes = ReadSizes(mount->path());
  const auto [count, over_64k] = CountAndOver({}, sizes, 64 << 10);
  const auto [unused, over_half] = CountAndOver({}, sizes, 512 << 10);
  const auto [unused2, over_1m] = CountAndOver({}, sizes, 1 << 20);
  EXPECT_EQ(over_1m, 0u) << "no request is larger than max_read";
  EXPECT_GT(over_half, over_64k / 2) << "the second file is read in requests of up to 1 MiB: " << stats.dump();
}

// A loader run again on a mount that stays up is a new process: its files
// open at the readahead their last readers were read at (the whole one, as
// only whole readers read them), not at the kernel's default a process new
// to the mount would get for a file never read. A slice host's files (the
// mixed readers' tests) still open at the default.
TEST_F(SliceCheckpointTest, ALoaderRunAgainOpensTheFilesWholeReadersReadAtTheWholeReadahead) {
  std::string error;
  auto mount = TensorfsMount::Start(source_, {"-o", "views=none"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  ASSERT_EQ(shards_.size(), 2u);
  ASSERT_GT(ReadSlices(mount->path(), 0, 1, "storage"), 0u);  // the first run: one process, both shards
  const nlohmann::json first = Stats(mount->path());
  ASSERT_GT(ReadSlices(mount->path(), 0, 1, "storage"), 0u);  // the second run: a new process
  const nlohmann::json second = Stats(mount->path());
  uint64_t opens = 0;  // by the second run, at any readahead
  for (const auto& [bytes, n] : second["files_opened_by_read_ahead"].items()) {
    opens += n.get<uint64_t>() - OpenedAt(first, std::stoull(bytes));
  }
  EXPECT_GE(opens, shards_.size()) << second.dump();
  EXPECT_EQ(OpenedAt(second, 1 << 20) - OpenedAt(first, 1 << 20), opens)
      << "the second run opened a file at less than the whole readahead:\n" << first.dump() << "\n"
      << second.dump();
}

// -o shard=R/N says the process reads slices: every file gets the slice
// readahead from the start.
TEST_F(SliceCheckpointTest, ShardOptionGivesTheSliceReadaheadFromTheStart) {
  std::string error;
  auto mount = TensorfsMount::Start(source_, {"-o", "views=none,shard=1/4"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  EXPECT_EQ(ReadAheadKib(mount->path()), 32);
  ASSERT_GT(ReadSlices(mount->path(), 1, 4, "storage"), 0u);
  const auto [count, over] = CountAndOver({}, ReadSizes(mount->path()), 32 << 10);
  EXPECT_GT(count, 0u) << Stats(mount->path()).dump();
  EXPECT_LE(over, kHeaderReads * shards_.size()) << Stats(mount->path()).dump();
}

// -o read_ahead= is the user's: it stays whatever the readers do.
TEST_F(SliceCheckpointTest, ReadAheadGivenStaysWhateverTheReaders) {
  std::string error;
  auto mount = TensorfsMount::Start(source_, {"-o", "views=none,read_ahead=256K"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  EXPECT_EQ(ReadAheadKib(mount->path()), 256);
  ASSERT_GT(ReadSlices(mount->path(), 0, 1, "storage"), 0u);
  EXPECT_EQ(ReadAheadKib(mount->path()), 256);
  ASSERT_GT(ReadSlices(mount->path(), 1, 4, "storage"), 0u);
  EXPECT_EQ(ReadAheadKib(mount->path()), 256);
}

TEST(SliceOptionTest, MalformedShardIsRefusedWithTheForm) {
  TempDir source;
  std::string error;
  auto mount = TensorfsMount::Start(source.path(), {"-o", "shard=4"}, &error);
  EXPECT_EQ(mount, nullptr);
  EXPECT_NE(error.find("shard=R/N"), std::string::npos) << error;
}

}  // namespace
}  // namespace tensorfs
