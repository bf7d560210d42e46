// Real mounts: the tensorfs binary serves a generated checkpoint directory and
// the tests read it through the kernel with read(), mmap and ordinary tools.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <iostream>
#include <sstream>
#include <thread>

#include "core/engine/read_trace.h"
#include "core/options/mount_options.h"
#include "tests/support/checkpoint_gen.h"
#include "tests/support/mount_fixture.h"

namespace tensorfs {
namespace {

namespace fsys = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadWhole;
using testing::RunCommand;
using testing::TensorfsBinary;
using testing::TensorfsMount;

// Relative paths of every regular file under `root`.
std::vector<std::string> FilesUnder(const std::string& root) {
  std::vector<std::string> files;
  for (const auto& e : fsys::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) files.push_back(fsys::relative(e.path(), root).string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class MountTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    source_ = testing::SharedData("mount_test/llama-4x128-broken-readme", [](const std::string& dir) {
      testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 4, .hidden = 128, .intermediate = 384,
                              .vocab = 1000, .dtype = Dtype::BF16};
      auto written = testing::WriteCheckpoint(spec, {.num_shards = 3, .dir = dir + "/llama"});
      ASSERT_TRUE(written.ok()) << written.status().ToString();
      // Beside the checkpoint: a corrupt shard and a plain file at the top.
      std::string corrupt = testing::BuildSafetensorsFile({{.name = "w", .dtype = Dtype::F32, .shape = {4}}});
      corrupt[0] = '\x7f';  // header length far beyond the file
      corrupt[5] = '\x01';
      fsys::create_directories(dir + "/broken");
      std::ofstream(dir + "/broken/model.safetensors", std::ios::binary) << corrupt;
      std::ofstream(dir + "/README.txt") << "a checkpoint\n";
    });
  }
  void SetUp() override {
    std::string error;
    // The plain files only: the views have their own tests (views_mount_test).
    mount_ = TensorfsMount::Start(source_, {"-o", "views=none"}, &error);
    ASSERT_NE(mount_, nullptr) << error;
  }
  std::string Src(const std::string& rel) const { return source_ + "/" + rel; }
  std::string Mnt(const std::string& rel) const { return mount_->path() + "/" + rel; }

  inline static std::string source_;  // shared, read-only
  std::unique_ptr<TensorfsMount> mount_;
};

TEST_F(MountTest, ReadMatchesSourceForEveryFile) {
  std::vector<std::string> files = FilesUnder(source_);
  ASSERT_GE(files.size(), 8u);
  for (const std::string& rel : files) {
    int fd = ::open(Mnt(rel).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << rel;
    std::string got;
    std::vector<char> buf(3 << 20);  // more than one kernel request per read()
    ssize_t n;
    while ((n = ::read(fd, buf.data(), buf.size())) > 0) got.append(buf.data(), static_cast<size_t>(n));
    ASSERT_EQ(n, 0) << rel << ": " << std::strerror(errno);
    ::close(fd);
    EXPECT_EQ(got, ReadWhole(Src(rel))) << rel;
  }
}

TEST_F(MountTest, MmapMatchesSourceForEveryFile) {
  for (const std::string& rel : FilesUnder(source_)) {
    std::string expected = ReadWhole(Src(rel));
    int fd = ::open(Mnt(rel).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0) << rel;
    void* map = ::mmap(nullptr, expected.size(), PROT_READ, MAP_SHARED, fd, 0);
    ASSERT_NE(map, MAP_FAILED) << rel;
    EXPECT_EQ(std::memcmp(map, expected.data(), expected.size()), 0) << rel;
    ::munmap(map, expected.size());
    ::close(fd);
  }
}

TEST_F(MountTest, ReadsAtRandomOffsetsMatch) {
  std::string rel = "llama/model-00002-of-00003.safetensors";
  std::string expected = ReadWhole(Src(rel));
  int fd = ::open(Mnt(rel).c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    size_t off = rng() % (expected.size() + 100);
    size_t len = 1 + rng() % (2 << 20);
    std::string buf(len, '\0');
    ssize_t n = ::pread(fd, buf.data(), len, static_cast<off_t>(off));
    size_t want = off >= expected.size() ? 0 : std::min(len, expected.size() - off);
    ASSERT_EQ(n, static_cast<ssize_t>(want)) << "offset " << off << " length " << len;
    EXPECT_EQ(buf.substr(0, want), expected.substr(std::min(off, expected.size()), want));
  }
  ::close(fd);
}

TEST_F(MountTest, StatAgreesWithSource) {
  for (const std::string& rel : FilesUnder(source_)) {
    struct stat src, mnt;
    ASSERT_EQ(::stat(Src(rel).c_str(), &src), 0);
    ASSERT_EQ(::stat(Mnt(rel).c_str(), &mnt), 0) << rel;
    EXPECT_TRUE(S_ISREG(mnt.st_mode)) << rel;
    EXPECT_EQ(mnt.st_mode & 0777, 0444u) << rel;
    EXPECT_EQ(mnt.st_size, src.st_size) << rel;
    EXPECT_EQ(mnt.st_mtim.tv_sec, src.st_mtim.tv_sec) << rel;
  }
  struct stat dir;
  ASSERT_EQ(::stat(Mnt("llama").c_str(), &dir), 0);
  EXPECT_TRUE(S_ISDIR(dir.st_mode));
}

TEST_F(MountTest, FindAndLsAgreeWithSource) {
  auto listing = [](const std::string& root) {
    return RunCommand("cd " + root + " && find . -printf '%y %s %p\\n' | grep -v '^d' | sort").output +
           RunCommand("cd " + root + " && find . -type d | sort").output;
  };
  EXPECT_EQ(listing(mount_->path()), listing(source_));
  auto sizes = [](const std::string& dir) {
    return RunCommand("ls -l " + dir + " | awk 'NR>1 {print $5, $9}'").output;
  };
  EXPECT_EQ(sizes(Mnt("llama")), sizes(Src("llama")));
}

TEST_F(MountTest, WritesFailWithReadOnlyError) {
  auto expect_erofs = [](int rc, const char* what) {
    EXPECT_EQ(rc, -1) << what;
    EXPECT_EQ(errno, EROFS) << what << ": " << std::strerror(errno);
  };
  expect_erofs(::open(Mnt("README.txt").c_str(), O_WRONLY), "open for writing");
  expect_erofs(::open(Mnt("README.txt").c_str(), O_RDWR), "open read-write");
  expect_erofs(::open(Mnt("new.txt").c_str(), O_WRONLY | O_CREAT, 0644), "create");
  expect_erofs(::mkdir(Mnt("newdir").c_str(), 0755), "mkdir");
  expect_erofs(::unlink(Mnt("README.txt").c_str()), "unlink");
  expect_erofs(::rename(Mnt("README.txt").c_str(), Mnt("x.txt").c_str()), "rename");
  expect_erofs(::truncate(Mnt("README.txt").c_str(), 0), "truncate");
  expect_erofs(::chmod(Mnt("README.txt").c_str(), 0777), "chmod");
  expect_erofs(::symlink("README.txt", Mnt("link").c_str()), "symlink");
  EXPECT_EQ(ReadWhole(Src("README.txt")), "a checkpoint\n");
}

TEST_F(MountTest, MissingNameIsNotFound) {
  struct stat st;
  EXPECT_EQ(::stat(Mnt("llama/nope.safetensors").c_str(), &st), -1);
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(MountTest, CorruptSafetensorsIsReadableAsPlainFileAndInspectNamesProblem) {
  EXPECT_EQ(ReadWhole(Mnt("broken/model.safetensors")), ReadWhole(Src("broken/model.safetensors")));
  auto result = RunCommand(TensorfsBinary() + " inspect " + Mnt("broken"));
  EXPECT_EQ(result.exit_code, 2) << result.output;
  EXPECT_THAT(result.output, HasSubstr("model.safetensors"));
  EXPECT_THAT(result.output, HasSubstr("100000000")) << "the limit the header length breaks";
}

TEST_F(MountTest, InspectThroughMountShowsTensorsAndLayers) {
  auto text = RunCommand(TensorfsBinary() + " inspect " + Mnt("llama"));
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("model.layers.3.mlp.down_proj.weight"));
  EXPECT_THAT(text.output, HasSubstr("BF16"));
  EXPECT_THAT(text.output, HasSubstr("lm_head."));
  auto json = RunCommand(TensorfsBinary() + " inspect --json " + Mnt("llama") +
                         " | /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d[\"tensors\"]))'");
  EXPECT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(std::stoi(json.output), 4 * 9 + 3);
}

TEST_F(MountTest, StatfsReportsReadOnly) {
  struct statvfs st;
  ASSERT_EQ(::statvfs(mount_->path().c_str(), &st), 0) << std::strerror(errno);
  EXPECT_NE(st.f_flag & ST_RDONLY, 0u) << "f_flag " << st.f_flag;
  EXPECT_THAT(RunCommand("stat -f -c '%T' " + mount_->path()).output, HasSubstr("fuse"));
  // The mount's own options in /proc/mounts (the fourth field) start with ro.
  auto options = RunCommand("awk '$2 == \"" + mount_->path() + "\" {print $4}' /proc/mounts").output;
  EXPECT_EQ(options.substr(0, 3), "ro,") << options;
}

// Stops the mount with `sig`; the 60 s only catch a hang, the time it took is
// printed.
void ExpectSignalUnmounts(TensorfsMount& mount, int sig) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(mount.StopWith(sig));  // exit status 0 and the mount gone, or what went wrong
  std::cout << "unmounted and exited " << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s after signal " << sig << "\n";
  EXPECT_FALSE(testing::IsMounted(mount.path()));
}

TEST_F(MountTest, SigtermUnmountsAndExits) { ExpectSignalUnmounts(*mount_, SIGTERM); }

TEST_F(MountTest, SigintUnmountsAndExits) { ExpectSignalUnmounts(*mount_, SIGINT); }

TEST_F(MountTest, FixtureLeavesNoStaleMount) {
  std::string path = mount_->path();
  mount_.reset();
  EXPECT_FALSE(testing::IsMounted(path));
  // This fixture's mount point only: other tests may be mounting at the same time.
  EXPECT_EQ(RunCommand("grep -c ' " + path + " ' /proc/mounts || true").output, "0\n");
}

// A loader may open its shards from worker threads; what a process reads is
// the process's (its readers share what they show of its slice): the reads
// of a file opened in a thread are traced as its process's, not the thread's.
TEST(ReaderProcessTest, AFileOpenedInAThreadIsReadForItsProcess) {
  testing::TempDir source, traces;
  testing::ModelSpec spec{.arch = testing::Arch::kLlama, .layers = 2, .hidden = 128, .intermediate = 384,
                          .vocab = 1000, .dtype = Dtype::BF16};
  auto written = testing::WriteCheckpoint(spec, {.num_shards = 1, .dir = source.path()});
  ASSERT_TRUE(written.ok()) << written.status().ToString();
  std::string shard;
  for (const auto& e : fsys::directory_iterator(source.path())) {
    if (e.path().extension() == ".safetensors") shard = e.path().filename();
  }
  ASSERT_FALSE(shard.empty());
  const std::string trace = traces.path() + "/reads.trace";
  ::setenv("TENSORFS_TRACE_READS", trace.c_str(), 1);
  std::string error;
  std::unique_ptr<TensorfsMount> mount = TensorfsMount::Start(source.path(), {"-o", "views=none"}, &error);
  ::unsetenv("TENSORFS_TRACE_READS");
  ASSERT_NE(mount, nullptr) << error;
  std::string got;
  std::thread worker([&] { got = ReadWhole(mount->path() + "/" + shard); });
  worker.join();
  EXPECT_EQ(got, ReadWhole(source.path() + "/" + shard));
  mount.reset();  // unmounted: every read is in the trace

  StatusOr<std::vector<TracedRead>> reads = ParseReadTrace(ReadWhole(trace));
  ASSERT_TRUE(reads.ok()) << reads.status().ToString();
  size_t kernel_reads = 0;
  for (const TracedRead& r : *reads) {
    if (!r.kernel || r.object != shard) continue;
    ++kernel_reads;
    EXPECT_NE(r.reader, 0u);
    EXPECT_EQ(r.process, static_cast<uint64_t>(::getpid())) << "reader " << r.reader << " at " << r.offset;
  }
  EXPECT_GT(kernel_reads, 0u);
}

// The command line, without mounting.
TEST(CommandLineTest, BackgroundMountReturnsOnceLive) {
  testing::TempDir src, mnt;
  std::ofstream(src.path() + "/f.txt") << "hi";
  auto result = RunCommand(TensorfsBinary() + " " + src.path() + " " + mnt.path());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_TRUE(testing::IsMounted(mnt.path()));
  EXPECT_EQ(ReadWhole(mnt.path() + "/f.txt"), "hi");
  EXPECT_EQ(RunCommand("fusermount3 -u " + mnt.path()).exit_code, 0);
  EXPECT_FALSE(testing::IsMounted(mnt.path()));
}

TEST(CommandLineTest, MissingSourceFailsWithoutMounting) {
  testing::TempDir mnt;
  auto result = RunCommand(TensorfsBinary() + " /nonexistent/ckpt " + mnt.path());
  EXPECT_EQ(result.exit_code, 4);  // the source does not exist
  EXPECT_THAT(result.output, HasSubstr("/nonexistent/ckpt"));
  EXPECT_FALSE(testing::IsMounted(mnt.path()));
}

TEST(CommandLineTest, MissingMountPointSaysWhatToDo) {
  testing::TempDir src;
  auto result = RunCommand(TensorfsBinary() + " " + src.path() + " /nonexistent/mnt");
  EXPECT_EQ(result.exit_code, 3);  // the mount point cannot be used
  EXPECT_THAT(result.output, HasSubstr("mkdir -p /nonexistent/mnt"));
  auto no_mnt = RunCommand(TensorfsBinary() + " " + src.path());
  EXPECT_EQ(no_mnt.exit_code, 2);  // usage
  EXPECT_THAT(no_mnt.output, HasSubstr("missing MOUNTPOINT"));
}

TEST(CommandLineTest, BadOptionIsNamed) {
  testing::TempDir src, mnt;
  auto result = RunCommand(TensorfsBinary() + " " + src.path() + " " + mnt.path() + " -o allow_other,turbo");
  EXPECT_EQ(result.exit_code, 2);  // usage
  EXPECT_THAT(result.output, HasSubstr("unknown option 'turbo'"));
  auto flag = RunCommand(TensorfsBinary() + " " + src.path() + " " + mnt.path() + " --max-threads=zero");
  EXPECT_EQ(flag.exit_code, 2);
  EXPECT_THAT(flag.output, HasSubstr("max_threads"));
}

TEST(CommandLineTest, HelpDocumentsEveryOption) {
  auto result = RunCommand(TensorfsBinary() + " --help");
  EXPECT_EQ(result.exit_code, 0);
  ASSERT_GE(AllMountOptions().size(), 20u);
  // Every row of the option table, as its flag and with its help line.
  for (const OptionSpec& option : AllMountOptions()) {
    std::string flag = "--" + std::string(option.name);
    std::replace(flag.begin(), flag.end(), '_', '-');
    EXPECT_THAT(result.output, HasSubstr(flag)) << option.name;
    EXPECT_THAT(result.output, HasSubstr(std::string(option.help).substr(0, 30))) << option.name;
  }
  for (const char* other : {"-o", "inspect", "stats"}) EXPECT_THAT(result.output, HasSubstr(other));
}

}  // namespace
}  // namespace tensorfs
