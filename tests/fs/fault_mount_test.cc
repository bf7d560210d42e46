// Real mounts of a gs:// source whose server fails in the ways the test
// server can inject: a read waiting on a server that went away completes once it
// is back, a permanent error gives EIO (the kernel's re-issue of the read
// included) and the mount stays usable, a stalled response is dropped no sooner
// than stall_timeout and retried, and every retry shows in `tensorfs stats` and
// on the Prometheus endpoint, counted by cause. How long each took is printed,
// never asserted: the machine's load decides that, not the code.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <atomic>
#include <cstring>
#include <iostream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"
#include "tests/support/served_data_test.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using testing::GcsTestServer;
using testing::MountStats;
using testing::ReadFile;
using testing::ReadWhole;
using testing::WaitUntil;
using testing::RunCommand;
using testing::TensorfsBinary;
using testing::TensorfsMount;
using Seconds = std::chrono::duration<double>;
using nlohmann::json;

constexpr char kBlob[] = "blob.bin";
constexpr size_t kBlobSize = 4 << 20;

// The Prometheus port of the mounts here: the test's network namespace is its
// own (the test sandbox), so nothing else holds it.
constexpr int kPrometheusPort = 9464;

// One object, served by the test server, whose faults each test injects.
class FaultMountTest : public testing::ServedDataTest<FaultMountTest> {
 public:
  static constexpr char kDataKey[] = "fault_mount_test/blob-4MiB-7";
  static void MakeData(const std::string& dir) { testing::WriteFile(dir + "/faults/" + kBlob, Blob()); }
  static std::string Blob() { return testing::RandomBytes(kBlobSize, 7); }

 protected:
  void SetUp() override {
    ServedDataTest::SetUp();
    blob_ = Blob();
  }

  std::unique_ptr<TensorfsMount> Mount(const std::string& extra) {
    std::string error;
    auto mount = TensorfsMount::Start(
        "gs://faults", {"-o", "anonymous,endpoint=" + server_->endpoint() + "," + extra}, &error);
    EXPECT_NE(mount, nullptr) << error;
    return mount;
  }

  std::string blob_;  // the object's bytes
};

TEST_F(FaultMountTest, ReadWaitingOnADownServerCompletesOnceItReturns) {
  auto mount = Mount("retry_deadline=30,stall_timeout=2");
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->path() + "/" + kBlob;
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  server_->Stop();
  std::string got;
  int err = -1;
  std::atomic<bool> finished{false};
  std::chrono::steady_clock::time_point done;
  std::thread reader([&] {
    err = ReadFile(path, &got);
    done = std::chrono::steady_clock::now();
    finished = true;
  });
  // Refused three times: the read is backing off when the server returns.
  const ::testing::AssertionResult waited = WaitUntil([&] {
    const json stats = MountStats(mount->path());
    return stats.is_object() && stats["retries"]["by_cause"].value("connect", 0) >= 3;
  }, "a third connect retry");
  EXPECT_FALSE(finished.load()) << "the read gave up while the server was down";
  const auto back = std::chrono::steady_clock::now();
  ASSERT_TRUE(server_->Restart());  // returns once the server answers
  reader.join();
  ASSERT_TRUE(waited) << mount->Log();
  ASSERT_EQ(err, 0) << mount->Log();
  EXPECT_TRUE(got == blob_);
  std::cout << "read completed " << Seconds(done - back).count() << " s after the server began to restart\n";
  const json stats = MountStats(mount->path());
  EXPECT_GE(stats["retries"]["by_cause"].value("connect", 0), 3) << stats.dump();
  EXPECT_EQ(stats["reads_failed_eio"], 0);
}

TEST_F(FaultMountTest, PermanentErrorGivesEioAndEveryRetryIsCounted) {
  auto mount = Mount("retry_deadline=3,stall_timeout=2");
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->path() + "/" + kBlob;
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_TRUE(server_->InjectFaults(R"([{"match": {"media": true}, "action": "status", "status": 503, "count": -1}])"));
  const auto start = std::chrono::steady_clock::now();
  std::string got;
  EXPECT_EQ(ReadFile(path, &got), EIO);
  const double took = Seconds(std::chrono::steady_clock::now() - start).count();
  // The kernel reads the bytes again after the first EIO; that read shares the
  // first one's window, so the whole read takes about retry_deadline (3 s).
  std::cout << "EIO after " << took << " s (retry_deadline 3 s)\n";
  const json stats = MountStats(mount->path());
  EXPECT_GE(stats["reads_failed_eio"].get<int>(), 2) << "the kernel read the bytes again: " << stats.dump();
  EXPECT_GE(stats["retries"]["exhausted"].get<int>(), 2) << stats.dump();
  EXPECT_GE(stats["retries"]["by_cause"].value("http_503", 0), 3) << stats.dump();
}

TEST_F(FaultMountTest, StalledResponseIsDroppedNoSoonerThanTheStallTimeoutAndRetried) {
  auto mount = Mount("retry_deadline=30,stall_timeout=2");
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->path() + "/" + kBlob;
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(server_->InjectFaults(
      R"([{"match": {"media": true}, "action": "stall_after", "bytes": 0, "seconds": 10}])"));
  std::vector<char> buf(4096);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(::pread(fd, buf.data(), buf.size(), 1 << 20), 4096) << mount->Log();
  const double took = Seconds(std::chrono::steady_clock::now() - start).count();
  ::close(fd);
  EXPECT_EQ(std::string(buf.data(), buf.size()), blob_.substr(1 << 20, 4096));
  EXPECT_EQ(MountStats(mount->path())["retries"]["by_cause"], json({{"stall", 1}}));
  // The retry warning says how long the response had been silent when it was
  // dropped: at least stall_timeout. A read that sat out the 10 s stall would
  // have counted no retry.
  std::smatch m;
  const std::string log = mount->Log();
  ASSERT_TRUE(std::regex_search(log, m, std::regex("stalled: no bytes for ([0-9.]+) s"))) << log;
  EXPECT_GE(std::stod(m[1]), 2.0);
  EXPECT_GE(took, 2.0);
  std::cout << "dropped after " << m[1] << " s of silence; the read took " << took << " s (stall_timeout 2 s)\n";
}

TEST_F(FaultMountTest, EveryInjectedFaultIsCountedInStatsAndOnThePrometheusEndpoint) {
  const int port = kPrometheusPort;
  auto mount = Mount("retry_deadline=30,stall_timeout=2,prometheus_port=" + std::to_string(port));
  ASSERT_NE(mount, nullptr);
  const std::string path = mount->path() + "/" + kBlob;
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  ASSERT_TRUE(server_->InjectFaults(R"([
      {"match": {"media": true}, "action": "status", "status": 503},
      {"match": {"media": true}, "action": "status", "status": 429},
      {"match": {"media": true}, "action": "reset_after", "bytes": 100000},
      {"match": {"media": true}, "action": "truncate_after", "bytes": 1000},
      {"match": {"media": true}, "action": "stall_after", "bytes": 1000, "seconds": 5}])"));
  std::string got;
  ASSERT_EQ(ReadFile(path, &got), 0) << mount->Log();
  EXPECT_TRUE(got == blob_);

  const json stats = MountStats(mount->path());
  EXPECT_EQ(stats["retries"]["by_cause"],
            json({{"http_503", 1}, {"http_429", 1}, {"reset", 1}, {"truncated", 1}, {"stall", 1}}))
      << stats.dump();
  EXPECT_EQ(stats["retries"]["total"], 5);
  const uint64_t resumed = stats["retries"]["resumed_bytes"].get<uint64_t>();
  EXPECT_GE(resumed, 2000u) << "the truncated and the stalled response kept their bytes";
  EXPECT_EQ(stats["reads_failed_eio"], 0);

  auto text = RunCommand(TensorfsBinary() + " stats " + mount->path());
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("retries                 5 ("));
  EXPECT_THAT(text.output, HasSubstr("http_503 1"));
  EXPECT_THAT(text.output, HasSubstr("stall 1"));
  EXPECT_THAT(text.output, HasSubstr("reads failed with EIO   0"));

  auto scrape = RunCommand("/usr/bin/python3 -c \"import urllib.request; print(urllib.request.urlopen("
                           "'http://127.0.0.1:" + std::to_string(port) + "/metrics').read().decode())\"");
  ASSERT_EQ(scrape.exit_code, 0) << scrape.output;
  EXPECT_THAT(scrape.output, HasSubstr("tensorfs_retries_total{cause=\"http\",code=\"503\"} 1\n"));
  EXPECT_THAT(scrape.output, HasSubstr("tensorfs_retries_total{cause=\"http\",code=\"429\"} 1\n"));
  EXPECT_THAT(scrape.output, HasSubstr("tensorfs_retries_total{cause=\"reset\"} 1\n"));
  EXPECT_THAT(scrape.output, HasSubstr("tensorfs_retries_total{cause=\"truncated\"} 1\n"));
  EXPECT_THAT(scrape.output, HasSubstr("tensorfs_retries_total{cause=\"stall\"} 1\n"));
  EXPECT_THAT(scrape.output, HasSubstr("tensorfs_retries_total{cause=\"connect\"} 0\n"));
  EXPECT_THAT(scrape.output, HasSubstr("tensorfs_resumed_bytes_total " + std::to_string(resumed) + "\n"));
  EXPECT_THAT(scrape.output, HasSubstr("tensorfs_reads_failed_eio_total 0\n"));

  // Five retry warnings within a few seconds: the log says how many it held back.
  ASSERT_TRUE(mount->StopWith(SIGTERM));
  EXPECT_THAT(mount->Log(), HasSubstr("similar warning"));
}

}  // namespace
}  // namespace tensorfs
