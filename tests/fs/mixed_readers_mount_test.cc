// Readers of two kinds on one mount, in two processes: a whole-tensor loader
// of one checkpoint (safetensors' mmap copies) and a slice host of another
// (numpy.memmap, dim-0 slice R of N of every tensor), both through the kernel,
// from a gs:// bucket holding both. Each fetches what it needs, whichever
// starts first: the loader its checkpoint, the host its slices and what the
// kernel reads around them. A loader known to read whole tensors used to set
// the readahead of every process's next files to its own, and the host's
// files were fetched whole.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/served_data_test.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using testing::GcsTestServer;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsMount;

constexpr int kRank = 1;
constexpr int kWorld = 4;

nlohmann::json Stats(const std::string& mountpoint) { return testing::MountStats(mountpoint); }

// Which reader starts first: one after the other (the second once the first
// is done: a loader known to read whole tensors, a host whose slice is
// learned), or both at once.
enum class Start { kLoaderFirst, kTogether, kHostFirst };

std::string Name(Start start) {
  switch (start) {
    case Start::kLoaderFirst:
      return "LoaderFirst";
    case Start::kTogether:
      return "Together";
    case Start::kHostFirst:
      return "HostFirst";
  }
  return "";
}
void PrintTo(Start start, std::ostream* os) { *os << Name(start); }

// gs://mixed: whole/ (llama-shaped) and slice/ (qwen2-shaped), bf16, hidden
// 512: tensors of 0.5 to 4 MiB, about 21 MiB each in 2 shards.
class MixedReadersMountTest : public testing::ServedDataTest<MixedReadersMountTest>,
                              public ::testing::WithParamInterface<Start> {
 public:
  static constexpr char kDataKey[] = "mixed_readers_mount_test/llama-qwen2-2x512";
  static void MakeData(const std::string& dir) {
    for (const auto& [name, arch] : {std::pair<std::string, testing::Arch>{"whole", testing::Arch::kLlama},
                                     {"slice", testing::Arch::kQwen2}}) {
      testing::ModelSpec spec{.arch = arch, .layers = 2, .hidden = 512, .intermediate = 1536, .vocab = 4096,
                              .dtype = Dtype::BF16};
      auto written = testing::WriteCheckpoint(
          spec, {.num_shards = 2, .dir = dir + "/mixed/" + name, .write_extra_files = false});
      ASSERT_TRUE(written.ok()) << written.status().ToString();
    }
  }

 protected:
  // The bytes of checkpoint `dir`'s files (what a loader of it reads).
  static uint64_t Bytes(const std::string& dir) {
    uint64_t bytes = 0;
    for (const auto& entry : fsys::directory_iterator(data_dir_ + "/mixed/" + dir)) bytes += entry.file_size();
    return bytes;
  }
  // The shards of checkpoint `dir`, under `root`, in order.
  static std::vector<std::string> Shards(const std::string& root, const std::string& dir) {
    std::vector<std::string> out;
    for (const auto& entry : fsys::directory_iterator(data_dir_ + "/mixed/" + dir)) {
      if (entry.path().extension() == ".safetensors") out.push_back(root + "/" + dir + "/" + entry.path().filename().string());
    }
    std::sort(out.begin(), out.end());
    return out;
  }
  // The last line of `output` that is a JSON object (a null json if none).
  static nlohmann::json LastJson(const std::string& output) {
    nlohmann::json last;
    std::istringstream lines(output);
    for (std::string line; std::getline(lines, line);) {
      if (line.starts_with("{")) last = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    }
    return last;
  }

};

TEST_P(MixedReadersMountTest, EachReaderFetchesWhatItNeeds) {
  std::string error;
  auto mount = TensorfsMount::Start("gs://mixed", {"-o", "anonymous,views=none,endpoint=" + server_->endpoint()},
                                    &error);
  ASSERT_NE(mount, nullptr) << error;
  const uint64_t whole_bytes = Bytes("whole");
  const uint64_t slice_bytes = Bytes("slice");
  const std::vector<std::string> host_files = Shards(mount->path(), "slice");
  ASSERT_EQ(host_files.size(), 2u);
  // The loader checks every tensor against the source, the host its slices.
  const std::string loader = "/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/mmap_loader.py " +
                             mount->path() + "/whole --compare " + data_dir_ + "/mixed/whole > /dev/null";
  std::string host = "/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/slice_reader.py --rank " +
                     std::to_string(kRank) + " --world " + std::to_string(kWorld) + " --compare " + data_dir_ +
                     "/mixed/slice";
  for (const std::string& f : host_files) host += " " + f;
  std::string command;
  switch (GetParam()) {
    case Start::kLoaderFirst:
      command = loader + " && " + host;
      break;
    case Start::kTogether:
      command = "(" + loader + ") & " + host + " && wait $!";
      break;
    case Start::kHostFirst:
      command = host + " && " + loader;
      break;
  }
  const testing::CommandResult result = RunCommand(command);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json out = LastJson(result.output);
  ASSERT_TRUE(out.is_object() && out.contains("needed")) << result.output;
  const uint64_t host_needed = out["needed"].get<uint64_t>();
  ASSERT_GT(host_needed, slice_bytes / (2 * kWorld));
  // The prefetches still in flight count too; the wait only catches a hang.
  nlohmann::json stats;
  ASSERT_TRUE(testing::WaitUntil(
      [&] { return (stats = Stats(mount->path())).is_object() && stats["fetches_in_flight"] == 0; },
      "the fetches in flight to end"));
  const uint64_t needed = whole_bytes + host_needed;
  const uint64_t fetched = stats["bytes_fetched"].get<uint64_t>();
  std::printf("%s: needed %llu (whole/ %llu, slice %llu of %llu), fetched %llu (%.3fx)\n", Name(GetParam()).c_str(),
              static_cast<unsigned long long>(needed), static_cast<unsigned long long>(whole_bytes),
              static_cast<unsigned long long>(host_needed), static_cast<unsigned long long>(slice_bytes),
              static_cast<unsigned long long>(fetched), static_cast<double>(fetched) / static_cast<double>(needed));
  EXPECT_GE(fetched, whole_bytes);
  EXPECT_LE(fetched, needed * 12 / 10) << "fetched " << fetched << " for " << needed << " needed; "
                                       << stats["files_opened_by_read_ahead"].dump();
}

INSTANTIATE_TEST_SUITE_P(Starts, MixedReadersMountTest,
                         ::testing::Values(Start::kLoaderFirst, Start::kTogether, Start::kHostFirst),
                         [](const ::testing::TestParamInfo<Start>& info) { return Name(info.param); });

}  // namespace
}  // namespace tensorfs
