#include "tests/support/mount_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace tensorfs::testing {

TempDir::TempDir() {
  std::string tmpl = "/tmp/tensorfs-test-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
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

void WriteFile(const std::string& path, const std::string& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

::testing::AssertionResult SameBytes(const std::string& got, const std::string& want) {
  if (got == want) return ::testing::AssertionSuccess();
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  return ::testing::AssertionFailure() << "got " << got.size() << " bytes, want " << want.size()
                                       << "; first difference at byte " << i;
}

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

std::unique_ptr<TensorfsMount> TensorfsMount::Start(const std::string& source,
                                                    const std::vector<std::string>& args, std::string* error) {
  std::unique_ptr<TensorfsMount> mount(new TensorfsMount());
  std::string log_path = mount->scratch_.path() + "/log";
  std::vector<std::string> argv_storage = {TensorfsBinary(), source, mount->path(), "-f"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);

  pid_t pid = ::fork();
  if (pid == 0) {
    int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  mount->pid_ = pid;
  // 60 s only catch a hang: a loaded machine may take seconds to mount.
  for (int i = 0; i < 1200; ++i) {
    if (IsMounted(mount->path())) return mount;
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      mount->pid_ = -1;
      if (error) *error = "tensorfs exited before mounting: " + mount->Log();
      return nullptr;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (error) *error = "tensorfs did not mount within 60 s: " + mount->Log();
  return nullptr;  // the destructor cleans up
}

std::string TensorfsMount::Log() const {
  std::ifstream in(scratch_.path() + "/log");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool TensorfsMount::StopWith(int sig, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return !IsMounted(path());
  ::kill(pid_, sig);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    int status;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return !IsMounted(path());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TensorfsMount::~TensorfsMount() {
  if (IsMounted(path())) {
    std::string cmd = "fusermount3 -u " + path() + " >/dev/null 2>&1 || fusermount3 -uz " + path() +
                      " >/dev/null 2>&1";
    (void)std::system(cmd.c_str());
  }
  if (pid_ > 0) {
    if (!StopWith(SIGTERM, std::chrono::seconds(5))) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  if (IsMounted(path())) {
    (void)std::system(("umount -l " + path() + " >/dev/null 2>&1").c_str());
  }
}

}  // namespace tensorfs::testing
