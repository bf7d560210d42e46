// What the documentation (README.md, docs/) promises about a mount, each checked through a real mount and
// the kernel: another user reads an allow_other mount; the mount is
// nosuid,nodev; a tensorfs reading a checkpoint larger than its cache stays
// within cache_size plus 128 MiB and writes nothing to local disk; a dead mount
// point is recovered by a user who is not root; a read waiting on the network
// holds no FUSE thread, so with one worker thread other files still read; a
// single-file checkpoint (model.safetensors, no index) has every view; an
// object deleted under the mount answers ENOENT.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/options/mount_options.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/gcs_test_server.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using testing::GcsTestServer;
using testing::IsMounted;
using testing::CommandResult;
using testing::RandomBytes;
using testing::UnmountOnExit;
using testing::WaitUntil;
using testing::ReadWhole;
using testing::RunCommand;
using testing::SameBytes;
using testing::TempDir;
using testing::TensorfsBinary;
using testing::TensorfsMount;
using testing::WriteFile;

// The unprivileged user the tests act as.
constexpr char kNobody[] = "65534";

// `command` run as user and group 65534 (nobody), without supplementary groups.
std::string AsNobody(const std::string& command) {
  return std::string("setpriv --reuid=") + kNobody + " --regid=" + kNobody + " --clear-groups -- " + command;
}

// Lets nobody read a tree a test made (TempDir is 0700, files 0644).
void OpenToEveryone(const std::string& dir) {
  fsys::permissions(dir, fsys::perms::owner_all | fsys::perms::group_read | fsys::perms::group_exec |
                             fsys::perms::others_read | fsys::perms::others_exec);
  for (const auto& e : fsys::recursive_directory_iterator(dir)) {
    if (e.is_directory()) {
      fsys::permissions(e.path(), fsys::perms::owner_all | fsys::perms::group_read | fsys::perms::group_exec |
                                      fsys::perms::others_read | fsys::perms::others_exec);
    }
  }
}

// Compares `mounted`, read with read() 1 MiB at a time, with `source`.
::testing::AssertionResult SameFileByRead(const std::string& mounted, const std::string& source) {
  int fd = ::open(mounted.c_str(), O_RDONLY);
  if (fd < 0) return ::testing::AssertionFailure() << mounted << ": " << std::strerror(errno);
  int sfd = ::open(source.c_str(), O_RDONLY);
  if (sfd < 0) {
    ::close(fd);
    return ::testing::AssertionFailure() << source << ": " << std::strerror(errno);
  }
  std::vector<char> got(1 << 20), want(1 << 20);
  off_t offset = 0;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  for (;;) {
    const ssize_t n = ::read(fd, got.data(), got.size());
    if (n < 0) {
      result = ::testing::AssertionFailure() << mounted << " at " << offset << ": " << std::strerror(errno);
      break;
    }
    const ssize_t m = ::pread(sfd, want.data(), static_cast<size_t>(std::max<ssize_t>(n, 1)), offset);
    if (n == 0) {
      if (m != 0) result = ::testing::AssertionFailure() << mounted << " ends at " << offset << ", its source later";
      break;
    }
    if (m != n || std::memcmp(got.data(), want.data(), static_cast<size_t>(n)) != 0) {
      result = ::testing::AssertionFailure() << mounted << ": bytes differ within [" << offset << ", " << offset + n
                                             << ")";
      break;
    }
    offset += n;
  }
  ::close(fd);
  ::close(sfd);
  return result;
}

// ---- allow_other, nosuid, nodev ----

TEST(AllowOtherTest, AnotherUserReadsOnlyAnAllowOtherMount) {
  TempDir src;
  WriteFile(src.path() + "/llama/config.json", "{\"model_type\": \"llama\"}\n");
  std::string error;
  auto shared = TensorfsMount::Start(src.path(), {"-o", "allow_other"}, &error);
  ASSERT_NE(shared, nullptr) << error;
  auto result = RunCommand(AsNobody("cat " + shared->path() + "/llama/config.json"));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output, "{\"model_type\": \"llama\"}\n");
  auto listing = RunCommand(AsNobody("ls " + shared->path() + "/llama"));
  EXPECT_EQ(listing.output, "config.json\n");

  // Without it the kernel turns the other user away: the option is what lets
  // them in, not the files' modes.
  auto own = TensorfsMount::Start(src.path(), {}, &error);
  ASSERT_NE(own, nullptr) << error;
  auto refused = RunCommand(AsNobody("cat " + own->path() + "/llama/config.json"));
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.output, HasSubstr("Permission denied"));
}

// Checks the flags of the mount on `path`.
void ExpectReadOnlyNosuidNodev(const std::string& path) {
  struct statvfs st;
  ASSERT_EQ(::statvfs(path.c_str(), &st), 0) << std::strerror(errno);
  EXPECT_NE(st.f_flag & ST_RDONLY, 0u) << "f_flag " << st.f_flag;
  EXPECT_NE(st.f_flag & ST_NOSUID, 0u) << "f_flag " << st.f_flag;
  EXPECT_NE(st.f_flag & ST_NODEV, 0u) << "f_flag " << st.f_flag;
  auto options = RunCommand("awk '$2 == \"" + path + "\" {print $4}' /proc/mounts").output;
  EXPECT_THAT(options, HasSubstr("nosuid")) << options;
  EXPECT_THAT(options, HasSubstr("nodev")) << options;
  // Regular files carry no execute or set-id bits either.
  struct stat file;
  ASSERT_EQ(::stat((path + "/f.txt").c_str(), &file), 0);
  EXPECT_EQ(file.st_mode & (S_IXUSR | S_IXGRP | S_IXOTH | S_ISUID | S_ISGID), 0u) << std::oct << file.st_mode;
}

TEST(MountFlagsTest, MountIsReadOnlyNosuidNodev) {
  TempDir src;
  WriteFile(src.path() + "/f.txt", "x");
  std::string error;
  auto mount = TensorfsMount::Start(src.path(), {}, &error);
  ASSERT_NE(mount, nullptr) << error;
  ExpectReadOnlyNosuidNodev(mount->path());
}

// mount(8) hands the helper suid, dev and exec when an fstab line asks for
// them; the mount is nosuid,nodev all the same. The helper is the binary run
// under the name mount.tensorfs (a link in a temporary directory, not /sbin).
TEST(MountFlagsTest, HelperAskedForSuidAndDevStillMountsNosuidNodev) {
  TempDir src, bin, mnt;
  WriteFile(src.path() + "/f.txt", "x");
  const std::string helper = bin.path() + "/mount.tensorfs";
  ASSERT_EQ(::symlink(TensorfsBinary().c_str(), helper.c_str()), 0) << std::strerror(errno);
  UnmountOnExit unmount{mnt.path()};
  auto result = RunCommand(helper + " " + src.path() + " " + mnt.path() + " -o ro,suid,dev,exec");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_TRUE(IsMounted(mnt.path()));
  ExpectReadOnlyNosuidNodev(mnt.path());
  EXPECT_EQ(RunCommand("fusermount3 -u " + mnt.path()).exit_code, 0);
}

// ---- memory and local disk ----

// A checkpoint of about 170 MB read whole through a mount whose cache is
// 64 MiB: the process's peak resident memory stays within cache_size + 128 MiB
// (README, cache_size), and it writes nothing to local disk. Under
// AddressSanitizer the allocator's quarantine and shadow memory are no part of
// what tensorfs holds: the peak is printed there, not bounded.
TEST(MemoryBoundTest, ReadingACheckpointLargerThanTheCacheStaysWithinTheBoundAndWritesNoDisk) {
  TempDir data;
  testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 4, .hidden = 1024, .intermediate = 4096,
                          .vocab = 8192, .dtype = Dtype::BF16};
  auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = data.path() + "/bkt/llama"});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  constexpr uint64_t kCache = 64ull << 20;
  ASSERT_GT(written->plan.total_size, 2 * kCache) << "the checkpoint must not fit in the cache";
  std::string error;
  auto server = GcsTestServer::Start({.data_dir = data.path()}, &error);
  ASSERT_NE(server, nullptr) << error;
  auto mount = TensorfsMount::Start(
      "gs://bkt", {"-o", "anonymous,cache_size=64M,log_level=error,endpoint=" + server->endpoint()}, &error);
  ASSERT_NE(mount, nullptr) << error;
  const int64_t written_before = testing::ProcField(mount->pid(), "io", "write_bytes");
  ASSERT_GE(written_before, 0) << "no /proc/PID/io";

  uint64_t files = 0;
  for (const auto& [path, size] : written->files) {
    const std::string rel = fsys::relative(path, data.path() + "/bkt").string();
    EXPECT_TRUE(SameFileByRead(mount->path() + "/" + rel, path.string())) << mount->Log();
    ++files;
  }
  EXPECT_GE(files, 3u);

  const int64_t peak_kib = testing::ProcField(mount->pid(), "status", "VmHWM");
  const int64_t written_after = testing::ProcField(mount->pid(), "io", "write_bytes");
  ASSERT_GT(peak_kib, 0);
  const uint64_t peak = static_cast<uint64_t>(peak_kib) << 10;
  std::cout << "peak RSS " << (peak >> 20) << " MiB reading " << (written->plan.total_size >> 20)
            << " MiB of tensors with cache_size=64M; bytes written to disk: " << written_after - written_before
            << "\n";
  EXPECT_EQ(written_after - written_before, 0) << "tensorfs wrote to local disk";
  if (testing::kAddressSanitizer) {
    std::cout << "(AddressSanitizer build: the memory bound is not checked)\n";
  } else {
    EXPECT_LE(peak, kCache + (128ull << 20)) << "peak RSS " << (peak >> 20) << " MiB";
  }
}

// ---- dead mount, not root ----

// README "After a crash": a user who is not root mounts (through fusermount3),
// tensorfs is killed, and the same user's next tensorfs detaches the dead
// mount with fusermount3 -uz and mounts again.
TEST(DeadMountTest, UserWhoIsNotRootRecoversADeadMountPoint) {
  // libfuse opens /dev/fuse itself before it calls fusermount3: udev makes it
  // 0666 on Debian; the test sandbox gives the test such a node of its own.
  struct stat dev;
  ASSERT_EQ(::stat("/dev/fuse", &dev), 0) << std::strerror(errno);
  ASSERT_EQ(dev.st_mode & 0666, 0666u) << "/dev/fuse is " << std::oct << (dev.st_mode & 0777)
                                       << ": users other than root cannot mount; run the test through ctest "
                                          "(the test sandbox gives it a /dev/fuse of mode 0666, as udev makes it)";
  TempDir src, base;
  WriteFile(src.path() + "/llama/model.safetensors", RandomBytes(300000, 3));
  OpenToEveryone(src.path());
  for (const auto& e : fsys::recursive_directory_iterator(src.path())) {
    if (e.is_regular_file()) fsys::permissions(e.path(), fsys::perms::owner_read | fsys::perms::owner_write |
                                                             fsys::perms::group_read | fsys::perms::others_read);
  }
  OpenToEveryone(base.path());
  const std::string mnt = base.path() + "/mnt";
  fsys::create_directory(mnt);
  ASSERT_EQ(::chown(mnt.c_str(), 65534, 65534), 0) << std::strerror(errno);
  UnmountOnExit unmount{mnt};

  const std::string command = TensorfsBinary() + " " + src.path() + " " + mnt;
  auto first = RunCommand(AsNobody(command));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_TRUE(IsMounted(mnt));
  // Without allow_other only the user who mounted may look inside, root included.
  const std::string compare = AsNobody("cmp " + mnt + "/llama/model.safetensors " + src.path() + "/llama/model.safetensors");
  auto same = RunCommand(compare);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  auto owner = RunCommand("ps -o user= -p $(pgrep -f -x '" + command + "')");
  EXPECT_THAT(owner.output, HasSubstr("nobody")) << "the daemon runs as the user who mounted";

  const CommandResult daemon = RunCommand("pgrep -f -x '" + command + "'");
  ASSERT_EQ(daemon.exit_code, 0) << daemon.output;
  testing::DeclareDaemonEnd(std::stoi(daemon.output), testing::KilledBy(SIGKILL));  // on purpose
  ASSERT_EQ(RunCommand("pkill -KILL -f -x '" + command + "'").exit_code, 0);
  ASSERT_TRUE(WaitUntil([&] { return RunCommand("pgrep -f -x '" + command + "'").exit_code != 0; },
                        "the killed daemon to go"));
  // The daemon's threads may still be exiting once pgrep no longer sees it: the
  // connection reads "Software caused connection abort" until it is torn down.
  CommandResult dead;
  ASSERT_TRUE(WaitUntil([&] {
    dead = RunCommand(AsNobody("stat -f " + mnt));
    return dead.exit_code != 0 && dead.output.find("Transport endpoint is not connected") != std::string::npos;
  }, "the dead mount to answer ENOTCONN")) << dead.output;

  auto again = RunCommand(AsNobody(command));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("had died"));
  EXPECT_THAT(again.output, HasSubstr("fusermount3 -uz"));
  same = RunCommand(compare);
  EXPECT_EQ(same.exit_code, 0) << same.output;
  int mounts = 0;
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) mounts += line.find(" " + mnt + " ") != std::string::npos;
  EXPECT_EQ(mounts, 1) << "the dead mount was detached, not stacked under the new one";
  auto unmounted = RunCommand(AsNobody("fusermount3 -u " + mnt));
  EXPECT_EQ(unmounted.exit_code, 0) << unmounted.output;
}

// ---- GCS: reads waiting on the network, deleted objects ----

class GcsPromisesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = RandomBytes(8 << 20, 1);
    b_ = RandomBytes(8 << 20, 2);
    WriteFile(data_.path() + "/bkt/a.bin", a_);
    WriteFile(data_.path() + "/bkt/b.bin", b_);
    WriteFile(data_.path() + "/bkt/c.bin", RandomBytes(1 << 20, 3));
    std::string error;
    server_ = GcsTestServer::Start({.data_dir = data_.path()}, &error);
    ASSERT_NE(server_, nullptr) << error;
  }

  TempDir data_;
  std::string a_, b_;
  std::unique_ptr<GcsTestServer> server_;
};

// One FUSE worker thread. Four readers of a.bin wait on a server that sits on
// every request for it; b.bin still reads, whole, while they wait. Had a
// waiting read held its FUSE thread, the one thread would be taken and b.bin
// would wait for a.bin.
TEST_F(GcsPromisesTest, ReadsWaitingOnTheNetworkHoldNoFuseThread) {
  std::string error;
  auto mount = TensorfsMount::Start(
      "gs://bkt", {"-o", "anonymous,max_threads=1,retry_deadline=120,stall_timeout=300,endpoint=" + server_->endpoint()},
      &error);
  ASSERT_NE(mount, nullptr) << error;
  struct stat st;
  ASSERT_EQ(::stat((mount->path() + "/a.bin").c_str(), &st), 0);
  ASSERT_EQ(::stat((mount->path() + "/b.bin").c_str(), &st), 0);
  ASSERT_TRUE(server_->InjectFaults(
      R"([{"match": {"media": true, "path_regex": "a[.]bin"}, "action": "delay_first_byte", "seconds": 600, "count": -1}])"));

  constexpr int kReaders = 4;
  std::atomic<int> finished{0};
  std::vector<std::string> got(kReaders);
  std::vector<int> errors(kReaders, 0);
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&, i] {
      const size_t offset = static_cast<size_t>(i) * (2 << 20);
      void* buf = std::aligned_alloc(4096, 1 << 20);
      int fd = ::open((mount->path() + "/a.bin").c_str(), O_RDONLY | O_DIRECT);
      if (fd < 0) {
        errors[i] = errno;
      } else {
        const ssize_t n = ::pread(fd, buf, 1 << 20, static_cast<off_t>(offset));
        if (n < 0) errors[i] = errno;
        else got[i].assign(static_cast<const char*>(buf), static_cast<size_t>(n));
        ::close(fd);
      }
      std::free(buf);
      ++finished;
    });
  }
  // The server has the first request for a.bin and sits on it.
  ASSERT_TRUE(WaitUntil([&] {
    const auto stats = server_->Stats();
    return stats.is_object() && stats.value("faults_applied", 0) >= 1;
  }, "the server to hold the first request for a.bin")) << mount->Log();
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(SameFileByRead(mount->path() + "/b.bin", data_.path() + "/bkt/b.bin")) << mount->Log();
  std::cout << "b.bin read in " << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s while a.bin's readers waited\n";
  EXPECT_EQ(finished.load(), 0) << "a reader of a.bin returned while the server sat on its request";

  // The server goes away and comes back: the waiting reads retry and complete.
  server_->Stop();
  ASSERT_TRUE(server_->Restart());
  for (std::thread& t : readers) t.join();
  for (int i = 0; i < kReaders; ++i) {
    EXPECT_EQ(errors[i], 0) << "reader " << i << ": " << std::strerror(errors[i]);
    EXPECT_TRUE(SameBytes(got[i], a_.substr(static_cast<size_t>(i) * (2 << 20), 1 << 20))) << "reader " << i;
  }
}

// README: "A missing object is ENOENT". An object listed when the mount started
// and deleted since answers ENOENT to a read that must fetch it.
TEST_F(GcsPromisesTest, DeletedObjectAnswersEnoent) {
  std::string error;
  auto mount = TensorfsMount::Start("gs://bkt", {"-o", "anonymous,retry_deadline=20,endpoint=" + server_->endpoint()},
                                    &error);
  ASSERT_NE(mount, nullptr) << error;
  const std::string path = mount->path() + "/c.bin";
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0) << "listed when the mount started";
  auto deleted = RunCommand("curl -sS -o /dev/null -w '%{http_code}' -X DELETE " + server_->endpoint() +
                            "/storage/v1/b/bkt/o/c.bin");
  ASSERT_EQ(deleted.output, "204") << deleted.output;
  int fd = ::open(path.c_str(), O_RDONLY);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    char buf[4096];
    if (::read(fd, buf, sizeof buf) < 0) err = errno;
    ::close(fd);
  }
  EXPECT_EQ(err, ENOENT) << std::strerror(err) << "\n" << mount->Log();
  // The other objects still read.
  EXPECT_TRUE(SameFileByRead(mount->path() + "/b.bin", data_.path() + "/bkt/b.bin"));
}

// ---- single-file checkpoints ----

// model.safetensors and no index: every one of the nine views appears and
// equals the numpy reference, and the mmap loader loads the file itself.
TEST(SingleFileCheckpointTest, EveryViewEqualsTheReference) {
  TempDir src;
  testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 2, .hidden = 96, .intermediate = 200,
                          .dtype = Dtype::BF16};
  auto written = testing::WriteCheckpoint(spec, {.num_shards = 1, .dir = src.path() + "/llama"});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  ASSERT_TRUE(fsys::exists(src.path() + "/llama/model.safetensors"));
  ASSERT_FALSE(fsys::exists(src.path() + "/llama/model.safetensors.index.json"));
  const size_t tensors = testing::ModelTensors(spec).size();
  std::string error;
  auto mount = TensorfsMount::Start(src.path(), {}, &error);
  ASSERT_NE(mount, nullptr) << error;
  auto views = RunCommand("/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/check_views.py --mmap-loader --mount " +
                          mount->path() + "/llama --source " + src.path() + "/llama --min-files 1 --min-tensors " +
                          std::to_string(tensors));
  EXPECT_EQ(views.exit_code, 0) << views.output << "\n" << mount->Log();
  EXPECT_THAT(views.output, HasSubstr(": OK"));
  auto loader = RunCommand("/usr/bin/python3 " TENSORFS_SOURCE_DIR "/tests/support/mmap_loader.py " + mount->path() +
                           "/llama --compare " + src.path() + "/llama --min-tensors " + std::to_string(tensors));
  EXPECT_EQ(loader.exit_code, 0) << loader.output;
}

}  // namespace
}  // namespace tensorfs

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using testing::GcsTestServer;
using testing::IsMounted;
using testing::MountStats;
using testing::RunCommand;
using testing::TempDir;
using testing::TensorfsBinary;
using testing::TensorfsMount;
using testing::WriteFile;

// ---- exit statuses (fs/exit_status.h): what a supervisor acts on ----

class ExitStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteFile(data_.path() + "/bkt/models/a.bin", "a");
    std::string error;
    server_ = GcsTestServer::Start({.data_dir = data_.path()}, &error);
    ASSERT_NE(server_, nullptr) << error;
  }
  // `tensorfs SOURCE MNT -o anonymous,endpoint=...,OPTIONS` in the background, as README runs it.
  testing::CommandResult Mount(const std::string& source, const std::string& options = "") {
    return RunCommand(TensorfsBinary() + " " + source + " " + mnt_.path() + " -o anonymous,endpoint=" +
                      server_->endpoint() + (options.empty() ? "" : "," + options));
  }

  TempDir data_, mnt_;
  std::unique_ptr<GcsTestServer> server_;
};

TEST_F(ExitStatusTest, APrefixHoldingNoObjectsExitsFour) {
  const auto result = Mount("gs://bkt/no/such/prefix");
  EXPECT_EQ(result.exit_code, 4) << result.output;
  EXPECT_THAT(result.output, HasSubstr("gs://bkt/no/such/prefix holds no objects: check the prefix"));
  EXPECT_FALSE(IsMounted(mnt_.path()));
}

TEST_F(ExitStatusTest, RefusedCredentialsExitFive) {
  ASSERT_TRUE(server_->InjectFaults(R"([{"match": {"path_regex": "/storage/v1/b/bkt/o"}, "action": "status",
                                        "status": 403, "count": -1}])"));
  const auto result = Mount("gs://bkt/models");
  EXPECT_EQ(result.exit_code, 5) << result.output;
  EXPECT_THAT(result.output, HasSubstr("gs://bkt")) << "the message names the source";
  EXPECT_FALSE(IsMounted(mnt_.path()));
}

TEST_F(ExitStatusTest, ADevFuseThatCannotBeOpenedExitsThree) {
  // The mount's own namespace without the device node: /dev is an empty tmpfs.
  const auto result = RunCommand("unshare --mount --propagation private sh -c 'mount -t tmpfs tmpfs /dev && exec " +
                                 TensorfsBinary() + " gs://bkt/models " + mnt_.path() + " -o anonymous,endpoint=" +
                                 server_->endpoint() + "'");
  EXPECT_EQ(result.exit_code, 3) << result.output;
  EXPECT_THAT(result.output, HasSubstr("/dev/fuse")) << "the message says what is missing";
}

// startup_deadline's message, with its default below the unit's
// TimeoutStartSec, so that tensorfs' own reason reaches the journal rather
// than systemd's timeout.
TEST_F(ExitStatusTest, AServerThatDoesNotAnswerGivesUpAfterStartupDeadlineExitingOne) {
  ASSERT_TRUE(server_->InjectFaults(R"([{"match": {"path_regex": "/storage/v1/b/bkt/o"}, "action": "delay_first_byte",
                                        "seconds": 600, "count": -1}])"));
  const auto result = Mount("gs://bkt/models", "startup_deadline=2");
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_THAT(result.output, ::testing::ContainsRegex("gave up after [0-9]+ s \\(startup_deadline\\): gs://bkt/models "
                                                      "did not answer"));
  EXPECT_FALSE(IsMounted(mnt_.path()));
}

TEST(StartupDeadlineTest, TheDefaultIsBelowTheUnitsTimeoutStartSec) {
  const std::string unit = testing::ReadWhole(TENSORFS_SOURCE_DIR "/packaging/systemd/tensorfs@.service");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(unit, m, std::regex("\nTimeoutStartSec=([0-9]+)s\n"))) << unit;
  const double timeout_start = std::stod(m[1]);
  MountOptions defaults;
  EXPECT_EQ(defaults.startup_deadline_s, 60) << "README's default";
  // Start-up also opens the store and mounts after the listing: a margin.
  EXPECT_LE(defaults.startup_deadline_s + 15, timeout_start);
}

// ---- what the stats and the credentials promise ----

// `tensorfs stats --json`: fetch latency quantiles, cache hits, misses and
// evictions, as a mount that read more than its cache holds counts them.
TEST(StatsPromisesTest, StatsJsonHasLatencyQuantilesAndCacheCounters) {
  TempDir src;
  WriteFile(src.path() + "/a.bin", testing::RandomBytes(2 << 20, 1));
  WriteFile(src.path() + "/b.bin", testing::RandomBytes(8 << 20, 2));
  std::string error;
  auto mount = TensorfsMount::Start(src.path(), {"-o", "cache_size=4M,chunk_size=1M,max_fetches=2,prefetch_window=1M"},
                                    &error);
  ASSERT_NE(mount, nullptr) << error;
  std::string got;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass finds a.bin in tensorfs' cache
    ASSERT_EQ(testing::ReadFile(mount->path() + "/a.bin", &got), 0);
    const int fd = ::open((mount->path() + "/a.bin").c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);  // not the kernel's page cache
    ::close(fd);
  }
  ASSERT_EQ(testing::ReadFile(mount->path() + "/b.bin", &got), 0);  // more than the cache: evictions
  const auto result = RunCommand(TensorfsBinary() + " stats --json " + mount->path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const nlohmann::json stats = nlohmann::json::parse(result.output, nullptr, false);
  ASSERT_TRUE(stats.is_object()) << result.output;
  EXPECT_GT(stats["cache_misses"].get<uint64_t>(), 0u) << result.output;
  EXPECT_GT(stats["cache_hits"].get<uint64_t>(), 0u) << result.output;
  EXPECT_GT(stats["cache_evictions"].get<uint64_t>(), 0u) << result.output;
  const nlohmann::json& latency = stats["fetch_latency"];
  ASSERT_TRUE(latency.is_object()) << result.output;
  EXPECT_GE(latency["count"].get<uint64_t>(), 10u);
  EXPECT_GT(latency["p50"].get<double>(), 0);
  EXPECT_LE(latency["p50"].get<double>(), latency["p90"].get<double>());
  EXPECT_LE(latency["p90"].get<double>(), latency["p99"].get<double>());
}

// -o anonymous sends no credentials, even with a key in the environment.
TEST(CredentialsPromisesTest, AnonymousSendsNoCredentialsWhateverTheEnvironmentHolds) {
  TempDir data, keys;
  WriteFile(data.path() + "/pub/weights.bin", "public bytes");
  ASSERT_NE(testing::GenerateRsaKey(keys.path()), "");
  std::string error;
  auto server = GcsTestServer::Start({.data_dir = data.path()}, &error);
  ASSERT_NE(server, nullptr) << error;
  testing::WriteServiceAccountKey(keys.path() + "/sa.json", keys.path() + "/key.pem", server->endpoint() + "/token");
  auto mount = TensorfsMount::Start("gs://pub", {"-o", "anonymous,endpoint=" + server->endpoint()}, &error,
                                    {"GOOGLE_APPLICATION_CREDENTIALS=" + keys.path() + "/sa.json",
                                     "GCE_METADATA_HOST=" + server->endpoint().substr(7)});
  ASSERT_NE(mount, nullptr) << error;
  EXPECT_EQ(testing::ReadWhole(mount->path() + "/weights.bin"), "public bytes");
  const nlohmann::json stats = server->Stats();
  EXPECT_EQ(stats["token_requests"], 0) << stats.dump();
  EXPECT_EQ(stats["gce_metadata_requests"], 0) << stats.dump();
  EXPECT_EQ(stats["auth_headers"].value("Bearer", -1), 0) << stats.dump();
  EXPECT_GT(stats["auth_headers"].value("none", 0), 0) << stats.dump();
}

// In a pod, tensorfs waits for the metadata server (GKE's Workload Identity)
// through its server errors; the mount then uses its tokens.
TEST(CredentialsPromisesTest, InAPodTheMetadataServerIsWaitedForThroughServerErrors) {
  TempDir data;
  WriteFile(data.path() + "/secure/weights.bin", "secret bytes");
  std::string error;
  auto server = GcsTestServer::Start({.data_dir = data.path(), .extra_args = {"--require-auth"}}, &error);
  ASSERT_NE(server, nullptr) << error;
  ASSERT_TRUE(server->InjectFaults(R"([{"match": {"path_regex": "computeMetadata"}, "action": "status",
                                       "status": 503, "count": 2}])"));
  auto mount = TensorfsMount::Start("gs://secure", {"-o", "endpoint=" + server->endpoint()}, &error,
                                    {"KUBERNETES_SERVICE_HOST=10.0.0.1", "GCE_METADATA_HOST=" +
                                     server->endpoint().substr(7), "GOOGLE_APPLICATION_CREDENTIALS=",
                                     "HOME=" + data.path()});
  ASSERT_NE(mount, nullptr) << error;
  EXPECT_EQ(testing::ReadWhole(mount->path() + "/weights.bin"), "secret bytes");
  EXPECT_GE(server->Stats()["gce_metadata_requests"].get<int>(), 3) << "two refused, then a token";
  EXPECT_THAT(mount->Log(), HasSubstr("answered after 3 probes"));
}

// ---- the kernel's readahead without root ----

// read_ahead= is written to the mount's sysfs file, which only root may do:
// a user's mount says so once and goes on at the kernel's readahead.
TEST(ReadAheadPromisesTest, ReadAheadWithoutRootIsAWarningAndTheMountServes) {
  TempDir src, base;
  WriteFile(src.path() + "/f.txt", "hi");
  OpenToEveryone(src.path());
  OpenToEveryone(base.path());
  const std::string mnt = base.path() + "/mnt";
  std::filesystem::create_directory(mnt);
  ASSERT_EQ(::chown(mnt.c_str(), 65534, 65534), 0) << std::strerror(errno);
  testing::UnmountOnExit unmount{mnt};
  const std::string log = base.path() + "/log";
  // In the foreground, so that the warning, logged once mounted, is kept.
  const std::string command = TensorfsBinary() + " " + src.path() + " " + mnt + " -f -o read_ahead=4M";
  auto started = RunCommand(AsNobody(command) + " >" + log + " 2>&1 &");
  ASSERT_EQ(started.exit_code, 0) << started.output;
  ASSERT_TRUE(testing::WaitUntil([&] { return IsMounted(mnt); }, "the user's mount")) << testing::ReadWhole(log);
  EXPECT_EQ(RunCommand(AsNobody("cat " + mnt + "/f.txt")).output, "hi");
  ASSERT_TRUE(testing::WaitUntil([&] { return testing::ReadWhole(log).find("read_ahead=") != std::string::npos; },
                                 "the read_ahead warning"));
  EXPECT_THAT(testing::ReadWhole(log), HasSubstr("writing it needs root"));
  auto unmounted = RunCommand(AsNobody("fusermount3 -u " + mnt));
  EXPECT_EQ(unmounted.exit_code, 0) << unmounted.output;  // the sandbox checks that it then exits 0
}

// ---- tensorfs inspect gs:// ----

TEST(InspectPromisesTest, InspectOfAGsSourceListsItsTensorsAndLayers) {
  TempDir data;
  testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 2, .hidden = 64, .intermediate = 128,
                          .vocab = 256, .dtype = Dtype::BF16};
  auto written = testing::WriteCheckpoint(spec, {.num_shards = 2, .dir = data.path() + "/bkt/llama"});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  std::string error;
  auto server = GcsTestServer::Start({.data_dir = data.path()}, &error);
  ASSERT_NE(server, nullptr) << error;
  const auto text = RunCommand(TensorfsBinary() + " inspect gs://bkt/llama -o anonymous,endpoint=" + server->endpoint());
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("model.layers.1.self_attn.q_proj.weight"));
  // The JSON report alone on stdout (the log line goes to stderr).
  const auto json = RunCommand("{ " + TensorfsBinary() + " inspect --json gs://bkt/llama -o anonymous,endpoint=" +
                               server->endpoint() + " 2>/dev/null; }");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json report = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_TRUE(report.is_object()) << json.output;
  EXPECT_EQ(report["location"], "gs://bkt/llama");
  EXPECT_EQ(report["ok"], true);
  EXPECT_EQ(report["files"].size(), 2u) << json.output;
  std::vector<std::string> groups;
  for (const auto& g : report["groups"]) groups.push_back(g["prefix"].get<std::string>());
  EXPECT_THAT(groups, ::testing::ElementsAre("model.embed_tokens.", "model.layers.0.", "model.layers.1.",
                                             "model.norm.", "lm_head."));
}

}  // namespace
}  // namespace tensorfs
