#include "tests/support/daemon_check.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tensorfs::testing {
namespace {

namespace fsys = std::filesystem;

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The output of a shell command line, stdout and stderr together.
std::string Output(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  ::pclose(pipe);
  return out;
}

}  // namespace

bool IsTensorfsComm(const std::string& comm) {
  return comm == "tensorfs" || comm == "mount.tensorfs" || comm == "mount-s3";  // mount-s3: fs/mount_s3.h
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return "signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")" +
           (WCOREDUMP(status) ? ", core dumped" : "");
  }
  return "wait status " + std::to_string(status);
}

int KilledBy(int sig) { return sig & 0x7f; }
int ExitedWith(int code) { return (code & 0xff) << 8; }

std::string StacksOf(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::string out;
  std::error_code ec;
  for (const auto& task : fsys::directory_iterator(proc + "/task", ec)) {
    const std::string t = task.path().string();
    out += "  " + task.path().filename().string() + " " + Trimmed(ReadText(t + "/comm")) + ": waits in " +
           Trimmed(ReadText(t + "/wchan")) + "\n";
    std::istringstream stack(ReadText(t + "/stack"));
    for (std::string line; std::getline(stack, line);) out += "      " + line + "\n";
  }
  if (::access("/usr/bin/gdb", X_OK) == 0) {
    out += Output("timeout 60 /usr/bin/gdb -nx -batch -p " + std::to_string(pid) +
                  " -ex 'thread apply all bt' </dev/null");
  } else {
    out += "  (install gdb for every thread's backtrace)\n";
  }
  return out;
}

std::string MountsOf(pid_t pid) {
  std::string out;
  std::istringstream in(ReadText("/proc/" + std::to_string(pid) + "/mountinfo"));
  for (std::string line; std::getline(in, line);) {
    if (line.find(" - fuse") != std::string::npos) out += "  " + line + "\n";
  }
  return out.empty() ? "  (none)\n" : out;
}

std::string SandboxDir() {
  const char* dir = std::getenv("TENSORFS_TEST_SANDBOX");
  return dir != nullptr ? dir : "";
}

std::vector<std::string> SanitizerReports(const std::string& dir, pid_t pid) {
  std::vector<std::string> reports;
  if (dir.empty()) return reports;
  std::error_code ec;
  for (const auto& e : fsys::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("sanitizer.")) continue;
    if (pid > 0 && name != "sanitizer." + std::to_string(pid)) continue;
    reports.push_back(e.path().string() + ":\n" + ReadText(e.path().string()));
  }
  return reports;
}

void DeclareDaemonEnd(pid_t pid, int status) {
  const std::string dir = SandboxDir();
  if (dir.empty()) return;
  const int fd = ::open((dir + "/declared-ends").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  const std::string line = std::to_string(pid) + " " + std::to_string(status) + "\n";
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace tensorfs::testing
