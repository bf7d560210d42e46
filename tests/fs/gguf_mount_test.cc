// @gguf/ through a real mount, read by the kernel: every file of each
// supported architecture checked against an independent numpy rendering of
// the converter (check_gguf.py: F32, F16 and BF16 byte for byte, Q8_0 against
// ggml's reference, the K types by size, read whole through mmap as
// llama.cpp does and with plain reads); `ls -l` before any tensor data;
// `tensorfs inspect` naming the files or saying in one line why there are
// none; a shard replaced under an open GGUF file; memory within cache_size
// while a file larger than the cache is read through.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tests/support/gguf_checkpoints.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/test_util.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::GgufSpec;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsMount;
using testing::WaitUntil;

const std::string kChecker = "/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/check_gguf.py ";

struct Model {
  std::string dir;
  GgufSpec spec;
};

const std::vector<Model>& Models() {
  static const auto* models = new std::vector<Model>{
      {"llama-bf16", {.architecture = "LlamaForCausalLM", .dtype = Dtype::BF16, .shards = 2}},
      {"mistral-f16", {.architecture = "MistralForCausalLM", .kv_heads = 4, .dtype = Dtype::F16}},
      {"llama-f32-tied", {.architecture = "LlamaForCausalLM", .dtype = Dtype::F32, .tied = true}},
      {"qwen2-bf16", {.architecture = "Qwen2ForCausalLM", .dtype = Dtype::BF16, .shards = 3}},
      {"qwen3-f16", {.architecture = "Qwen3ForCausalLM", .head_dim = 128, .dtype = Dtype::F16}},
      {"phi3-bf16", {.architecture = "Phi3ForCausalLM", .kv_heads = 4, .dtype = Dtype::BF16}},
  };
  return *models;
}

void WriteCheckpoint(const GgufSpec& spec, const std::string& dir) {
  for (const auto& [name, bytes] : testing::GgufCheckpointFiles(spec)) testing::WriteFile(dir + "/" + name, bytes);
}

class GgufMountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    source_ = testing::SharedData("gguf_mount_test/models", [](const std::string& dir) {
      for (const Model& m : Models()) WriteCheckpoint(m.spec, dir + "/" + m.dir);
      // One that cannot be converted: its config lacks the head count.
      GgufSpec bad;
      bad.config_patch = {{"num_attention_heads", nullptr}};
      WriteCheckpoint(bad, dir + "/no-heads");
    });
  }
  std::unique_ptr<TensorfsMount> Mount(const std::string& source, const std::string& options = "") {
    std::string error;
    auto mount = TensorfsMount::Start(source, options.empty() ? std::vector<std::string>{}
                                                              : std::vector<std::string>{"-o", options},
                                      &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }
  void Check(const std::string& dir) {
    auto mount = Mount(source_);
    ASSERT_NE(mount, nullptr);
    auto result = RunCommand(kChecker + "--mount " + mount->path() + "/" + dir + " --source " + source_ + "/" + dir +
                             " 2>&1");
    EXPECT_EQ(result.exit_code, 0) << result.output << "\n" << mount->Log();
    EXPECT_THAT(result.output, HasSubstr("check_gguf: OK"));
    std::cout << result.output;
  }

  inline static std::string source_;
};

TEST_F(GgufMountTest, LlamaBf16FilesEqualTheReference) { Check("llama-bf16"); }
TEST_F(GgufMountTest, MistralF16FilesEqualTheReference) { Check("mistral-f16"); }
TEST_F(GgufMountTest, TiedLlamaF32FilesEqualTheReference) { Check("llama-f32-tied"); }
TEST_F(GgufMountTest, Qwen2Bf16FilesEqualTheReference) { Check("qwen2-bf16"); }
TEST_F(GgufMountTest, Qwen3F16FilesEqualTheReference) { Check("qwen3-f16"); }
TEST_F(GgufMountTest, Phi3Bf16FilesEqualTheReference) { Check("phi3-bf16"); }

TEST_F(GgufMountTest, ListingTheFilesReadsNoTensorData) {
  auto mount = Mount(source_);
  ASSERT_NE(mount, nullptr);
  auto ls = RunCommand("ls -l " + mount->path() + "/llama-bf16/@gguf 2>&1");
  ASSERT_EQ(ls.exit_code, 0) << ls.output;
  EXPECT_THAT(ls.output, HasSubstr("llama-bf16-Q4_K_M.gguf"));
  // The two shards' heads (the engine's head_size each) and the small files.
  const uint64_t fetched = testing::MountStats(mount->path()).value("bytes_fetched", uint64_t{0});
  uint64_t tensors = 0;
  for (const auto& e : fsys::directory_iterator(source_ + "/llama-bf16")) {
    if (e.path().extension() == ".safetensors") tensors += e.file_size();
  }
  EXPECT_LT(fetched, tensors / 2) << "bytes fetched by ls -l";
}

TEST_F(GgufMountTest, AnUnconvertibleCheckpointHasNoGgufAndInspectSaysWhy) {
  auto mount = Mount(source_);
  ASSERT_NE(mount, nullptr);
  std::vector<std::string> names;
  for (const auto& e : fsys::directory_iterator(mount->path() + "/no-heads")) names.push_back(e.path().filename());
  EXPECT_THAT(names, Not(Contains("@gguf")));
  EXPECT_THAT(names, Contains("@tensors"));  // the other views are there
  auto bad = RunCommand(testing::TensorfsBinary() + " inspect " + source_ + "/no-heads 2>&1");
  EXPECT_EQ(bad.exit_code, 0) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("GGUF: none: config.json has no num_attention_heads"));
  auto good = RunCommand(testing::TensorfsBinary() + " inspect " + source_ + "/qwen2-bf16 2>&1");
  EXPECT_THAT(good.output,
              HasSubstr("GGUF: qwen2-bf16-BF16.gguf, qwen2-bf16-Q8_0.gguf, qwen2-bf16-Q4_K_M.gguf (qwen2)"));
  auto json = RunCommand(testing::TensorfsBinary() + " inspect --json " + source_ + "/no-heads");
  EXPECT_THAT(nlohmann::json::parse(json.output, nullptr, false).value("gguf", ""),
              HasSubstr("none: config.json has no num_attention_heads"));
}

// A shard replaced while a GGUF file of it is open: the new listing's @gguf/
// is new files, which read the new bytes; the open file reads its own
// version or ESTALE, never the new one's.
TEST_F(GgufMountTest, AReplacedShardGivesNewFilesAndTheOpenOneKeepsItsVersion) {
  TempDir source;
  const GgufSpec v1{.dtype = Dtype::F16};
  WriteCheckpoint(v1, source.path() + "/m");
  auto mount = Mount(source.path(), "metadata_ttl=1,chunk_size=1M,cache_size=64M,prefetch_window=2M");
  ASSERT_NE(mount, nullptr);
  const std::string file = mount->path() + "/m/@gguf/m-F16.gguf";
  const std::string old_bytes = testing::ReadWhole(file);
  ASSERT_GT(old_bytes.size(), 1u << 20);
  struct stat before;
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // Drop the kernel's pages of it, so the reads below reach tensorfs.
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);

  // The same tensors in F32: the new @gguf/ files are other files.
  GgufSpec v2 = v1;
  v2.dtype = Dtype::F32;
  TempDir staging;
  WriteCheckpoint(v2, staging.path());
  ASSERT_EQ(::rename((staging.path() + "/model.safetensors").c_str(), (source.path() + "/m/model.safetensors").c_str()),
            0);
  ASSERT_TRUE(WaitUntil(
      [&] {
        struct stat now;
        return ::stat(file.c_str(), &now) == 0 && now.st_ino != before.st_ino;
      },
      "m-F16.gguf to be a new file"));
  const std::string new_bytes = testing::ReadWhole(file);
  EXPECT_NE(new_bytes.size(), 0u);
  EXPECT_FALSE(new_bytes == old_bytes);
  auto check = RunCommand(kChecker + "--mount " + mount->path() + "/m --source " + source.path() + "/m 2>&1");
  EXPECT_EQ(check.exit_code, 0) << check.output;

  std::string buf(old_bytes.size(), '\0');
  int stale = 0;
  for (size_t at = 0; at < old_bytes.size(); at += 256 << 10) {
    const size_t want = std::min<size_t>(256 << 10, old_bytes.size() - at);
    const ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
    if (n < 0) {
      EXPECT_EQ(errno, ESTALE) << std::strerror(errno);
      ++stale;
      continue;
    }
    EXPECT_EQ(std::memcmp(buf.data(), old_bytes.data() + at, static_cast<size_t>(n)), 0)
        << "the open file read other bytes than its version's at " << at;
  }
  std::cout << stale << " blocks of the old version answered ESTALE\n";
  ::close(fd);
}

// A Q8_0 file several times the cache, mapped and read through as llama.cpp
// loads it: the daemon's memory stays within cache_size (plus its fixed
// overhead), and every source byte is fetched about once.
TEST_F(GgufMountTest, ReadingAFileLargerThanTheCacheStaysWithinIt) {
  TempDir source;
  const GgufSpec big{.layers = 8, .hidden = 1024, .intermediate = 2816, .heads = 8, .kv_heads = 8, .dtype = Dtype::BF16};
  WriteCheckpoint(big, source.path() + "/big");
  constexpr uint64_t kCacheMib = 24;
  auto mount = Mount(source.path(), "cache_size=" + std::to_string(kCacheMib) + "M,chunk_size=1M,prefetch_window=8M");
  ASSERT_NE(mount, nullptr);
  const std::string file = mount->path() + "/big/@gguf/big-Q8_0.gguf";
  const int fd = ::open(file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  struct stat st;
  ASSERT_EQ(::fstat(fd, &st), 0);
  const uint64_t source_bytes = fsys::file_size(source.path() + "/big/model.safetensors");
  ASSERT_GT(source_bytes, 4 * (kCacheMib << 20));
  void* map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED | MAP_POPULATE, fd, 0);
  ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
  uint64_t sum = 0;
  for (off_t at = 0; at < st.st_size; at += 4096) sum += static_cast<const unsigned char*>(map)[at];
  ::munmap(map, st.st_size);
  ::close(fd);
  std::cout << "checksum " << sum << "\n";
  const nlohmann::json stats = testing::MountStats(mount->path());
  const uint64_t fetched = stats.value("bytes_fetched", uint64_t{0});
  std::cout << "fetched " << fetched << " of " << source_bytes << " source bytes\n";
  EXPECT_LE(fetched, source_bytes * 105 / 100 + (4u << 20));
  const int64_t peak_kib = testing::ProcField(mount->pid(), "status", "VmHWM");
  ASSERT_GT(peak_kib, 0);
  std::cout << "peak RSS " << peak_kib / 1024 << " MiB\n";
  if (testing::kAddressSanitizer) {
    std::cout << "(AddressSanitizer build: the memory bound is not checked)\n";
  } else {
    EXPECT_LE(peak_kib, static_cast<int64_t>((kCacheMib + 96) << 10));
  }
}

}  // namespace
}  // namespace tensorfs
