#include "tests/support/test_util.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <vector>

namespace tensorfs::testing {
namespace {

namespace fsys = std::filesystem;

// Where SharedData keeps what it made: the build tree's, unless the
// environment names another place.
std::string SharedDataRoot() {
  if (const char* root = std::getenv("TENSORFS_TEST_DATA_CACHE"); root != nullptr && *root != '\0') return root;
  return TENSORFS_TEST_DATA_CACHE;
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = "/tmp/tensorfs-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fsys::remove_all(path_, ec);
}

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) result.output.append(buf.data(), n);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string ReadWhole(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int ReadFile(const std::string& path, std::string* out) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  out->clear();
  std::vector<char> buf(1 << 20);
  ssize_t n;
  while ((n = ::read(fd, buf.data(), buf.size())) > 0) out->append(buf.data(), static_cast<size_t>(n));
  const int err = n < 0 ? errno : 0;
  ::close(fd);
  return err;
}

void WriteFile(const std::string& path, const std::string& bytes, mode_t mode) {
  fsys::create_directories(fsys::path(path).parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  ::chmod(path.c_str(), mode);
}

::testing::AssertionResult SameBytes(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return ::testing::AssertionFailure() << "got " << got.size() << " bytes, want " << want.size()
                                       << "; first difference at byte " << i;
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (const uint64_t v = rng(); i < n; ++i) s[i] = static_cast<char>(v >> (8 * (i % 8)));
  return s;
}

int64_t ProcField(pid_t pid, const std::string& file, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::istringstream value(line.substr(field.size() + 1));
      int64_t v = -1;
      value >> v;
      return v;
    }
  }
  return -1;
}

std::string NotRunForKernel(std::string_view feature, std::string_view evidence) {
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = test == nullptr ? "?" : std::string(test->test_suite_name()) + "." + test->name();
  return std::string(kNotRunPrefix) + name + ": needs " + std::string(feature) + " (" + std::string(evidence) + ")";
}

long FuseMaxPagesLimit() {
  std::ifstream in("/proc/sys/fs/fuse/max_pages_limit");
  long pages = 256;  // FUSE_MAX_MAX_PAGES, fixed before the setting existed
  in >> pages;
  return pages;
}

const std::string& SharedData(const std::string& key, const std::function<void(const std::string& dir)>& make) {
  static std::mutex mu;
  static std::map<std::string, std::string> made;  // in this process
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = made.find(key); it != made.end()) return it->second;

  std::string name;
  for (char c : key) name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  const fsys::path root = SharedDataRoot();
  fsys::create_directories(root);
  const std::string dir = (root / name).string();
  // One process makes it; the others wait on the lock and find it done.
  const int lock_fd = ::open((dir + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX) != 0) {
    ADD_FAILURE() << "cannot lock " << dir << ".lock: " << std::strerror(errno);
    std::abort();
  }
  if (!fsys::exists(dir + ".done")) {
    std::error_code ec;
    fsys::remove_all(dir, ec);
    fsys::create_directories(dir);
    make(dir);
    // What failed to be made is made again by the next caller.
    if (!::testing::Test::HasFailure()) std::ofstream(dir + ".done").close();
  }
  ::close(lock_fd);  // releases the lock
  return made.emplace(key, dir).first->second;
}

}  // namespace tensorfs::testing
