// Readers that share one mount, through the kernel, from a gs:// bucket on a
// link of 20 ms and 400 MB/s: eight processes each copying its rows r/8 of
// every tensor (tensor parallelism on one host), and 32 threads of one
// process copying the tensors out of one mapping per shard in a shuffled
// order (a threaded loader) with a cache a third of the checkpoint. Together
// they read every tensor whole, and are fetched as one whole loader is: each
// byte about once (the threads with a small cache: within a quarter), in a
// number of range requests (from `tensorfs stats`) close to that loader's on
// the same data. Each checks its bytes against the source.
// Before, the eight processes made about 40 times the loader's requests, each
// of its rows; the threads with a small cache fetched the checkpoint nearly
// twice, chunks evicted before the kernel took them.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/served_data_test.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using testing::RunCommand;
using testing::TensorfsMount;

// gs://shared/q: qwen2-shaped, bf16, hidden 768: tensors of 1 to 12 MiB,
// 79 MiB in 2 shards.
class SharedMountTest : public testing::ServedDataTest<SharedMountTest> {
 public:
  static constexpr char kDataKey[] = "shared_mount_test/qwen2-4x768";
  static void MakeData(const std::string& dir) {
    testing::ModelSpec spec{.arch = testing::Arch::kQwen2, .layers = 4, .hidden = 768, .intermediate = 2048,
                            .vocab = 8192, .dtype = Dtype::BF16};
    auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = dir + "/shared/q", .write_extra_files = false});
    ASSERT_TRUE(written.ok()) << written.status().ToString();
  }

 protected:
  void SetUp() override {
    ServedDataTest::SetUp();
    ASSERT_TRUE(server_->SetShaping(20, 0, 400e6)) << server_->last_error();
  }
  static uint64_t Bytes() {
    uint64_t bytes = 0;
    for (const auto& entry : fsys::directory_iterator(Src("shared/q"))) bytes += entry.file_size();
    return bytes;
  }
  static std::vector<std::string> Shards(const std::string& root) {
    std::vector<std::string> out;
    for (const auto& entry : fsys::directory_iterator(Src("shared/q"))) {
      if (entry.path().extension() == ".safetensors") out.push_back(root + "/q/" + entry.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  struct Fetched {
    uint64_t requests = 0;
    uint64_t bytes = 0;
  };
  // Mounts gs://shared with `options`, runs `command` (with MNT its mount
  // point), and returns what the mount fetched once its fetches ended.
  Fetched Run(const std::string& options, const std::string& what,
              const std::function<std::string(const std::string& mnt)>& command) {
    std::string error;
    auto mount = TensorfsMount::Start(
        "gs://shared", {"-o", "anonymous,views=none,endpoint=" + server_->endpoint() + options}, &error);
    EXPECT_NE(mount, nullptr) << error;
    if (mount == nullptr) return {};
    const testing::CommandResult result = RunCommand(command(mount->path()));
    EXPECT_EQ(result.exit_code, 0) << what << ":\n" << result.output;
    nlohmann::json stats;
    EXPECT_TRUE(testing::WaitUntil(
        [&] { return (stats = testing::MountStats(mount->path())).is_object() && stats["fetches_in_flight"] == 0; },
        "the fetches in flight to end"));
    if (!stats.is_object()) return {};
    Fetched f{stats["fetches"].get<uint64_t>(), stats["bytes_fetched"].get<uint64_t>()};
    std::printf("%s: %llu requests, %llu bytes (%.3fx the checkpoint)\n", what.c_str(),
                static_cast<unsigned long long>(f.requests), static_cast<unsigned long long>(f.bytes),
                static_cast<double>(f.bytes) / static_cast<double>(Bytes()));
    return f;
  }
  std::string Loader(const std::string& mnt, const std::string& args = "") {
    return "/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/mmap_loader.py " + mnt + "/q --compare " +
           Src("shared/q") + " " + args + " > /dev/null";
  }
};

TEST_F(SharedMountTest, EightSliceProcessesAreFetchedAsOneLoader) {
  const Fetched one = Run("", "one loader", [&](const std::string& mnt) { return Loader(mnt); });
  const Fetched eight = Run("", "eight slice processes", [&](const std::string& mnt) {
    // Started together, as a job's ranks on one host are.
    std::string command = "at=$(/usr/bin/python3 -c 'import time; print(time.monotonic() + 1)'); pids=; ";
    for (int rank = 0; rank < 8; ++rank) {
      command += "/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/slice_reader.py --rank " +
                 std::to_string(rank) + " --world 8 --start-at $at --compare " + Src("shared/q");
      for (const std::string& f : Shards(mnt)) command += " " + f;
      command += " > /dev/null & pids=\"$pids $!\"; ";
    }
    // Every rank's status: wait for each in turn.
    return command + "for p in $pids; do wait $p || exit 1; done";
  });
  ASSERT_GT(one.requests, 0u);
  EXPECT_GE(eight.bytes, Bytes() - Bytes() / 100) << "every tensor whole, together";
  EXPECT_LE(eight.bytes, Bytes() + Bytes() / 20) << "each byte about once";
  // A 79 MiB checkpoint is few requests for one loader (13), and the ranks'
  // first rows, before their reads together show its tensors read whole, are
  // a larger part of them than for a larger one, and more when the ranks
  // start further apart on a loaded machine (33-37 here; bench W12 measures
  // them at its size). Before, about 40 times the loader's.
  EXPECT_LE(eight.requests, 4 * one.requests) << "one loader made " << one.requests;
}

TEST_F(SharedMountTest, ThirtyTwoThreadsWithACacheAThirdOfTheCheckpointAreFetchedAsOneLoader) {
  const std::string cache = ",cache_size=" + std::to_string(Bytes() / 3 / (1 << 20)) + "M";
  const Fetched one = Run(cache, "one loader", [&](const std::string& mnt) { return Loader(mnt); });
  const Fetched threads = Run(cache, "32 threads", [&](const std::string& mnt) {
    return Loader(mnt, "--threads 32 --order random");
  });
  ASSERT_GT(one.requests, 0u);
  EXPECT_GE(threads.bytes, Bytes());
  // Before, nearly twice the checkpoint. Where the kernel reads the threads'
  // faults in pieces of 32-64 KiB (as a 6.18 kernel does here), chunks still
  // go before the kernel took them, 12-19% of the checkpoint fetched again;
  // bench W13 prints the figure against its target of 1.05x.
  EXPECT_LE(threads.bytes, Bytes() + Bytes() / 4) << "chunks fetched again: evicted before the kernel took them";
  EXPECT_LE(threads.requests, 3 * one.requests) << "one loader made " << one.requests;
}

}  // namespace
}  // namespace tensorfs
