#include "tests/support/mount_fixture.h"

#include <fcntl.h>
#include <sys/xattr.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tensorfs::testing {

std::string GenerateRsaKey(const std::string& dir) {
  const std::string path = dir + "/key.pem";
  bool ok = RunCommand("openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out " + path).exit_code == 0;
  return ok ? path : "";
}

void WriteServiceAccountKey(const std::string& path, const std::string& key_pem, const std::string& token_uri) {
  std::string escaped;
  for (char c : ReadWhole(key_pem)) escaped += c == '\n' ? std::string("\\n") : std::string(1, c);
  WriteFile(path, R"({"type": "service_account", "client_email": "loader@test.iam.gserviceaccount.com",
                     "private_key_id": "k1", "private_key": ")" + escaped + R"(",
                     "token_uri": ")" + token_uri + R"("})");
  ::chmod(path.c_str(), 0600);
}

std::string TensorfsBinary() { return TENSORFS_BINARY; }

bool IsMounted(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    if (mount_point == path) return true;
  }
  return false;
}

long ReadAheadKib(const std::string& mountpoint) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) return -1;
  std::ifstream in("/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev)) +
                   "/read_ahead_kb");
  long kib = -1;
  in >> kib;
  return kib;
}

long FuseConnectionSetting(const std::string& mountpoint, const std::string& name) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) return -1;
  const std::string connections = "/sys/fs/fuse/connections";
  if (!IsMounted(connections)) RunCommand("mount -t fusectl fusectl " + connections);
  std::ifstream in(connections + "/" + std::to_string(minor(st.st_dev)) + "/" + name);
  long value = -1;
  in >> value;
  return value;
}

nlohmann::json MountStats(const std::string& mountpoint) {
  std::vector<char> buf(1 << 20);
  const ssize_t n = ::getxattr(mountpoint.c_str(), "user.tensorfs.stats", buf.data(), buf.size());  // fs/stats.h
  if (n < 0) return nlohmann::json();
  return nlohmann::json::parse(buf.data(), buf.data() + n, nullptr, /*allow_exceptions=*/false);
}

std::string ScrapeMetrics(int port) {
  const CommandResult result = RunCommand("curl -sf http://127.0.0.1:" + std::to_string(port) + "/metrics");
  return result.exit_code == 0 ? result.output : "";
}

double MetricSample(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

UnmountOnExit::~UnmountOnExit() {
  if (IsMounted(path)) (void)RunCommand("fusermount3 -u " + path + " || umount -l " + path);
}

TensorfsMount::TensorfsMount(const std::string& mountpoint)
    : path_(mountpoint.empty() ? scratch_.path() + "/mnt" : mountpoint) {
  // Other users reach the mount point through the scratch directory (an
  // allow_other mount, a test acting as nobody).
  ::chmod(scratch_.path().c_str(), 0755);
  std::error_code ec;  // a given mount point exists (and may be a dead mount)
  std::filesystem::create_directories(path_, ec);
}

std::unique_ptr<TensorfsMount> TensorfsMount::Spawn(const std::string& source, const std::string& mountpoint,
                                                    const std::vector<std::string>& args,
                                                    const std::vector<std::string>& env) {
  std::unique_ptr<TensorfsMount> mount(new TensorfsMount(mountpoint));
  const std::string log_path = mount->scratch_.path() + "/log";
  std::vector<std::string> argv_storage = {TensorfsBinary(), source, mount->path(), "-f"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_storage = env;
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (std::string& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);

  const pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  mount->pid_ = pid;
  return mount;
}

std::unique_ptr<TensorfsMount> TensorfsMount::Start(const std::string& source, const std::vector<std::string>& args,
                                                    std::string* error, const std::vector<std::string>& env) {
  std::unique_ptr<TensorfsMount> mount = Spawn(source, "", args, env);
  const auto deadline = std::chrono::steady_clock::now() + kHang;
  while (std::chrono::steady_clock::now() < deadline) {
    if (IsMounted(mount->path())) return mount;
    int status;
    if (::waitpid(mount->pid_, &status, WNOHANG) == mount->pid_) {
      mount->pid_ = -1;
      if (error) *error = "tensorfs ended (" + DescribeWaitStatus(status) + ") before mounting: " + mount->Log();
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (error) *error = "tensorfs did not mount within " + std::to_string(kHangSeconds) + " s: " + mount->Log();
  return nullptr;  // the destructor cleans up
}

std::string TensorfsMount::Log() const { return ReadWhole(scratch_.path() + "/log"); }

::testing::AssertionResult TensorfsMount::WaitEnd(int want, const std::string& why,
                                                  std::chrono::milliseconds timeout) {
  const pid_t pid = pid_;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      const std::string stacks = StacksOf(pid);
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid_ = -1;
      return ::testing::AssertionFailure() << "HANG: tensorfs (pid " << pid << ") had not ended "
                                           << timeout.count() / 1000.0 << " s after " << why
                                           << "; killed. Its threads:\n" << stacks << "Its log:\n" << Log();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
  ::testing::AssertionResult result = ::testing::AssertionSuccess();
  if (status != want) {
    result = ::testing::AssertionFailure() << "tensorfs ended with " << DescribeWaitStatus(status) << " after " << why
                                           << ", expected " << DescribeWaitStatus(want) << ". Its log:\n" << Log();
  }
  for (const std::string& report : SanitizerReports(SandboxDir(), pid)) {
    if (result) result = ::testing::AssertionFailure();
    result << "\nSANITIZER REPORT of tensorfs (pid " << pid << ") " << report;
  }
  return result;
}

::testing::AssertionResult TensorfsMount::StopWith(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return ::testing::AssertionFailure() << "tensorfs is not running";
  ::kill(pid_, sig);
  const std::string why = std::string("signal ") + strsignal(sig);
  if (sig == SIGKILL) return WaitEnd(KilledBy(SIGKILL), why, timeout);
  ::testing::AssertionResult ended = WaitEnd(ExitedWith(0), why, timeout);
  if (ended && IsMounted(path())) return ::testing::AssertionFailure() << "still mounted after " << why;
  return ended;
}

::testing::AssertionResult TensorfsMount::Unmount() {
  if (pid_ <= 0) return ::testing::AssertionFailure() << "tensorfs is not running";
  const CommandResult unmount = RunCommand("fusermount3 -u " + path());
  if (unmount.exit_code != 0) {
    return ::testing::AssertionFailure() << "fusermount3 -u " << path() << ": " << unmount.output;
  }
  return WaitEnd(ExitedWith(0), "fusermount3 -u", kHang);
}

TensorfsMount::~TensorfsMount() {
  if (pid_ > 0 && IsMounted(path())) {
    if (::testing::AssertionResult ended = Unmount(); !ended) ADD_FAILURE() << ended.message();
  }
  if (pid_ > 0) {  // not mounted, or the unmount failed
    if (::testing::AssertionResult ended = StopWith(SIGTERM); !ended) ADD_FAILURE() << ended.message();
  }
  if (IsMounted(path())) {  // a dead mount, left by a test that killed tensorfs
    (void)std::system(("umount -l " + path() + " >/dev/null 2>&1").c_str());
  }
}

}  // namespace tensorfs::testing
