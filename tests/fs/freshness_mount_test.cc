// A source that changes while mounted, read through the kernel: new objects
// and prefixes appear after metadata_ttl, deleted ones answer ENOENT, a name
// probed before its upload is found after negative_ttl, a replaced shard
// reaches new opens whole while a file opened before reads its version or
// ESTALE (never a mix), views follow, metadata_ttl=inf keeps the first
// listing, opens within a TTL send no request, memory stays bounded over a
// thousand replacements, and notifications sent while reads are in flight do
// not deadlock. Over a local directory (files replaced with rename(2)) and the
// GCS test server (objects replaced by uploads). Every wait is on an event;
// its timeout only catches a hang.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "core/safetensors/header.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/test_util.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::Contains;
using ::testing::Not;
using testing::GcsTestServer;
using testing::kHang;
using testing::RandomBytes;
using testing::ReadFile;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsMount;
using testing::WaitUntil;
using testing::WriteFile;

const std::string kLoader = "/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/mmap_loader.py ";

// A counter of `tensorfs stats --json`.
uint64_t Stat(const std::string& mountpoint, const char* key) {
  return testing::MountStats(mountpoint).value(key, uint64_t{0});
}

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(dir, ec)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// The errno of stat(path), 0 if it succeeds.
int StatErrno(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? 0 : errno;
}

ino_t InodeOf(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

// Aborts the FUSE connection of the mount at `path` (as
// /sys/fs/fuse/connections/N/abort does): the calls waiting on a deadlocked
// daemon fail, which killing it cannot do while one of its threads waits in
// the kernel. Finds the connection without touching the mount.
void AbortConnection(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    if (mount_point != path) continue;
    const std::string connections = "/sys/fs/fuse/connections";
    if (!testing::IsMounted(connections)) RunCommand("mount -t fusectl fusectl " + connections);
    std::ofstream(connections + "/" + dev.substr(dev.find(':') + 1) + "/abort") << "1\n";
  }
}

// Threads that read through a mount until told to stop. Stop() (or the
// destructor, after a failed ASSERT) waits for them; if they hang in the
// kernel (a deadlocked mount) it aborts the mount's connection, which fails
// their calls, and reports the hang.
class Readers {
 public:
  explicit Readers(TensorfsMount& mount) : mount_(mount) {}
  ~Readers() { Stop(); }
  // Runs `read(index, iteration)` on `n` threads until Stop().
  void Start(int n, std::function<void(int, int)> read) {
    for (int r = 0; r < n; ++r) {
      threads_.emplace_back([this, r, read] {
        for (int i = 0; !stop_.load(); ++i) read(r, i);
        ++finished_;
      });
    }
  }
  void Stop() {
    stop_ = true;
    const int n = static_cast<int>(threads_.size());
    if (!WaitUntil([&] { return finished_.load() == n; }, "the readers to finish")) {
      ADD_FAILURE() << "readers hang in the mount: aborting its connection\n" << mount_.Log();
      AbortConnection(mount_.path());
    }
    for (auto& t : threads_) t.join();
    threads_.clear();
    finished_ = 0;
  }

 private:
  TensorfsMount& mount_;
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<int> finished_{0};
};

// A one-tensor safetensors shard of `bytes` bytes of F32 data drawn from `seed`.
std::string Shard(const std::string& tensor, size_t bytes, uint64_t seed) {
  return testing::BuildSafetensorsFile(
      {testing::RawTensor{.name = tensor, .dtype = Dtype::F32, .shape = {bytes / 4}, .bytes = RandomBytes(bytes, seed)}});
}

// Reads `fd` from `offset` to its end in blocks that cross the mount's chunk
// and page boundaries at odd places, checking each against the version the
// file was opened on: its bytes (all or the first ones), or ESTALE. Returns how many blocks were
// stale; fails the test on any other bytes (the new version's or a mix) or
// any other error.
int ReadOnExpectingVersion(int fd, size_t offset, const std::string& old_bytes, const std::string& new_bytes) {
  constexpr size_t kBlock = (100 << 10) + 17;
  std::string buf(kBlock, '\0');
  int stale = 0;
  for (size_t at = offset; at < old_bytes.size(); at += kBlock) {
    const size_t want = std::min(kBlock, old_bytes.size() - at);
    const ssize_t n = ::pread(fd, buf.data(), want, static_cast<off_t>(at));
    if (n < 0) {
      EXPECT_EQ(errno, ESTALE) << "at " << at << ": " << std::strerror(errno);
      ++stale;
      continue;
    }
    // Short when the kernel had the first pages and the rest is stale.
    EXPECT_GT(n, 0) << "nothing read at " << at;
    if (std::memcmp(buf.data(), old_bytes.data() + at, static_cast<size_t>(n)) == 0) continue;
    const bool is_new = at + static_cast<size_t>(n) <= new_bytes.size() &&
                        std::memcmp(buf.data(), new_bytes.data() + at, static_cast<size_t>(n)) == 0;
    ADD_FAILURE() << "the block at " << at << " is " << (is_new ? "the new version's" : "neither version's (a mix)");
  }
  return stale;
}

// ---------------------------------------------------------------------------
// A local directory as the source.

class LocalFreshnessTest : public ::testing::Test {
 protected:
  std::unique_ptr<TensorfsMount> Mount(const std::string& options, const std::string& source = "") {
    std::string error;
    auto mount = TensorfsMount::Start(source.empty() ? source_.path() : source, {"-o", options}, &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }
  // Publishes `bytes` at `rel` as a writer does: a new file renamed over the old.
  void Replace(const std::string& rel, const std::string& bytes) {
    const std::string path = source_.path() + "/" + rel;
    WriteFile(path + ".partial", bytes);
    ASSERT_EQ(::rename((path + ".partial").c_str(), path.c_str()), 0) << std::strerror(errno);
  }
  std::string Src(const std::string& rel) const { return source_.path() + "/" + rel; }

  TempDir source_;
};

TEST_F(LocalFreshnessTest, NewCheckpointDirectoryAndNewFileAppearAfterTheTtl) {
  WriteFile(Src("step-1000/model.safetensors"), Shard("w", 64 << 10, 1));
  auto mount = Mount("metadata_ttl=1");
  ASSERT_NE(mount, nullptr);
  ASSERT_THAT(List(mount->path()), Contains("step-1000"));
  ASSERT_THAT(List(mount->path() + "/step-1000"), Not(Contains("tokenizer.json")));

  WriteFile(Src("step-2000/model.safetensors"), Shard("w", 64 << 10, 2));
  WriteFile(Src("step-1000/tokenizer.json"), "{\"tokens\": 1}");
  ASSERT_TRUE(WaitUntil([&] { return testing::ReadWhole(mount->path() + "/step-1000/tokenizer.json") == "{\"tokens\": 1}"; },
                        "step-1000/tokenizer.json to appear"));
  ASSERT_TRUE(WaitUntil([&] { return fsys::exists(mount->path() + "/step-2000/model.safetensors"); },
                        "step-2000/ to appear"));
  EXPECT_THAT(List(mount->path()), Contains("step-2000"));
  EXPECT_THAT(List(mount->path() + "/step-1000"), Contains("tokenizer.json"));
  EXPECT_TRUE(testing::SameBytes(testing::ReadWhole(mount->path() + "/step-2000/model.safetensors"),
                                 Shard("w", 64 << 10, 2)));
}

TEST_F(LocalFreshnessTest, DeletedFileAnswersEnoentAfterTheTtl) {
  WriteFile(Src("ckpt/model.safetensors"), Shard("w", 64 << 10, 1));
  WriteFile(Src("ckpt/old.json"), "{}");
  auto mount = Mount("metadata_ttl=1");
  ASSERT_NE(mount, nullptr);
  ASSERT_EQ(testing::ReadWhole(mount->path() + "/ckpt/old.json"), "{}");
  ASSERT_EQ(::unlink(Src("ckpt/old.json").c_str()), 0);
  ASSERT_TRUE(WaitUntil([&] { return StatErrno(mount->path() + "/ckpt/old.json") == ENOENT; },
                        "ckpt/old.json to answer ENOENT"));
  std::string bytes;
  EXPECT_EQ(ReadFile(mount->path() + "/ckpt/old.json", &bytes), ENOENT);
  EXPECT_THAT(List(mount->path() + "/ckpt"), Not(Contains("old.json")));
  EXPECT_GE(Stat(mount->path(), "entries_removed"), 1u);
}

TEST_F(LocalFreshnessTest, ShardReplacedUnderAnOpenFileReadsAsItsVersionOrEstale) {
  const std::string v1 = Shard("w", 8 << 20, 1);
  const std::string v2 = Shard("w", (8 << 20) + 4096, 2);
  WriteFile(Src("ckpt/model.safetensors"), v1);
  auto mount = Mount("metadata_ttl=1,chunk_size=1M,cache_size=64M,prefetch_window=2M");
  ASSERT_NE(mount, nullptr);
  const std::string shard = mount->path() + "/ckpt/model.safetensors";
  const int fd = ::open(shard.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  const ino_t old_ino = InodeOf(shard);
  std::string head(1 << 20, '\0');
  ASSERT_EQ(::pread(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  ASSERT_TRUE(testing::SameBytes(head, v1.substr(0, head.size())));

  Replace("ckpt/model.safetensors", v2);
  ASSERT_TRUE(WaitUntil([&] { return InodeOf(shard) != old_ino; }, "the new version to be a new file"));
  const int stale = ReadOnExpectingVersion(fd, head.size(), v1, v2);
  std::cout << stale << " blocks of the old version read as ESTALE\n";
  ::close(fd);

  // A new open reads the new version whole, as a loader maps it.
  auto loader = RunCommand(kLoader + mount->path() + "/ckpt --compare " + Src("ckpt"));
  EXPECT_EQ(loader.exit_code, 0) << loader.output;
  EXPECT_EQ(Stat(mount->path(), "versions_replaced"), 1u);
}

TEST_F(LocalFreshnessTest, ViewsOfAReplacedShardShowTheNewVersion) {
  WriteFile(Src("ckpt/model.safetensors"), Shard("a.weight", 1 << 20, 1));
  auto mount = Mount("metadata_ttl=1,views=tensors");
  ASSERT_NE(mount, nullptr);
  const std::string tensors = mount->path() + "/ckpt/@tensors";
  ASSERT_THAT(List(tensors), ::testing::ElementsAre("a.weight.safetensors"));
  const std::string old_view = testing::ReadWhole(tensors + "/a.weight.safetensors");
  ASSERT_GT(old_view.size(), 1u << 20);
  const int fd = ::open((tensors + "/a.weight.safetensors").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);

  // The new version's tensor has another name and size.
  Replace("ckpt/model.safetensors", Shard("b.weight", 2 << 20, 2));
  ASSERT_TRUE(WaitUntil([&] { return List(tensors) == std::vector<std::string>{"b.weight.safetensors"}; },
                        "@tensors to show the new shard's tensor"));
  const std::string new_view = testing::ReadWhole(tensors + "/b.weight.safetensors");
  auto header = ParseSafetensorsFile("b.weight.safetensors", std::as_bytes(std::span(new_view)));
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_TRUE(testing::SameBytes(new_view.substr(header->data_start()), RandomBytes(2 << 20, 2)));
  // The view file opened before keeps its version.
  ReadOnExpectingVersion(fd, 0, old_view, new_view);
  ::close(fd);
}

TEST_F(LocalFreshnessTest, InfiniteTtlKeepsTheFirstListing) {
  WriteFile(Src("ckpt/model.safetensors"), Shard("w", 64 << 10, 1));
  WriteFile(Src("ckpt/config.json"), "{\"v\": 1}");
  auto fixed = Mount("metadata_ttl=inf,negative_ttl=0");
  auto fresh = Mount("metadata_ttl=1");
  ASSERT_NE(fixed, nullptr);
  ASSERT_NE(fresh, nullptr);
  ASSERT_EQ(testing::ReadWhole(fixed->path() + "/ckpt/config.json"), "{\"v\": 1}");
  ASSERT_EQ(StatErrno(fixed->path() + "/ckpt/late.json"), ENOENT);
  const uint64_t listings = Stat(fixed->path(), "listings");

  WriteFile(Src("ckpt/late.json"), "{}");
  Replace("ckpt/config.json", "{\"v\": 2, \"longer\": true}");
  // The mount with a TTL has seen both changes...
  ASSERT_TRUE(WaitUntil([&] { return Exists(fresh->path() + "/ckpt/late.json"); }, "late.json in the mount with a TTL"));
  ASSERT_TRUE(WaitUntil([&] { return testing::ReadWhole(fresh->path() + "/ckpt/config.json") == "{\"v\": 2, \"longer\": true}"; },
                        "the new config.json in the mount with a TTL"));
  // ... the one without still shows the first listing, and asks nothing.
  EXPECT_EQ(StatErrno(fixed->path() + "/ckpt/late.json"), ENOENT);
  EXPECT_THAT(List(fixed->path() + "/ckpt"), Not(Contains("late.json")));
  struct stat st;
  ASSERT_EQ(::stat((fixed->path() + "/ckpt/config.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8);
  EXPECT_EQ(Stat(fixed->path(), "listings"), listings);
}

// The checkpoint a writer keeps replacing in the memory test: file i, version
// v holds one tensor whose bytes are drawn from (i, v), and says v in its
// metadata, so a reader can check any file it reads against its version.
std::string VersionedShard(int file, int version) {
  return testing::BuildSafetensorsFile(
      {testing::RawTensor{.name = "w", .dtype = Dtype::F32, .shape = {(128 << 10) / 4},
                          .bytes = RandomBytes(128 << 10, static_cast<uint64_t>(file) * 100000 + version)}},
      {{"version", std::to_string(version)}});
}

TEST_F(LocalFreshnessTest, MemoryStaysBoundedOverAThousandReplacements) {
  constexpr int kFiles = 10;
  constexpr int kReplacements = 1000;
  constexpr uint64_t kCacheMib = 64;
  auto name = [](int i) { return "ckpt/model-" + std::to_string(i + 1) + "-of-10.safetensors"; };
  for (int i = 0; i < kFiles; ++i) WriteFile(Src(name(i)), VersionedShard(i, 0));
  // Every lookup and open lists the directory: each replacement is seen.
  auto mount = Mount("metadata_ttl=0,cache_size=" + std::to_string(kCacheMib) + "M");
  ASSERT_NE(mount, nullptr);

  std::atomic<int> reads{0};
  std::atomic<int> bad{0};
  Readers readers(*mount);
  readers.Start(3, [&](int r, int n) {
    if (r == 2) {  // one reader looks into a view as well: its catalog is built anew each time
      (void)List(mount->path() + "/ckpt/@tensors");
      return;
    }
    const int file = (n * 7 + r) % kFiles;
    std::string bytes;
    const int err = ReadFile(mount->path() + "/" + name(file), &bytes);
    if (err == ESTALE || err == ENOENT) return;  // replaced between its lookup and its read
    auto header = ParseSafetensorsFile("shard", std::as_bytes(std::span(bytes)));
    const int version =
        header.ok() && header->metadata.contains("version") ? std::stoi(header->metadata.at("version")) : -1;
    if (err != 0 || version < 0 || bytes != VersionedShard(file, version)) ++bad;
    ++reads;
  });
  for (int v = 1; v <= kReplacements / kFiles; ++v) {
    for (int i = 0; i < kFiles; ++i) Replace(name(i), VersionedShard(i, v));
    const int before = reads.load();
    ASSERT_TRUE(WaitUntil([&] { return reads.load() > before; }, "the readers to read on"));
  }
  readers.Stop();
  EXPECT_EQ(bad.load(), 0) << "reads that returned other bytes than their version's";

  // Nodes of the replaced versions go once the kernel forgets them.
  ASSERT_TRUE(WaitUntil([&] { return Stat(mount->path(), "nodes") <= 100; }, "the node table to shrink to the tree"))
      << testing::MountStats(mount->path()).dump();
  EXPECT_GE(Stat(mount->path(), "versions_replaced"), static_cast<uint64_t>(kReplacements) / 2);
  const int64_t peak_kib = testing::ProcField(mount->pid(), "status", "VmHWM");
  ASSERT_GT(peak_kib, 0);
  std::cout << "peak RSS " << peak_kib / 1024 << " MiB, " << Stat(mount->path(), "nodes") << " nodes\n";
  if (testing::kAddressSanitizer) {
    std::cout << "(AddressSanitizer build: the memory bound is not checked)\n";
  } else {
    EXPECT_LE(peak_kib, static_cast<int64_t>((kCacheMib + 128) << 10));
  }
}

// ---------------------------------------------------------------------------
// The GCS test server as the source: one server for the suite, a bucket per test.

class GcsFreshnessTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    data_ = new TempDir();
    std::string error;
    server_ = GcsTestServer::Start({.data_dir = data_->path()}, &error).release();
    ASSERT_NE(server_, nullptr) << error;
  }
  static void TearDownTestSuite() {
    delete server_;
    delete data_;
  }
  void SetUp() override {
    static int buckets = 0;
    bucket_ = "bucket-" + std::to_string(++buckets);
    fsys::create_directories(data_->path() + "/" + bucket_);
    ASSERT_TRUE(server_->SetShaping(0, 0, 0));
  }
  std::unique_ptr<TensorfsMount> Mount(const std::string& options) {
    std::string error;
    auto mount = TensorfsMount::Start("gs://" + bucket_, {"-o", "anonymous,endpoint=" + server_->endpoint() + "," + options},
                                      &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }
  std::string Src(const std::string& rel) const { return data_->path() + "/" + bucket_ + "/" + rel; }
  bool Upload(const std::string& rel, const std::string& bytes) { return server_->Upload(bucket_, rel, bytes); }

  static TempDir* data_;
  static GcsTestServer* server_;
  std::string bucket_;
};

TempDir* GcsFreshnessTest::data_ = nullptr;
GcsTestServer* GcsFreshnessTest::server_ = nullptr;

TEST_F(GcsFreshnessTest, NewObjectsAppearAndDeletedOnesGoAfterTheTtl) {
  WriteFile(Src("step-1000/model.safetensors"), Shard("w", 64 << 10, 1));
  WriteFile(Src("step-1000/old.json"), "{}");
  auto mount = Mount("metadata_ttl=1");
  ASSERT_NE(mount, nullptr);
  ASSERT_THAT(List(mount->path()), ::testing::ElementsAre("step-1000"));
  ASSERT_EQ(testing::ReadWhole(mount->path() + "/step-1000/old.json"), "{}");

  ASSERT_TRUE(Upload("step-2000/model.safetensors", Shard("w", 64 << 10, 2))) << server_->last_error();
  ASSERT_TRUE(Upload("step-1000/tokenizer.json", "{\"tokens\": 1}")) << server_->last_error();
  fsys::remove(Src("step-1000/old.json"));
  ASSERT_TRUE(WaitUntil([&] { return List(mount->path()).size() == 2; }, "step-2000/ to appear"));
  ASSERT_TRUE(WaitUntil([&] { return StatErrno(mount->path() + "/step-1000/old.json") == ENOENT; },
                        "old.json to answer ENOENT"));
  EXPECT_EQ(testing::ReadWhole(mount->path() + "/step-1000/tokenizer.json"), "{\"tokens\": 1}");
  EXPECT_TRUE(testing::SameBytes(testing::ReadWhole(mount->path() + "/step-2000/model.safetensors"),
                                 Shard("w", 64 << 10, 2)));
}

// mountpoint-s3 #831: a probe before the upload must not hide the file.
TEST_F(GcsFreshnessTest, NameProbedBeforeItsUploadIsFoundAfterTheNegativeTtl) {
  WriteFile(Src("ckpt/model.safetensors"), Shard("w", 64 << 10, 1));
  auto mount = Mount("metadata_ttl=3600,negative_ttl=1");
  ASSERT_NE(mount, nullptr);
  ASSERT_EQ(StatErrno(mount->path() + "/ckpt/done.marker"), ENOENT);
  ASSERT_TRUE(Upload("ckpt/done.marker", "ok")) << server_->last_error();
  ASSERT_TRUE(WaitUntil([&] { return Exists(mount->path() + "/ckpt/done.marker"); }, "done.marker to be found"));
  EXPECT_EQ(testing::ReadWhole(mount->path() + "/ckpt/done.marker"), "ok");
}

TEST_F(GcsFreshnessTest, ShardReplacedWhilePrefetchedReadsAsItsVersionOrEstale) {
  const std::string v1 = Shard("w", 16 << 20, 11);
  const std::string v2 = Shard("w", 16 << 20, 12);
  WriteFile(Src("ckpt/model.safetensors"), v1);
  auto mount = Mount("metadata_ttl=1,chunk_size=1M,cache_size=64M,prefetch_window=8M,max_fetches=4");
  ASSERT_NE(mount, nullptr);
  const std::string shard = mount->path() + "/ckpt/model.safetensors";
  const ino_t old_ino = InodeOf(shard);
  const int fd = ::open(shard.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  // A slow link: the prefetch the first reads start is still coming when the
  // object is replaced.
  ASSERT_TRUE(server_->SetShaping(20, 4 << 20, 0));
  std::string head(2 << 20, '\0');
  ASSERT_EQ(::pread(fd, head.data(), head.size(), 0), static_cast<ssize_t>(head.size()));
  ASSERT_TRUE(testing::SameBytes(head, v1.substr(0, head.size())));
  ASSERT_GT(Stat(mount->path(), "fetches_in_flight"), 0u) << "no prefetch in flight at the replace";
  ASSERT_TRUE(Upload("ckpt/model.safetensors", v2)) << server_->last_error();
  ASSERT_TRUE(server_->SetShaping(0, 0, 0));

  const int stale = ReadOnExpectingVersion(fd, head.size(), v1, v2);
  std::cout << stale << " blocks of the old version read as ESTALE\n";
  ::close(fd);

  ASSERT_TRUE(WaitUntil([&] { return InodeOf(shard) != old_ino; }, "the new version to be a new file"));
  auto loader = RunCommand(kLoader + mount->path() + "/ckpt --compare " + Src("ckpt"));
  EXPECT_EQ(loader.exit_code, 0) << loader.output;
}

TEST_F(GcsFreshnessTest, OpensWithinTheTtlSendNoRequest) {
  constexpr int kFiles = 10;
  for (int i = 0; i < kFiles; ++i) {
    WriteFile(Src("ckpt/model-" + std::to_string(i) + ".safetensors"), Shard("w", 64 << 10, 20 + i));
  }
  auto mount = Mount("metadata_ttl=600");
  ASSERT_NE(mount, nullptr);
  const std::string dir = mount->path() + "/ckpt/";
  for (int i = 0; i < kFiles; ++i) ASSERT_FALSE(testing::ReadWhole(dir + "model-" + std::to_string(i) + ".safetensors").empty());
  ASSERT_TRUE(server_->ResetStats());
  for (int round = 0; round < 10; ++round) {
    for (int i = 0; i < kFiles; ++i) {
      const std::string path = dir + "model-" + std::to_string(i) + ".safetensors";
      const int fd = ::open(path.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
      struct stat st;
      ASSERT_EQ(::fstat(fd, &st), 0);
      char header[8];
      ASSERT_EQ(::pread(fd, header, sizeof header, 0), 8);
      ::close(fd);
    }
  }
  const nlohmann::json stats = server_->Stats();
  EXPECT_EQ(stats["requests"].get<int>(), 0) << stats.dump();
}

TEST_F(GcsFreshnessTest, NotificationsWhileReadsAreInFlightDoNotDeadlock) {
  constexpr int kFiles = 4;
  auto name = [](int i) { return "ckpt/f" + std::to_string(i) + ".bin"; };
  for (int i = 0; i < kFiles; ++i) WriteFile(Src(name(i)), RandomBytes(4 << 20, 30 + i));
  auto mount = Mount("metadata_ttl=0.2,negative_ttl=0.2,chunk_size=256K,cache_size=32M,prefetch_window=1M");
  ASSERT_NE(mount, nullptr);
  // Every response waits: reads and listings are in flight while the
  // listings find changes and the notifications go out.
  ASSERT_TRUE(server_->SetShaping(5, 0, 0));
  std::atomic<int> reads{0};
  Readers readers(*mount);
  readers.Start(5, [&](int r, int n) {
    if (r == 4) {
      // Names never seen are looked up with the directory locked by the
      // kernel: the listings these lookups take find the replacements, and
      // the kernel must be told while the lookup that found them is waiting.
      (void)StatErrno(mount->path() + "/ckpt/probe-" + std::to_string(n));
      return;
    }
    std::string buf(64 << 10, '\0');
    const int fd = ::open((mount->path() + "/" + name((n + r) % kFiles)).c_str(), O_RDONLY);
    if (fd < 0) return;  // replaced between its lookup and its open
    for (int k = 0; k < 4; ++k) (void)::pread(fd, buf.data(), buf.size(), static_cast<off_t>((k * 997 + r) << 12));
    ::close(fd);
    ++reads;
  });
  const uint64_t before = Stat(mount->path(), "kernel_invalidations");
  for (int v = 0; v < 20; ++v) {
    ASSERT_TRUE(Upload(name(v % kFiles), RandomBytes(4 << 20, 100 + v))) << server_->last_error();
    const int seen = reads.load();
    ASSERT_TRUE(WaitUntil([&] { return reads.load() > seen + 4; }, "reads to go on after replacement " + std::to_string(v)));
  }
  ASSERT_TRUE(WaitUntil([&] { return Stat(mount->path(), "kernel_invalidations") > before + 10; },
                        "the listings' invalidations to be sent"));
  readers.Stop();
  ASSERT_TRUE(server_->SetShaping(0, 0, 0));
  EXPECT_EQ(List(mount->path() + "/ckpt").size(), static_cast<size_t>(kFiles));
}

}  // namespace
}  // namespace tensorfs
