#include "fs/daemon.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/util/logging.h"

namespace tensorfs {

void Daemon::Start() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("tensorfs: pipe");
    std::exit(1);
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("tensorfs: fork");
    std::exit(1);
  }
  if (pid > 0) {  // parent: relay the verdict
    ::close(fds[1]);
    std::string verdict;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
      if (n > 0) verdict.append(buf, static_cast<size_t>(n));
    }
    if (verdict == "OK") std::_Exit(0);
    if (verdict.empty()) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      PrintFatal("the background process exited before mounting");
      std::_Exit(static_cast<int>(ExitStatus::kTransient));
    }
    // "STATUS MESSAGE", from Failed().
    int exit_status = static_cast<int>(ExitStatus::kTransient);
    size_t space = verdict.find(' ');
    if (space != std::string::npos) {
      exit_status = std::atoi(verdict.substr(0, space).c_str());
      verdict.erase(0, space + 1);
    }
    PrintFatal(verdict);
    // The child exits with that status once it has said why: reaped here, a
    // failed start leaves no process behind.
    ::waitpid(pid, nullptr, 0);
    std::_Exit(exit_status);
  }
  ::close(fds[0]);
  pipe_fd_ = fds[1];
  // The child stays in the caller's process group until the mount is live:
  // systemd runs mount(8), and so this helper, in its own process group, which
  // autofs lets through an x-systemd.automount mount point that is waiting for
  // this very mount. In a session of its own, mounting there would wait on it.
}

void Daemon::Ready() {
  if (pipe_fd_ < 0) return;
  (void)!::write(pipe_fd_, "OK", 2);
  ::close(pipe_fd_);
  pipe_fd_ = -1;
  ::setsid();  // detached from the caller's terminal and process group
  if (::chdir("/") != 0) return;
  int null_fd = ::open("/dev/null", O_RDWR);
  if (null_fd >= 0) {
    ::dup2(null_fd, STDIN_FILENO);
    ::dup2(null_fd, STDOUT_FILENO);
    // Started by systemd (a mount unit runs mount(8), which runs us), stderr is
    // the journal: keep logging there. Otherwise nobody reads it any more.
    if (!FdIsJournalStream(STDERR_FILENO)) ::dup2(null_fd, STDERR_FILENO);
    if (null_fd > STDERR_FILENO) ::close(null_fd);
  }
}

void PrintFatal(std::string_view message) {
  // In the journal, at err priority: `journalctl -p err` shows why a start failed.
  const char* priority = FdIsJournalStream(STDERR_FILENO) ? "<3>" : "";
  std::fprintf(stderr, "%stensorfs: %.*s\n", priority, static_cast<int>(message.size()), message.data());
  std::fflush(stderr);
}

void Daemon::Failed(ExitStatus status, std::string_view message) {
  if (pipe_fd_ < 0) return;
  std::string verdict = std::to_string(static_cast<int>(status)) + " " + std::string(message);
  (void)!::write(pipe_fd_, verdict.data(), verdict.size());
  ::close(pipe_fd_);
  pipe_fd_ = -1;
}

}  // namespace tensorfs
