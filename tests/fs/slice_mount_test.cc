// A sharded job's host reading its slice of every tensor through a real mount
// (numpy.memmap, page faults through the kernel): tensorfs fetches that slice
// and what the kernel reads around it, not the checkpoint.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <thread>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsMount;

nlohmann::json Stats(const std::string& mountpoint) {
  auto result = RunCommand(testing::TensorfsBinary() + " stats --json " + mountpoint);
  EXPECT_EQ(result.exit_code, 0) << result.output;
  return nlohmann::json::parse(result.output, nullptr, /*allow_exceptions=*/false);
}

class SliceMountTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    // bf16, hidden 1024: tensors of 2 to 16 MiB, about 75 MiB in 2 shards.
    testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 4, .hidden = 1024, .intermediate = 2816,
                            .vocab = 8192, .dtype = Dtype::BF16};
    auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = source_.path() + "/m"});
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    for (const auto& entry : fsys::directory_iterator(source_.path() + "/m")) {
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
                      " --compare " + source_.path() + "/m";
    for (const std::string& s : shards_) cmd += " " + mountpoint + "/m/" + s;
    auto result = RunCommand(cmd);
    EXPECT_EQ(result.exit_code, 0) << result.output;
    auto out = nlohmann::json::parse(result.output, nullptr, false);
    return out.is_discarded() ? 0 : out["needed"].get<uint64_t>();
  }

  TempDir source_;
  std::vector<std::string> shards_;
  uint64_t total_ = 0;
};

TEST_P(SliceMountTest, SliceReaderFetchesItsSliceNotTheCheckpoint) {
  std::string error;
  auto mount = TensorfsMount::Start(source_.path(), {"-o", "views=none"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  const uint64_t needed = ReadSlices(mount->path(), 1, 4, GetParam());
  ASSERT_GT(needed, total_ / 5);
  for (int i = 0; i < 300 && Stats(mount->path())["fetches_in_flight"] != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
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
  auto mount = TensorfsMount::Start(source_.path(), {"-o", "views=none,shard=2/4"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  const uint64_t needed = ReadSlices(mount->path(), 2, 4, GetParam());
  for (int i = 0; i < 300 && Stats(mount->path())["fetches_in_flight"] != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const uint64_t fetched = Stats(mount->path())["bytes_fetched"].get<uint64_t>();
  std::printf("shard=2/4, %s order: needed %llu, fetched %llu (%.3fx)\n", GetParam().c_str(),
              static_cast<unsigned long long>(needed), static_cast<unsigned long long>(fetched),
              static_cast<double>(fetched) / static_cast<double>(needed));
  EXPECT_GE(fetched, needed);
  EXPECT_LE(fetched, needed * 14 / 10) << "fetched " << fetched << " for " << needed;
}

INSTANTIATE_TEST_SUITE_P(Orders, SliceMountTest, ::testing::Values("storage", "random"));

TEST(SliceOptionTest, MalformedShardIsRefusedWithTheForm) {
  TempDir source;
  std::string error;
  auto mount = TensorfsMount::Start(source.path(), {"-o", "shard=4"}, &error);
  EXPECT_EQ(mount, nullptr);
  EXPECT_NE(error.find("shard=R/N"), std::string::npos) << error;
}

}  // namespace
}  // namespace tensorfs
