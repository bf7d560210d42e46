// tensorfs-test-sandbox COMMAND [ARGS...]
//
// Runs one test (a gtest binary running one test, a Python or shell test) in a
// sandbox of its own, and checks that every tensorfs the test started ended as
// it should. ctest runs every test through it (the gtest binaries re-execute
// themselves under it: see test_main.cc). As root:
//
//   - The test gets private mount, network and PID namespaces. Its mounts are
//     seen by nobody else and go when it ends; its loopback is its own, so a
//     port a test picks is free and nothing else listens there; the sandbox is
//     the init of its PID namespace, so whatever the test started is reaped
//     here, and killed with the namespace when the test ends or ctest kills it
//     at its timeout. The machine is left as the test found it.
//   - /dev/fuse is a private node of mode 0666 (as udev makes it), for the
//     tests that mount as a user other than root; the host's node is untouched.
//   - Sanitizer reports of every process in the sandbox go to files
//     (log_path in ASAN_OPTIONS and UBSAN_OPTIONS); each one is printed at
//     the end and fails the test.
//   - A tensorfs still running when the test's command has ended is given
//     kHangSeconds to finish, then reported as a hang with its threads' stacks
//     and killed: the test fails. A tensorfs that ended with a status other
//     than 0 (the status README promises after an unmount, SIGINT or SIGTERM)
//     fails the test, unless the test declared that end beforehand (see
//     DeclareDaemonEnd in daemon_check.h). A tensorfs the test waited for
//     itself is checked by the test (TensorfsMount does, with the same rules).
//
// The test finds the sandbox's directory in TENSORFS_TEST_SANDBOX: the
// sanitizer logs ("sanitizer.PID") and the declared ends ("declared-ends",
// lines "PID STATUS" with STATUS as waitpid() gives it) are there.
//
// Not root: COMMAND runs as it is, without any of the above.
//
// Exit status: the command's, or 1 when it passed but a check above failed.
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/daemon_check.h"

namespace tensorfs::testing {
namespace {

namespace fsys = std::filesystem;

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "tensorfs-test-sandbox: %s: %s\n", what.c_str(), std::strerror(errno));
  std::_Exit(1);
}

void Note(const std::string& text) { std::fprintf(stderr, "tensorfs-test-sandbox: %s\n", text.c_str()); }

// Adds log_path=PREFIX to the sanitizer options in `var`, keeping the rest.
void AddLogPath(const char* var, const std::string& prefix) {
  const char* old = std::getenv(var);
  std::string value = old != nullptr && *old != '\0' ? std::string(old) + ":" : std::string();
  ::setenv(var, (value + "log_path=" + prefix).c_str(), 1);
}

void BringUpLoopback() {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Die("socket");
  ifreq ifr = {};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) Die("SIOCGIFFLAGS lo");
  ifr.ifr_flags = static_cast<short>(ifr.ifr_flags | IFF_UP | IFF_RUNNING);
  if (::ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) Die("SIOCSIFFLAGS lo");
  ::close(fd);
}

// The namespace's own mounts: private (nothing propagates to the host), a
// /proc of its PID namespace, and a /dev/fuse every user may open.
void SetUpMounts(const std::string& dir) {
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) Die("making / private");
  if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) Die("mounting /proc");
  const std::string dev = dir + "/dev";
  ::mkdir(dev.c_str(), 0755);
  if (::mount("tensorfs-test-dev", dev.c_str(), "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755") != 0) {
    Die("mounting a tmpfs on " + dev);
  }
  const std::string fuse = dev + "/fuse";
  if (::mknod(fuse.c_str(), S_IFCHR | 0666, makedev(10, 229)) != 0 || ::chmod(fuse.c_str(), 0666) != 0) {
    Die("mknod " + fuse);
  }
  if (::access("/dev/fuse", F_OK) == 0 && ::mount(fuse.c_str(), "/dev/fuse", nullptr, MS_BIND, nullptr) != 0) {
    Die("binding " + fuse + " on /dev/fuse");
  }
}

std::string ProcFile(pid_t pid, const char* name) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/" + name, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string CommOf(pid_t pid) {
  std::string comm = ProcFile(pid, "comm");
  while (!comm.empty() && comm.back() == '\n') comm.pop_back();
  return comm;
}

std::string CommandLineOf(pid_t pid) {
  std::string cmdline = ProcFile(pid, "cmdline");
  for (char& c : cmdline) c = c == '\0' ? ' ' : c;
  while (!cmdline.empty() && cmdline.back() == ' ') cmdline.pop_back();
  return cmdline;
}

// Processes of the namespace other than the sandbox itself.
std::vector<pid_t> LivePids() {
  std::vector<pid_t> pids;
  for (const auto& e : fsys::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(name));
    if (pid != ::getpid()) pids.push_back(pid);
  }
  return pids;
}

std::map<pid_t, int> DeclaredEnds(const std::string& dir) {
  std::map<pid_t, int> ends;
  std::ifstream in(dir + "/declared-ends");
  pid_t pid;
  int status;
  while (in >> pid >> status) ends[pid] = status;
  return ends;
}

class Sandbox {
 public:
  explicit Sandbox(std::string dir) : dir_(std::move(dir)) {}

  // Runs the command as the init of the namespace; returns the exit status.
  int Run(char** argv) {
    const pid_t test = ::fork();
    if (test < 0) Die("fork");
    if (test == 0) {
      ::execvp(argv[0], argv);
      Die(std::string("cannot run ") + argv[0]);
    }
    int test_status = 0;
    for (;;) {
      const auto [pid, status] = ReapOne(/*block=*/true);
      if (pid == test) {
        test_status = status;
        break;
      }
    }
    // Every check runs, whatever the others found.
    const bool leftovers_ok = CheckLeftovers();
    const bool ends_ok = CheckEnds();
    const bool reports_ok = CheckSanitizerReports();
    const bool checks_ok = leftovers_ok && ends_ok && reports_ok;
    if (WIFSIGNALED(test_status)) {
      Note(std::string("the test was killed by signal ") + std::to_string(WTERMSIG(test_status)) + " (" +
           strsignal(WTERMSIG(test_status)) + ")");
      return 128 + WTERMSIG(test_status);
    }
    const int code = WEXITSTATUS(test_status);
    if (code != 0) return code;
    return checks_ok ? 0 : 1;
  }

 private:
  struct Ended {
    std::string comm;
    std::string cmdline;
    int status = 0;
  };

  // Waits for a child to end (any of the namespace's processes comes here once
  // its parent is gone), keeping what a tensorfs was and how it ended.
  std::pair<pid_t, int> ReapOne(bool block) {
    siginfo_t info = {};
    if (::waitid(P_ALL, 0, &info, WEXITED | WNOWAIT | (block ? 0 : WNOHANG)) != 0 || info.si_pid == 0) {
      return {0, 0};
    }
    const pid_t pid = info.si_pid;
    const std::string comm = CommOf(pid);  // a zombie keeps its name, not its command line
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) return {0, 0};
    if (IsTensorfsComm(comm)) ended_[pid] = Ended{comm, cmdlines_[pid], status};
    return {pid, status};
  }

  void RememberCommandLines() {
    for (pid_t pid : LivePids()) {
      if (IsTensorfsComm(CommOf(pid)) && !cmdlines_.contains(pid)) cmdlines_[pid] = CommandLineOf(pid);
    }
  }

  // What the test left running. A tensorfs gets kHangSeconds to end; the rest
  // is killed with the namespace (a note, not a failure).
  bool CheckLeftovers() {
    bool ok = true;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kHangSeconds);
    for (;;) {
      RememberCommandLines();
      while (ReapOne(/*block=*/false).first != 0) {
      }
      std::vector<pid_t> daemons;
      for (pid_t pid : LivePids()) {
        if (IsTensorfsComm(CommOf(pid))) daemons.push_back(pid);
      }
      if (daemons.empty()) break;
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t pid : daemons) {
          Note("HANG: " + CommandLineOf(pid) + " (pid " + std::to_string(pid) + ") still runs " +
               std::to_string(kHangSeconds) + " s after the test ended; mounts it serves:\n" + MountsOf(pid) +
               "its threads:\n" + StacksOf(pid));
          ::kill(pid, SIGKILL);
          ok = false;
        }
        while (ReapOne(/*block=*/true).first != 0 && !LivePids().empty()) {
        }
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (pid_t pid : LivePids()) {
      Note("left running by the test, killed: " + CommandLineOf(pid) + " (pid " + std::to_string(pid) + ")");
      ::kill(pid, SIGKILL);
    }
    while (!LivePids().empty() && ReapOne(/*block=*/true).first != 0) {
    }
    return ok;
  }

  bool CheckEnds() {
    bool ok = true;
    const std::map<pid_t, int> declared = DeclaredEnds(dir_);
    for (const auto& [pid, end] : ended_) {
      auto it = declared.find(pid);
      const int want = it == declared.end() ? 0 : it->second;
      if (end.status == want) continue;
      Note("tensorfs pid " + std::to_string(pid) + " (" + (end.cmdline.empty() ? end.comm : end.cmdline) +
           ") ended with " + DescribeWaitStatus(end.status) + ", expected " + DescribeWaitStatus(want));
      ok = false;
    }
    return ok;
  }

  bool CheckSanitizerReports() {
    const std::vector<std::string> reports = SanitizerReports(dir_);
    for (const std::string& report : reports) Note("SANITIZER REPORT:\n" + report);
    return reports.empty();
  }

  const std::string dir_;
  std::map<pid_t, std::string> cmdlines_;  // tensorfs processes seen alive
  std::map<pid_t, Ended> ended_;
};

}  // namespace
}  // namespace tensorfs::testing

int main(int argc, char** argv) {
  using namespace tensorfs::testing;
  if (argc < 2) {
    std::fprintf(stderr, "usage: tensorfs-test-sandbox COMMAND [ARGS...]\n");
    return 2;
  }
  if (::geteuid() != 0 || std::getenv("TENSORFS_TEST_SANDBOX") != nullptr) {
    ::execvp(argv[1], argv + 1);
    Die(std::string("cannot run ") + argv[1]);
  }
  char tmpl[] = "/tmp/tensorfs-sandbox-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) Die("mkdtemp");
  const std::string dir = tmpl;
  int alive[2];
  if (::pipe2(alive, O_CLOEXEC) != 0) Die("pipe");
  if (::unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID) != 0) {
    Die("unshare of mount, network and PID namespaces (every test runs in them: the kernel needs CONFIG_NET_NS "
        "and CONFIG_PID_NS)");
  }
  const pid_t init = ::fork();
  if (init < 0) Die("fork");
  if (init == 0) {
    // The namespace's init: it and everything in the namespace die with the
    // process ctest started, whatever kills that one.
    ::close(alive[1]);
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) Die("PR_SET_PDEATHSIG");
    pollfd parent = {alive[0], POLLIN, 0};
    if (::poll(&parent, 1, 0) > 0) std::_Exit(1);  // already gone
    ::close(alive[0]);
    SetUpMounts(dir);
    BringUpLoopback();
    AddLogPath("ASAN_OPTIONS", dir + "/sanitizer");
    AddLogPath("UBSAN_OPTIONS", dir + "/sanitizer");
    ::setenv("TENSORFS_TEST_SANDBOX", dir.c_str(), 1);
    std::_Exit(Sandbox(dir).Run(argv + 1));
  }
  ::close(alive[0]);
  // ctest's SIGTERM or SIGINT ends the namespace the same way.
  signal(SIGTERM, [](int) { std::_Exit(143); });
  signal(SIGINT, [](int) { std::_Exit(130); });
  int status = 0;
  while (::waitpid(init, &status, 0) < 0 && errno == EINTR) {
  }
  ::umount2((dir + "/dev").c_str(), MNT_DETACH);  // this process shares the namespace's mounts
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}
