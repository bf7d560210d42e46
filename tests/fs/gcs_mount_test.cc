// Real mounts of gs:// sources served by the project's GCS-compatible test
// server: bytes through the kernel equal the source under injected faults,
// pagination, odd names, replaced objects and a server that goes away.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <iostream>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/engine/chunk_plan.h"
#include "core/safetensors/header.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/served_data_test.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadWhole;
using testing::WriteFile;
using testing::GcsTestServer;
using testing::RandomBytes;
using testing::ReadFile;
using testing::RunCommand;
using testing::TensorfsBinary;
using testing::TensorfsMount;

constexpr char kShard[] = "llama/model-00001-of-00002.safetensors";

// A checkpoint, odd object names and a listing of more than one page, in
// bucket "ckpt"; read-only.
class GcsMountTest : public testing::ServedDataTest<GcsMountTest> {
 public:
  static constexpr char kDataKey[] = "gcs_mount_test/llama-2x256-odd-many1100";
  static void MakeData(const std::string& dir) {
    const std::string bucket = dir + "/ckpt";
    testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 2, .hidden = 256, .intermediate = 512,
                            .vocab = 2048, .dtype = Dtype::BF16};
    auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = bucket + "/llama"});
    ASSERT_TRUE(written.ok()) << written.status().ToString();
    for (const char* name : {"with space.txt", "ünïcødé.json", "hash#1", "q?x", "pct%20", "plus+1", "a/b/c.txt"}) {
      WriteFile(bucket + "/odd/" + name, std::string("content of ") + name);
    }
    for (int i = 0; i < 1100; ++i) {
      char name[32];
      std::snprintf(name, sizeof name, "/many/f%04d", i);
      WriteFile(bucket + name, std::to_string(i));
    }
  }

 protected:
  std::unique_ptr<TensorfsMount> Mount(const std::string& extra = "retry_deadline=20,stall_timeout=2") {
    std::string error;
    auto mount = TensorfsMount::Start("gs://ckpt", {"-o", "anonymous,endpoint=" + server_->endpoint() + "," + extra},
                                      &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }
  static std::string Src(const std::string& rel) { return ServedDataTest::Src("ckpt/" + rel); }
};

TEST_F(GcsMountTest, EveryFileReadsLikeTheSourceByReadAndMmap) {
  auto mount = Mount();
  ASSERT_NE(mount, nullptr);
  int files = 0;
  for (const auto& e : fsys::recursive_directory_iterator(Src("llama"))) {
    std::string rel = "llama/" + fsys::relative(e.path(), Src("llama")).string();
    std::string expected = ReadWhole(Src(rel));
    std::string got;
    ASSERT_EQ(ReadFile(mount->path() + "/" + rel, &got), 0) << rel;
    EXPECT_EQ(got, expected) << rel;
    int fd = ::open((mount->path() + "/" + rel).c_str(), O_RDONLY);
    void* map = ::mmap(nullptr, expected.size(), PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(map, MAP_FAILED);
    EXPECT_EQ(std::memcmp(map, expected.data(), expected.size()), 0) << rel;
    ::munmap(map, expected.size());
    ::close(fd);
    ++files;
  }
  EXPECT_GE(files, 5);
}

TEST_F(GcsMountTest, OddObjectNamesAppearAsFiles) {
  auto mount = Mount();
  ASSERT_NE(mount, nullptr);
  for (const char* name : {"with space.txt", "ünïcødé.json", "hash#1", "q?x", "pct%20", "plus+1", "a/b/c.txt"}) {
    EXPECT_EQ(ReadWhole(mount->path() + "/odd/" + name), std::string("content of ") + name) << name;
  }
}

TEST_F(GcsMountTest, ListingOfMoreThan1000ObjectsIsComplete) {
  auto mount = Mount();
  ASSERT_NE(mount, nullptr);
  size_t count = 0;
  for ([[maybe_unused]] const auto& e : fsys::directory_iterator(mount->path() + "/many")) ++count;
  EXPECT_EQ(count, 1100u);
  EXPECT_EQ(ReadWhole(mount->path() + "/many/f1099"), "1099");
  EXPECT_GE(server_->Stats()["list_requests"].get<int>(), 2) << "pages followed";
}

// Each fault hits the shard's media downloads; the bytes must still be exact.
class GcsFaultTest : public GcsMountTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(GcsFaultTest, ReadCompletesWithIdenticalBytes) {
  auto mount = Mount();
  ASSERT_NE(mount, nullptr);
  ASSERT_TRUE(server_->InjectFaults(GetParam())) << server_->last_error();
  std::string got;
  ASSERT_EQ(ReadFile(mount->path() + "/" + kShard, &got), 0) << mount->Log();
  EXPECT_EQ(got, ReadWhole(Src(kShard)));
  EXPECT_GE(server_->Stats()["faults_applied"].get<int>(), 1) << "the fault was exercised";
}

INSTANTIATE_TEST_SUITE_P(
    Faults, GcsFaultTest,
    ::testing::Values(
        R"([{"match": {"media": true}, "action": "status", "status": 503, "count": 2}])",
        R"([{"match": {"media": true}, "action": "status", "status": 429, "count": 2}])",
        R"([{"match": {"media": true}, "action": "status", "status": 500, "count": 1}])",
        R"([{"match": {"media": true}, "action": "reset_after", "bytes": 30000, "count": 2}])",
        R"([{"match": {"media": true}, "action": "truncate_after", "bytes": 20000, "count": 2}])",
        R"([{"match": {"media": true}, "action": "stall_after", "bytes": 10000, "seconds": 6, "count": 1}])",
        R"([{"match": {"media": true}, "action": "delay_first_byte", "seconds": 1, "count": 1}])"));

TEST_F(GcsMountTest, PersistentErrorGivesEioAfterDeadlineAndMountStaysUsable) {
  auto mount = Mount("retry_deadline=4,stall_timeout=2");
  ASSERT_NE(mount, nullptr);
  std::string path = mount->path() + "/" + kShard;
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_TRUE(server_->InjectFaults(R"([{"match": {"media": true}, "action": "status", "status": 503, "count": -1}])"));
  std::string got;
  EXPECT_EQ(ReadFile(path, &got), EIO);
  // The engine's own account of how long it retried: it gives up only when
  // the next wait (at most 2 s) would pass the deadline, so never before
  // retry_deadline - 2 s of failures.
  std::smatch m;
  const std::string log = mount->Log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("gave up after ([0-9]+) attempts over ([0-9.]+) s"))) << log;
  EXPECT_GE(std::stoi(m[1]), 2) << log;
  EXPECT_GE(std::stod(m[2]), 4.0 - 2.0) << log;
  std::cout << "EIO after " << m[1] << " attempts over " << m[2] << " s (retry_deadline 4 s)\n";
  const auto stats = testing::MountStats(mount->path());
  EXPECT_GE(stats["retries"]["exhausted"].get<int>(), 1) << stats.dump();
  EXPECT_GE(stats["reads_failed_eio"].get<int>(), 1) << stats.dump();
  ASSERT_TRUE(server_->ClearFaults());
  ASSERT_EQ(ReadFile(path, &got), 0) << mount->Log();
  EXPECT_EQ(got, ReadWhole(Src(kShard)));
}

TEST_F(GcsMountTest, ServerDownAtMountTimeFailsClearlyWithoutMounting) {
  server_->Stop();
  testing::TempDir mnt;
  auto result = RunCommand(TensorfsBinary() + " gs://ckpt " + mnt.path() + " -o anonymous,retry_deadline=1,endpoint=" +
                           server_->endpoint());
  EXPECT_EQ(result.exit_code, 1);
  EXPECT_THAT(result.output, HasSubstr("cannot list gs://ckpt"));
  EXPECT_THAT(result.output, HasSubstr("connect"));
  EXPECT_FALSE(testing::IsMounted(mnt.path()));
  EXPECT_TRUE(fsys::is_empty(mnt.path()));
}

TEST_F(GcsMountTest, ServerDownMidReadGivesEioThenRecovers) {
  auto mount = Mount("retry_deadline=2,stall_timeout=2");
  ASSERT_NE(mount, nullptr);
  std::string path = mount->path() + "/" + kShard;
  std::string expected = ReadWhole(Src(kShard));
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  char head[4096];
  ASSERT_EQ(::pread(fd, head, sizeof head, 0), 4096);
  server_->Stop();
  std::vector<char> buf(4096);
  EXPECT_EQ(::pread(fd, buf.data(), buf.size(), static_cast<off_t>(expected.size() / 2)), -1);
  EXPECT_EQ(errno, EIO);
  struct stat st;
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << "the mount answers while the server is down";
  ASSERT_TRUE(server_->Restart());
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), static_cast<off_t>(expected.size() / 2)), 4096) << mount->Log();
  EXPECT_EQ(std::string(buf.data(), buf.size()), expected.substr(expected.size() / 2, 4096));
  ::close(fd);
}

// An object replaced under the mount: each test has its own copy of the
// bucket, since it changes it. The object is large enough that a mount with
// an 8 MiB cache and a 2 MiB prefetch window has not fetched its second half
// when only its head was read.
class GcsReplaceTest : public ::testing::Test {
 protected:
  static constexpr char kReplaced[] = "replaced/blob.bin";
  static constexpr size_t kReplacedSize = 16 << 20;

  void SetUp() override {
    replaced_old_ = RandomBytes(kReplacedSize, 1);
    replaced_new_ = RandomBytes(kReplacedSize, 2);
    WriteFile(data_.path() + "/ckpt/" + kReplaced, replaced_old_);
    std::string error;
    server_ = GcsTestServer::Start({.data_dir = data_.path()}, &error);
    ASSERT_NE(server_, nullptr) << error;
  }
  std::unique_ptr<TensorfsMount> Mount() {
    std::string error;
    auto mount = TensorfsMount::Start(
        "gs://ckpt", {"-o", "anonymous,endpoint=" + server_->endpoint() +
                                ",retry_deadline=20,stall_timeout=2,cache_size=8M,chunk_size=1M,max_fetches=4,"
                                "prefetch_window=2M"},
        &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }

  testing::TempDir data_;
  std::unique_ptr<GcsTestServer> server_;
  std::string replaced_old_;  // kReplaced as mounted
  std::string replaced_new_;  // what the tests upload over it
};

// An fd opened on the mounted version; the object is replaced; the bytes the
// fd then asks for are in neither tensorfs's cache nor the page cache, so they
// must come from the server, whose version is gone: ESTALE, never the new bytes.
TEST_F(GcsReplaceTest, ReplacedObjectReadsAsStaleWhereItsBytesAreNotCached) {
  auto mount = Mount();
  ASSERT_NE(mount, nullptr);
  const std::string& original = replaced_old_;
  int fd = ::open((mount->path() + "/" + kReplaced).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::vector<char> buf(64 << 10);
  ASSERT_EQ(::pread(fd, buf.data(), 4096, 0), 4096);
  EXPECT_EQ(std::string(buf.data(), 4096), original.substr(0, 4096));
  ASSERT_TRUE(server_->Upload("ckpt", kReplaced, replaced_new_)) << server_->last_error();
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  const off_t tail = static_cast<off_t>(kReplacedSize - buf.size());
  errno = 0;
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), tail);
  const int err = errno;
  ::close(fd);
  EXPECT_EQ(n, -1) << (n > 0 && std::string(buf.data(), static_cast<size_t>(n)) == replaced_new_.substr(tail, n)
                           ? "the new version's bytes"
                           : "bytes") << " instead of ESTALE";
  EXPECT_EQ(err, ESTALE) << std::strerror(err) << "\n" << mount->Log();
  EXPECT_THAT(mount->Log(), HasSubstr("changed while mounted"));
}

// The whole object read block by block after it was replaced, its head having
// been read before: every block that reads is the old version's bytes at that
// offset, none is the new version's or a mix; the rest is ESTALE.
TEST_F(GcsReplaceTest, ReplacedObjectNeverReadsAsAMixOfOldAndNewBytes) {
  auto mount = Mount();
  ASSERT_NE(mount, nullptr);
  const std::string& old_bytes = replaced_old_;
  const std::string& new_bytes = replaced_new_;
  int fd = ::open((mount->path() + "/" + kReplaced).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  constexpr size_t kBlock = 64 << 10;
  std::vector<char> buf(kBlock);
  for (size_t off = 0; off < (1u << 20); off += kBlock) {
    ASSERT_EQ(::pread(fd, buf.data(), kBlock, static_cast<off_t>(off)), static_cast<ssize_t>(kBlock));
    ASSERT_EQ(std::memcmp(buf.data(), old_bytes.data() + off, kBlock), 0) << "at " << off;
  }
  ASSERT_TRUE(server_->Upload("ckpt", kReplaced, new_bytes)) << server_->last_error();
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  int old_blocks = 0, stale_blocks = 0, other_errors = 0;
  std::vector<std::string> wrong;  // blocks that are not wholly the old version
  for (size_t off = 0; off < kReplacedSize; off += kBlock) {
    const ssize_t n = ::pread(fd, buf.data(), kBlock, static_cast<off_t>(off));
    if (n < 0) {
      (errno == ESTALE ? stale_blocks : other_errors) += 1;
      continue;
    }
    if (n != static_cast<ssize_t>(kBlock)) {
      wrong.push_back("short read of " + std::to_string(n) + " at " + std::to_string(off));
      continue;
    }
    size_t from_old = 0, from_new = 0;
    for (size_t i = 0; i < kBlock; ++i) {
      from_old += buf[i] == old_bytes[off + i];
      from_new += buf[i] == new_bytes[off + i];
    }
    if (from_old == kBlock) {
      ++old_blocks;
    } else {
      wrong.push_back("block at " + std::to_string(off) + ": " + std::to_string(from_old) + " bytes of the old version, " +
                      std::to_string(from_new) + " of the new");
    }
  }
  ::close(fd);
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " blocks, the first: " << wrong.front();
  EXPECT_EQ(other_errors, 0) << mount->Log();
  EXPECT_GE(stale_blocks, 1) << "the uncached part of the old version cannot be served";
  std::cout << old_blocks << " blocks read as the old version, " << stale_blocks << " as ESTALE\n";
}

// Credentials through the mount: a service-account key whose signed JWT the
// server's token endpoint verifies, with auth required on every request.
TEST(GcsMountAuthTest, ServiceAccountKeyFileMounts) {
  testing::TempDir data, keys;
  WriteFile(data.path() + "/secure/weights.bin", "secret bytes");
  ASSERT_NE(testing::GenerateRsaKey(keys.path()), "");
  std::string error;
  auto server = GcsTestServer::Start({.data_dir = data.path(),
                                      .extra_args = {"--require-auth", "--token-public-key", keys.path() + "/key.pem"}},
                                     &error);
  ASSERT_NE(server, nullptr) << error;
  testing::WriteServiceAccountKey(keys.path() + "/sa.json", keys.path() + "/key.pem", server->endpoint() + "/token");
  auto mount = TensorfsMount::Start(
      "gs://secure", {"-o", "endpoint=" + server->endpoint() + ",key_file=" + keys.path() + "/sa.json"}, &error);
  ASSERT_NE(mount, nullptr) << error;
  EXPECT_EQ(ReadWhole(mount->path() + "/weights.bin"), "secret bytes");
  EXPECT_GE(server->Stats()["token_requests"].get<int>(), 1);
}

}  // namespace
}  // namespace tensorfs

namespace tensorfs {
namespace {

// A loader mmaps a shard through the mount and copies every tensor out (the
// first page, the last page, then the rest, as glibc's memcpy does): the
// server sees no more range requests than the chunk plan has chunks, and no
// byte twice.
TEST(GcsMountPlanTest, MmapLoaderIssuesNoMoreRequestsThanThePlan) {
  testing::TempDir data;
  testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 4, .hidden = 512, .intermediate = 1536,
                          .vocab = 4096, .dtype = Dtype::BF16};
  auto written = testing::WriteCheckpoint(spec, {.num_shards = 1, .dir = data.path() + "/bkt/m"});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  const std::string shard = data.path() + "/bkt/m/model.safetensors";
  const std::string bytes = ReadWhole(shard);
  std::string error;
  auto server = GcsTestServer::Start({.data_dir = data.path()}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto mount = TensorfsMount::Start(
      "gs://bkt/m", {"-o", "anonymous,chunk_size=1M,cache_size=256M,prefetch_window=64M,max_fetches=8,endpoint=" + server->endpoint()},
      &error);
  ASSERT_NE(mount, nullptr) << error;
  ASSERT_TRUE(server->ResetStats());

  auto header = ParseSafetensorsFile("model.safetensors", std::as_bytes(std::span(bytes)));
  ASSERT_TRUE(header.ok());
  auto result = RunCommand("/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/mmap_loader.py " + mount->path() +
                           " --compare " + data.path() + "/bkt/m --min-tensors " +
                           std::to_string(header->tensors.size()) + " --min-bytes " +
                           std::to_string(header->data_size()));
  ASSERT_EQ(result.exit_code, 0) << result.output;

  ChunkPlan plan = ChunkPlan::ForSafetensors(*header, bytes.size(), 256 << 10, 1 << 20);
  auto stats = server->Stats();
  int media = stats["media_requests"].get<int>();
  std::cout << media << " range requests for a plan of " << plan.size() << " chunks\n";
  // The loader also reads the small JSON files once each; and until the first
  // tensor shows a whole-tensor reader, it comes in a few pieces that double.
  EXPECT_LE(media, static_cast<int>(plan.size()) + 4 + 8) << "plan has " << plan.size() << " chunks";
  EXPECT_LE(stats["bytes_served"].get<uint64_t>(), fsys::file_size(shard) + (1 << 20));
  // Every tensor came through the mount, less the file's head (at most one
  // chunk), fetched when the mount started, before the count began.
  EXPECT_GE(stats["bytes_served"].get<uint64_t>(), header->data_size() - (1 << 20));
  EXPECT_GE(bytes.size(), 30u << 20) << "a file large enough to matter";
}

}  // namespace
}  // namespace tensorfs
