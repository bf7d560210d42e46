#include "fs/descriptor_child.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

namespace tensorfs {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

// Closes a descriptor on scope exit unless released.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ~ScopedFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

// The message's bytes and the descriptors attached to them, until EOF.
struct RawMessage {
  std::string bytes;
  std::vector<int> fds;  // close-on-exec
};

Status ReceiveRaw(int sock, RawMessage& out) {
  const auto deadline = std::chrono::steady_clock::now() + kDescriptorReceiveTimeout;
  char data[64 << 10];
  while (true) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{sock, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      return DeadlineExceededError("no complete message within " + std::to_string(kDescriptorReceiveTimeout.count()) +
                                   " s (the node plugin must send it and close the connection)");
    }
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 8)];
    iovec iov{data, sizeof data};
    msghdr msg = {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnavailableError("receiving the message: " + ErrnoText(errno));
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        out.fds.push_back(fd);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return InvalidArgumentError("the message carried more descriptors than the one expected");
    }
    if (n == 0) return OkStatus();
    out.bytes.append(data, static_cast<size_t>(n));
    if (out.bytes.size() > kMaxDescriptorMessage) {
      return InvalidArgumentError("the message is over " + std::to_string(kMaxDescriptorMessage) + " bytes");
    }
  }
}

}  // namespace

StatusOr<DescriptorMessage> ReceiveDescriptor(const std::string& path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    return InvalidArgumentError("the socket path is longer than " + std::to_string(sizeof addr.sun_path - 1) +
                                " bytes");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ScopedFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (sock.get() < 0) return UnavailableError("socket: " + ErrnoText(errno));
  if (::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    return UnavailableError("cannot connect: " + ErrnoText(errno) + " (is the node plugin listening on it?)");
  }
  RawMessage raw;
  Status received = ReceiveRaw(sock.get(), raw);
  // From here every received descriptor is closed unless handed on.
  std::vector<std::unique_ptr<ScopedFd>> owned;
  for (int fd : raw.fds) owned.push_back(std::make_unique<ScopedFd>(fd));
  RETURN_IF_ERROR(received);
  if (raw.fds.size() != 1) {
    return InvalidArgumentError("the message carried " + std::to_string(raw.fds.size()) +
                                " descriptors; send exactly one, the /dev/fuse descriptor, by SCM_RIGHTS");
  }
  DescriptorMessage message{std::move(raw.bytes), owned[0]->release()};
  if (message.fd <= STDERR_FILENO) {  // /dev/fd/N must not be one of the child's standard streams
    const int moved = ::fcntl(message.fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    ::close(message.fd);
    if (moved < 0) return UnavailableError("fcntl: " + ErrnoText(errno));
    message.fd = moved;
  }
  return message;
}

std::string OptionListItem(std::string_view option) {
  std::string out;
  for (char c : option) {
    if (c == ',') out += '\\';
    out += c;
  }
  return out;
}

StatusOr<ServingChild> StartServingChild(const std::string& source, const std::string& options, int fd,
                                         const sigset_t& mask) {
  ScopedFd owned_fd(fd);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return UnavailableError("pipe: " + ErrnoText(errno));
  ScopedFd read_end(pipe_fds[0]);
  ScopedFd write_end(pipe_fds[1]);
  std::vector<std::string> args = {"tensorfs", source, "/dev/fd/" + std::to_string(fd), "-f"};
  if (!options.empty()) {
    args.push_back("-o");
    args.push_back(options);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return UnavailableError("fork: " + ErrnoText(errno));
  if (pid == 0) {  // only async-signal-safe calls from here to exec
    ::dup2(write_end.get(), STDOUT_FILENO);
    ::dup2(write_end.get(), STDERR_FILENO);
    ::fcntl(fd, F_SETFD, 0);  // the one descriptor the child inherits
    ::sigprocmask(SIG_SETMASK, &mask, nullptr);
    ::execv("/proc/self/exe", argv.data());
    static constexpr char kMessage[] = "tensorfs: cannot run /proc/self/exe\n";
    (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    ::_exit(127);
  }
  return ServingChild{pid, read_end.release()};
}

std::string ChildEnd::How() const {
  if (signal == 0) return "exited with status " + std::to_string(exit_code);
  const char* name = ::strsignal(signal);
  return "was killed by signal " + std::to_string(signal) + (name != nullptr ? " (" + std::string(name) + ")" : "");
}

ChildEnd WatchServingChild(const ServingChild& child, ChildProcesses& children,
                           const std::function<void(const std::string&)>& on_line) {
  ChildEnd end;
  std::string pending;
  auto emit = [&](std::string line) {
    if (!line.empty()) end.last_line = line;
    on_line(line);
  };
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(child.output, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      emit(std::move(line));
    }
  }
  if (!pending.empty()) emit(std::move(pending));
  ::close(child.output);
  // Out of the list before the pid can be reused: wait without reaping first.
  siginfo_t info = {};
  while (::waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
  }
  children.Remove(child.pid);
  int status = 0;
  while (::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status)) {
    end.signal = WTERMSIG(status);
    end.exit_code = -1;
  } else {
    end.exit_code = WEXITSTATUS(status);
  }
  return end;
}

void ChildProcesses::Add(pid_t pid) {
  MutexLock lock(mu_);
  pids_.push_back(pid);
}

void ChildProcesses::Remove(pid_t pid) {
  MutexLock lock(mu_);
  std::erase(pids_, pid);
}

void ChildProcesses::Signal(int sig) {
  MutexLock lock(mu_);
  for (pid_t pid : pids_) ::kill(pid, sig);
}

}  // namespace tensorfs
