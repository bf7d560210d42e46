// tensorfs as a system service: systemd readiness and stop notifications, a
// restart after a crash recovering the dead mount point, SIGTERM in the middle
// of reads, and the Prometheus endpoint of a live mount.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "fs/mount_recovery.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadWhole;
using testing::WriteFile;
using testing::SameBytes;
using testing::IsMounted;
using testing::kHang;
using testing::MetricSample;
using testing::RandomBytes;
using testing::RunCommand;
using testing::ScrapeMetrics;
using testing::UnmountOnExit;
using testing::WaitUntil;
using testing::TempDir;
using testing::TensorfsBinary;
using testing::TensorfsMount;
using Clock = std::chrono::steady_clock;

// Mount points of `path` in /proc/self/mountinfo (a dead mount still counts).
int MountCount(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    if (mount_point == path) ++n;
  }
  return n;
}

// The notification socket systemd would listen on.
class NotifySocket {
 public:
  explicit NotifySocket(const std::string& path) : path_(path) {
    fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~NotifySocket() {
    ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool bound() const { return bound_; }
  // The next datagram, or "" after `timeout`.
  std::string Receive(std::chrono::milliseconds timeout) {
    pollfd p = {fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return "";
    char buf[4096];
    ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  }
  // Receives until a datagram holds `line` (as one of its lines); "" on timeout.
  std::string ReceiveUntil(const std::string& line, std::chrono::milliseconds timeout,
                           std::vector<std::string>* seen) {
    auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      std::string message = Receive(left);
      if (message.empty()) continue;
      seen->push_back(message);
      if (("\n" + message + "\n").find("\n" + line + "\n") != std::string::npos) return message;
    }
    return "";
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
};

TEST(SystemdNotifyTest, ReadyOnlyOnceTheMountAnswersThenStoppingOnSigterm) {
  TempDir src, mnt, run;
  WriteFile(src.path() + "/llama/model.safetensors", RandomBytes(1 << 20, 1));
  NotifySocket notify(run.path() + "/notify");
  ASSERT_TRUE(notify.bound()) << std::strerror(errno);
  auto child = TensorfsMount::Spawn(src.path(), mnt.path(), {}, {"NOTIFY_SOCKET=" + run.path() + "/notify"});

  std::vector<std::string> seen;
  std::string ready = notify.ReceiveUntil("READY=1", kHang, &seen);
  ASSERT_FALSE(ready.empty()) << "no READY=1; log: " << child->Log();
  // At this moment, before anything else: the mount is there and answers.
  EXPECT_TRUE(IsMounted(mnt.path()));
  struct stat st;
  ASSERT_EQ(::stat((mnt.path() + "/llama/model.safetensors").c_str(), &st), 0) << std::strerror(errno);
  EXPECT_EQ(st.st_size, 1 << 20);
  EXPECT_THAT(ready, HasSubstr("STATUS=Serving " + src.path() + " on " + mnt.path()));
  EXPECT_EQ(seen.size(), 1u) << "READY=1 is the first message";
  EXPECT_TRUE(SameBytes(ReadWhole(mnt.path() + "/llama/model.safetensors"), ReadWhole(src.path() + "/llama/model.safetensors")));

  EXPECT_TRUE(child->StopWith(SIGTERM));  // exit status 0, unmounted
  std::string stopping = notify.ReceiveUntil("STOPPING=1", kHang, &seen);
  EXPECT_FALSE(stopping.empty()) << "no STOPPING=1; log: " << child->Log();
  EXPECT_THAT(stopping, HasSubstr("STATUS=Unmounting " + mnt.path()));

  // Under systemd, journald stamps the lines: tensorfs does not.
  const std::string log = child->Log();
  std::string first_line = log.substr(0, log.find('\n'));
  EXPECT_THAT(first_line, ::testing::StartsWith("info ")) << first_line;
}

TEST(SystemdNotifyTest, WithoutNotifySocketNothingBreaks) {
  TempDir src;
  WriteFile(src.path() + "/f.txt", "hi");
  ASSERT_EQ(::unsetenv("NOTIFY_SOCKET"), 0);
  ASSERT_EQ(::unsetenv("JOURNAL_STREAM"), 0);  // as if run from a terminal
  std::string error;
  auto mount = TensorfsMount::Start(src.path(), {}, &error);
  ASSERT_NE(mount, nullptr) << error;
  EXPECT_EQ(ReadWhole(mount->path() + "/f.txt"), "hi");
  EXPECT_TRUE(mount->StopWith(SIGTERM));
  EXPECT_THAT(mount->Log(), ::testing::ContainsRegex("^20[0-9][0-9]-")) << "a terminal's log lines carry the time";
}

TEST(DeadMountTest, StartingAgainAfterSigkillRecoversTheMountPoint) {
  TempDir src;
  WriteFile(src.path() + "/llama/model.safetensors", RandomBytes(300000, 2));
  std::string error;
  auto mount = TensorfsMount::Start(src.path(), {}, &error);
  ASSERT_NE(mount, nullptr) << error;
  const std::string mnt = mount->path();
  ASSERT_EQ(ReadWhole(mnt + "/llama/model.safetensors").size(), 300000u);

  ASSERT_TRUE(mount->StopWith(SIGKILL));  // a killed tensorfs leaves its mount behind
  // A dead mount: what the kernel has to ask the daemon fails. (stat() of the
  // mount point itself may still be answered from the attribute cache.)
  struct statfs sfs;
  ASSERT_EQ(::statfs(mnt.c_str(), &sfs), -1);
  ASSERT_EQ(errno, ENOTCONN) << "Transport endpoint is not connected";
  ASSERT_EQ(::open((mnt + "/llama/model.safetensors").c_str(), O_RDONLY), -1);
  ASSERT_EQ(errno, ENOTCONN);

  UnmountOnExit unmount{mnt};
  auto again = RunCommand(TensorfsBinary() + " " + src.path() + " " + mnt);
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("had died"));
  EXPECT_THAT(again.output, HasSubstr("Transport endpoint is not connected"));
  EXPECT_TRUE(SameBytes(ReadWhole(mnt + "/llama/model.safetensors"), ReadWhole(src.path() + "/llama/model.safetensors")));
  EXPECT_EQ(MountCount(mnt), 1) << "the dead mount was detached, not stacked under the new one";
  EXPECT_EQ(RunCommand("fusermount3 -u " + mnt).exit_code, 0);
  EXPECT_FALSE(IsMounted(mnt));
}

TEST(DeadMountTest, ForegroundRestartRecoversToo) {
  TempDir src;
  WriteFile(src.path() + "/f.txt", "after the crash");
  std::string error;
  auto first = TensorfsMount::Start(src.path(), {}, &error);
  ASSERT_NE(first, nullptr) << error;
  const std::string mnt = first->path();
  ASSERT_TRUE(first->StopWith(SIGKILL));
  // What systemd's Restart=on-failure does: the same foreground command again.
  auto child = TensorfsMount::Spawn(src.path(), mnt, {});
  struct stat st;
  ASSERT_TRUE(WaitUntil([&] { return ::stat((mnt + "/f.txt").c_str(), &st) == 0; }, "the file through the new mount"))
      << child->Log();
  EXPECT_EQ(ReadWhole(mnt + "/f.txt"), "after the crash") << child->Log();
  EXPECT_EQ(MountCount(mnt), 1);
  EXPECT_TRUE(child->StopWith(SIGTERM));
}

TEST(DeadMountTest, LiveMountsAndPlainDirectoriesAreLeftAlone) {
  TempDir src, plain;
  WriteFile(src.path() + "/f.txt", "x");
  std::string error;
  auto mount = TensorfsMount::Start(src.path(), {}, &error);
  ASSERT_NE(mount, nullptr) << error;
  StatusOr<bool> live = RecoverDeadMountPoint(mount->path());
  ASSERT_TRUE(live.ok()) << live.status().ToString();
  EXPECT_FALSE(*live);
  EXPECT_TRUE(IsMounted(mount->path()));
  EXPECT_EQ(ReadWhole(mount->path() + "/f.txt"), "x");
  StatusOr<bool> dir = RecoverDeadMountPoint(plain.path());
  ASSERT_TRUE(dir.ok());
  EXPECT_FALSE(*dir);
  StatusOr<bool> missing = RecoverDeadMountPoint("/nonexistent/mnt");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(*missing);
}

// The working directory of the process running `binary` with exactly the
// arguments `args`; "" while there is none.
std::string CwdOfProcess(const std::string& binary, const std::vector<std::string>& args) {
  std::string want = binary;
  for (const std::string& a : args) want += std::string(1, '\0') + a;
  want += '\0';
  for (const auto& e : fsys::directory_iterator("/proc")) {
    const std::string pid = e.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadWhole("/proc/" + pid + "/cmdline") != want) continue;
    std::error_code ec;
    fsys::path cwd = fsys::read_symlink("/proc/" + pid + "/cwd", ec);
    if (!ec) return cwd.string();
  }
  return "";
}

// The background process changes to /; relative paths given on the command
// line still name what they named.
TEST(CommandLineServiceTest, BackgroundMountWithRelativePathsReadsFiles) {
  TempDir dir;
  WriteFile(dir.path() + "/src/llama/model.safetensors", RandomBytes(12 << 20, 6));  // more than one fetch
  fsys::create_directories(dir.path() + "/mnt");
  auto result = RunCommand("cd " + dir.path() + " && " + TensorfsBinary() + " src/ mnt");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  UnmountOnExit unmount{dir.path() + "/mnt"};
  EXPECT_THAT(RunCommand("grep ' " + dir.path() + "/mnt ' /proc/mounts").output,
              ::testing::StartsWith(dir.path() + "/src "))
      << "the source is shown as an absolute path";
  EXPECT_TRUE(WaitUntil([&] { return CwdOfProcess(TensorfsBinary(), {"src/", "mnt"}) == "/"; },
                        "the background process to go to /"));
  EXPECT_TRUE(SameBytes(ReadWhole(dir.path() + "/mnt/llama/model.safetensors"),
                        ReadWhole(dir.path() + "/src/llama/model.safetensors")));
  EXPECT_EQ(RunCommand("fusermount3 -u " + dir.path() + "/mnt").exit_code, 0);
  EXPECT_FALSE(IsMounted(dir.path() + "/mnt"));
}

// Readers in several threads, each going through the kernel to tensorfs
// (O_DIRECT: no page cache), until told to stop or the mount goes away.
class Readers {
 public:
  Readers(const std::vector<std::string>& files, int threads) {
    for (int t = 0; t < threads; ++t) {
      threads_.emplace_back([this, file = files[static_cast<size_t>(t) % files.size()]] { Loop(file); });
    }
  }
  ~Readers() { Join(); }
  void Join() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  uint64_t bytes() const { return bytes_; }

 private:
  void Loop(const std::string& path) {
    constexpr size_t kBlock = 1 << 20;
    void* buf = std::aligned_alloc(4096, kBlock);
    while (!stop_) {
      int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT);
      if (fd < 0) break;
      off_t off = 0;
      ssize_t n = 0;
      while (!stop_ && (n = ::pread(fd, buf, kBlock, off)) > 0) {
        off += n;
        bytes_ += static_cast<uint64_t>(n);
      }
      ::close(fd);
      if (n < 0) break;  // the mount went away
    }
    std::free(buf);
  }

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> bytes_{0};
  std::vector<std::thread> threads_;
};

TEST(ShutdownTest, SigtermDuringReadsUnmountsAndExits) {
  TempDir src;
  std::vector<std::string> files;
  for (int i = 0; i < 3; ++i) {
    std::string rel = "llama/model-0000" + std::to_string(i + 1) + "-of-00003.safetensors";
    WriteFile(src.path() + "/" + rel, RandomBytes(16 << 20, static_cast<uint64_t>(i)));
    files.push_back(rel);
  }
  std::string error;
  auto mount = TensorfsMount::Start(src.path(), {}, &error);
  ASSERT_NE(mount, nullptr) << error;
  for (std::string& f : files) f = mount->path() + "/" + f;
  Readers readers(files, 6);
  ASSERT_TRUE(WaitUntil([&] { return readers.bytes() >= (32u << 20); }, "the readers to read 32 MiB"));
  auto start = Clock::now();
  EXPECT_TRUE(mount->StopWith(SIGTERM));
  std::cerr << "exited and unmounted after "
            << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count() << " ms\n";
  readers.Join();
  EXPECT_FALSE(IsMounted(mount->path()));
  EXPECT_EQ(MountCount(mount->path()), 0) << "no stale mount";
}

// The Prometheus port of the mounts here: the test's network namespace is its
// own (the test sandbox), so nothing else holds it.
constexpr int kPrometheusPort = 9464;

// The Prometheus endpoint's value of `name`, or -1.
double Scrape(int port, const std::string& name) { return MetricSample(ScrapeMetrics(port), name); }

TEST(ShutdownTest, SigtermDuringSlowGcsReadsUnmountsAndExits) {
  TempDir data;
  std::vector<std::string> files;
  for (int i = 0; i < 3; ++i) {
    std::string rel = "data/part" + std::to_string(i + 1) + ".bin";  // plain files: no header to parse
    WriteFile(data.path() + "/ckpt/" + rel, RandomBytes(8 << 20, static_cast<uint64_t>(10 + i)));
    files.push_back(rel);
  }
  std::string error;
  auto server = testing::GcsTestServer::Start({.data_dir = data.path()}, &error);
  ASSERT_NE(server, nullptr) << error;
  const int port = kPrometheusPort;
  auto mount = TensorfsMount::Start("gs://ckpt",
                                    {"-o", "anonymous,endpoint=" + server->endpoint() +
                                               ",retry_deadline=10,stall_timeout=5,prometheus_port=" +
                                               std::to_string(port)},
                                    &error);
  ASSERT_NE(mount, nullptr) << error;
  for (std::string& f : files) f = mount->path() + "/" + f;
  // From now on the server sits on every download for 10 minutes: reads wait on
  // the network when the signal comes, and an exit that waited for them would
  // come after the 60 s this test allows.
  ASSERT_TRUE(server->InjectFaults(
      R"([{"match": {"media": true}, "action": "delay_first_byte", "seconds": 600, "count": -1}])"));
  Readers readers(files, 4);
  double in_flight = 0;
  ASSERT_TRUE(WaitUntil([&] { return (in_flight = Scrape(port, "tensorfs_fetches_in_flight")) >= 2; },
                        "two store reads in flight"))
      << mount->Log();
  auto start = Clock::now();
  ::testing::AssertionResult stopped = mount->StopWith(SIGTERM);
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  EXPECT_TRUE(stopped) << "with " << in_flight << " store reads in flight";
  std::cerr << "exited and unmounted after " << took << " ms with " << in_flight << " store reads in flight\n";
  readers.Join();  // the mount is gone: their reads have failed
  const std::string path = mount->path();
  mount.reset();
  EXPECT_EQ(MountCount(path), 0) << "no stale mount";
}

TEST(PrometheusMountTest, MetricsAreServedOnLoopbackAndCountReads) {
  TempDir src;
  std::string bytes = RandomBytes(5 << 20, 3);
  WriteFile(src.path() + "/llama/model.safetensors", bytes);
  const int port = kPrometheusPort;
  std::string error;
  auto mount = TensorfsMount::Start(src.path(), {"-o", "prometheus_port=" + std::to_string(port)}, &error);
  ASSERT_NE(mount, nullptr) << error;
  std::string url = "http://127.0.0.1:" + std::to_string(port);

  auto before = RunCommand("curl -sSf " + url + "/metrics");
  ASSERT_EQ(before.exit_code, 0) << before.output << mount->Log();
  for (const char* family :
       {"tensorfs_read_requests_total", "tensorfs_served_bytes_total", "tensorfs_cache_hits_total",
        "tensorfs_cache_misses_total", "tensorfs_cache_evictions_total", "tensorfs_cache_bytes",
        "tensorfs_fetches_total", "tensorfs_prefetches_total", "tensorfs_fetched_bytes_total",
        "tensorfs_fetches_in_flight", "tensorfs_metadata_requests_total", "tensorfs_errors_total",
        "tensorfs_fetch_latency_seconds"}) {
    EXPECT_THAT(before.output, HasSubstr(std::string("# HELP ") + family + " ")) << family;
    EXPECT_THAT(before.output, ::testing::ContainsRegex(std::string("# TYPE ") + family +
                                                        " (counter|gauge|histogram)\n"))
        << family;
  }
  EXPECT_THAT(before.output, HasSubstr("tensorfs_fetch_latency_seconds_bucket{le=\"+Inf\"} "));
  EXPECT_THAT(before.output, HasSubstr("tensorfs_errors_total{kind=\"not_found\"} "));

  ASSERT_TRUE(SameBytes(ReadWhole(mount->path() + "/llama/model.safetensors"), bytes));
  auto after = RunCommand("curl -sSf " + url + "/metrics");
  ASSERT_EQ(after.exit_code, 0) << after.output;
  EXPECT_GT(MetricSample(after.output, "tensorfs_read_requests_total"),
            MetricSample(before.output, "tensorfs_read_requests_total"));
  EXPECT_GE(MetricSample(after.output, "tensorfs_served_bytes_total"),
            MetricSample(before.output, "tensorfs_served_bytes_total") + static_cast<double>(bytes.size()));
  EXPECT_GT(MetricSample(after.output, "tensorfs_fetch_latency_seconds_count"),
            MetricSample(before.output, "tensorfs_fetch_latency_seconds_count"));

  auto other = RunCommand("curl -s -o /dev/null -w '%{http_code}' " + url + "/");
  EXPECT_EQ(other.output, "404");
  auto headers = RunCommand("curl -sSf -D - -o /dev/null " + url + "/metrics");
  EXPECT_THAT(headers.output, HasSubstr("Content-Type: text/plain; version=0.0.4"));
  EXPECT_TRUE(mount->StopWith(SIGTERM));
  EXPECT_NE(RunCommand("curl -sf " + url + "/metrics").exit_code, 0) << "the endpoint goes with the mount";
}

TEST(PrometheusMountTest, PortInUseFailsAtStartWithoutAMount) {
  TempDir src, mnt;
  WriteFile(src.path() + "/f.txt", "x");
  int busy = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(busy, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(busy, 1), 0);
  socklen_t len = sizeof addr;
  ::getsockname(busy, reinterpret_cast<sockaddr*>(&addr), &len);
  std::string port = std::to_string(ntohs(addr.sin_port));

  for (const char* mode : {"", " -f"}) {
    auto result = RunCommand(TensorfsBinary() + " " + src.path() + " " + mnt.path() + mode +
                             " -o prometheus_port=" + port);
    EXPECT_EQ(result.exit_code, 1) << mode << ": " << result.output;
    EXPECT_THAT(result.output, HasSubstr("127.0.0.1:" + port)) << mode;
    EXPECT_THAT(result.output, HasSubstr("already in use")) << mode;
    EXPECT_FALSE(IsMounted(mnt.path())) << mode;
  }
  ::close(busy);
}

// A background mount started under systemd (a mount unit runs mount(8), which
// runs the helper) keeps writing to the journal after detaching; lines carry a
// syslog priority and no timestamp. Elsewhere its output is dropped once mounted.
TEST(LogTest, BackgroundMountKeepsLoggingToTheJournal) {
  TempDir src, mnt, run;
  WriteFile(src.path() + "/f.txt", "x");
  const std::string log = run.path() + "/journal";
  std::ofstream(log).close();
  struct stat st;
  ASSERT_EQ(::stat(log.c_str(), &st), 0);
  std::string stream = std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  UnmountOnExit unmount{mnt.path()};
  auto result = RunCommand("(JOURNAL_STREAM=" + stream + " " + TensorfsBinary() + " " + src.path() + " " +
                           mnt.path() + " 2>>" + log + ")");
  ASSERT_EQ(result.exit_code, 0) << result.output << ReadWhole(log);
  EXPECT_EQ(ReadWhole(mnt.path() + "/f.txt"), "x");
  auto unmounted = RunCommand("fusermount3 -u " + mnt.path());
  ASSERT_EQ(unmounted.exit_code, 0) << unmounted.output;
  ASSERT_TRUE(WaitUntil([&] { return ReadWhole(log).find("unmounted") != std::string::npos; },
                        "\"unmounted\" in the journal"))
      << ReadWhole(log);
  std::string journal = ReadWhole(log);
  EXPECT_THAT(journal, HasSubstr("<6>info mounted " + src.path())) << journal;
  EXPECT_THAT(journal, HasSubstr("<6>info unmounted " + mnt.path())) << "logged after detaching:\n" << journal;
  EXPECT_THAT(journal, ::testing::Not(::testing::ContainsRegex("20[0-9][0-9]-[0-9][0-9]-"))) << journal;

  // Not the journal: after detaching, nothing more is written there.
  TempDir mnt2;
  const std::string plain = run.path() + "/plain";
  UnmountOnExit unmount2{mnt2.path()};
  result = RunCommand("(" + TensorfsBinary() + " " + src.path() + " " + mnt2.path() + " 2>>" + plain + ")");
  ASSERT_EQ(result.exit_code, 0) << ReadWhole(plain);
  unmounted = RunCommand("fusermount3 -u " + mnt2.path());
  ASSERT_EQ(unmounted.exit_code, 0) << unmounted.output;
  // Whatever it logs on the way out, it has logged once it is gone.
  EXPECT_TRUE(WaitUntil([&] { return CwdOfProcess(TensorfsBinary(), {src.path(), mnt2.path()}).empty(); },
                        "the background process to exit after its unmount"));
  EXPECT_THAT(ReadWhole(plain), ::testing::Not(HasSubstr("unmounted")));
}

// A failing read is a warning in the log, but a storm of them is one line a
// second with a count, not one line per request.
TEST(LogTest, FailedReadsWarnAtMostOncePerSecond) {
  TempDir data;
  for (int i = 0; i < 40; ++i) WriteFile(data.path() + "/ckpt/f" + std::to_string(i), RandomBytes(10000, 7));
  std::string error;
  auto server = testing::GcsTestServer::Start({.data_dir = data.path()}, &error);
  ASSERT_NE(server, nullptr) << error;
  // Listings work; every download is refused, so nothing is ever cached.
  ASSERT_TRUE(server->InjectFaults(R"([{"match": {"media": true}, "action": "status", "status": 403, "count": 100000}])"));
  auto mount = TensorfsMount::Start("gs://ckpt", {"-o", "anonymous,endpoint=" + server->endpoint()}, &error);
  ASSERT_NE(mount, nullptr) << error;
  int failed = 0;
  const auto first = Clock::now();
  for (int i = 0; i < 40; ++i) {
    std::string path = mount->path() + "/f" + std::to_string(i);
    int fd = ::open(path.c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << path;
    char buf[100];
    if (::read(fd, buf, sizeof buf) < 0 && errno == EACCES) ++failed;
    ::close(fd);
  }
  EXPECT_EQ(failed, 40) << "every read refused";
  // The count of what was held back comes on its own, without another warning.
  EXPECT_TRUE(WaitUntil([&] { return mount->Log().find("similar warnings held back") != std::string::npos; },
                        "the count of warnings held back"))
      << mount->Log();
  std::string path = mount->path() + "/f0";
  int fd = ::open(path.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << path << ": " << std::strerror(errno);
  char buf[100];
  EXPECT_EQ(::read(fd, buf, sizeof buf), -1);
  ::close(fd);
  // At most one warning line a second: as many as whole seconds went by, plus
  // the first, however slowly the machine ran the 41 reads.
  const double elapsed = std::chrono::duration<double>(Clock::now() - first).count();
  std::string log = mount->Log();
  int warnings = 0;
  std::istringstream lines(log);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find("warning request failed") != std::string::npos) ++warnings;
  }
  // One line, then (a second later, without waiting for another warning) how
  // many were held back; a read after that may bring one more line.
  EXPECT_GE(warnings, 1) << log;
  EXPECT_LE(warnings, 1 + static_cast<int>(elapsed)) << "in " << elapsed << " s:\n" << log;
  std::cout << warnings << " warning lines for 41 failed reads in " << elapsed << " s\n";
  EXPECT_THAT(log, ::testing::ContainsRegex("[0-9]+ similar warnings held back in the last")) << log;
  EXPECT_THAT(log, HasSubstr("gs://ckpt/f")) << "the warning names the object";
}

// Logs reach the journal as they are; nothing secret may be in them, even at
// trace level and through a token refresh.
TEST(LogTest, NoCredentialReachesTheLogAtTraceLevel) {
  TempDir data, keys;
  WriteFile(data.path() + "/secure/a.bin", RandomBytes(200000, 4));
  WriteFile(data.path() + "/secure/b.bin", RandomBytes(200000, 5));
  ASSERT_NE(testing::GenerateRsaKey(keys.path()), "");
  std::string error;
  auto server = testing::GcsTestServer::Start(
      {.data_dir = data.path(), .extra_args = {"--require-auth", "--token-public-key", keys.path() + "/key.pem"}},
      &error);
  ASSERT_NE(server, nullptr) << error;
  testing::WriteServiceAccountKey(keys.path() + "/sa.json", keys.path() + "/key.pem", server->endpoint() + "/token");
  auto mount = TensorfsMount::Start("gs://secure",
                                    {"-o", "endpoint=" + server->endpoint() + ",key_file=" + keys.path() +
                                               "/sa.json,log_level=trace"},
                                    &error);
  ASSERT_NE(mount, nullptr) << error;
  EXPECT_TRUE(SameBytes(ReadWhole(mount->path() + "/a.bin"), ReadWhole(data.path() + "/secure/a.bin")));
  // Revoked tokens draw a 401 and a refresh: the paths that talk about tokens.
  ASSERT_EQ(RunCommand("curl -sf -X POST " + server->endpoint() + "/_control/tokens/revoke").exit_code, 0);
  EXPECT_TRUE(SameBytes(ReadWhole(mount->path() + "/b.bin"), ReadWhole(data.path() + "/secure/b.bin")));
  EXPECT_TRUE(mount->StopWith(SIGTERM));
  std::string log = mount->Log();
  EXPECT_THAT(log, HasSubstr("refreshing the access token")) << "the refresh was logged:\n" << log;
  EXPECT_THAT(log, ::testing::Not(HasSubstr("tok-"))) << "an access token (the server issues tok-...)";
  EXPECT_THAT(log, ::testing::Not(HasSubstr("Bearer ")));
  EXPECT_THAT(log, ::testing::Not(HasSubstr("eyJ"))) << "a signed JWT assertion";
  EXPECT_THAT(log, ::testing::Not(HasSubstr("PRIVATE KEY")));
  EXPECT_THAT(log, ::testing::Not(HasSubstr(ReadWhole(keys.path() + "/key.pem").substr(100, 40)))) << "key material";
}

}  // namespace
}  // namespace tensorfs
