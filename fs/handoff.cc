#include "fs/handoff.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/util/thread_annotations.h"

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
  const auto deadline = std::chrono::steady_clock::now() + kHandoffReceiveTimeout;
  char data[64 << 10];
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{sock, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      return DeadlineExceededError("no complete message within " + std::to_string(kHandoffReceiveTimeout.count()) +
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
    if (out.bytes.size() > kMaxHandoffMessage) {
      return InvalidArgumentError("the message is over " + std::to_string(kMaxHandoffMessage) + " bytes");
    }
  }
}

// An option value as an item of a -o list: a comma inside is written "\,".
std::string EscapeOption(const std::string& option) {
  std::string out;
  for (char c : option) {
    if (c == ',') out += '\\';
    out += c;
  }
  return out;
}

StatusOr<Handoff> ParseMessage(const std::string& bytes) {
  const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return InvalidArgumentError("the message is not a JSON object; send {\"source\": \"gs://bucket/prefix\", "
                                "\"options\": \"name=value,...\"}");
  }
  Handoff h;
  auto source = j.find("source");
  if (source == j.end() || !source->is_string() || source->get<std::string>().empty()) {
    return InvalidArgumentError(
        "the message has no \"source\" string (a local directory, gs://bucket[/prefix] or s3://bucket[/prefix])");
  }
  h.source = source->get<std::string>();
  if (auto options = j.find("options"); options != j.end() && !options->is_null()) {
    if (options->is_string()) {
      h.options = options->get<std::string>();
    } else if (options->is_array()) {
      for (const nlohmann::json& item : *options) {
        if (!item.is_string()) {
          return InvalidArgumentError("\"options\" must be a string or an array of \"name[=value]\" strings");
        }
        h.options += (h.options.empty() ? "" : ",") + EscapeOption(item.get<std::string>());
      }
    } else {
      return InvalidArgumentError("\"options\" must be a string or an array of \"name[=value]\" strings");
    }
  }
  return h;
}

// Writes `text` (one line) to `path` whole: a reader never sees half of it.
void WriteErrorFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "we");
  if (f == nullptr) {
    spdlog::error("cannot write {}: {}", tmp, ErrnoText(errno));
    return;
  }
  std::fprintf(f, "%s\n", text.c_str());
  const bool ok = std::fclose(f) == 0;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) spdlog::error("cannot write {}: {}", path, ErrnoText(errno));
}

std::vector<std::string> SocketsIn(const std::string& dir) {
  std::vector<std::string> sockets;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st;
    if (::lstat(entry.path().c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) sockets.push_back(entry.path().string());
  }
  std::sort(sockets.begin(), sockets.end());
  return sockets;
}

// The children, for passing on signals.
class Children {
 public:
  void Add(pid_t pid) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    pids_.push_back(pid);
  }
  void Remove(pid_t pid) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    std::erase(pids_, pid);
  }
  void Signal(int sig) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (pid_t pid : pids_) ::kill(pid, sig);
  }

 private:
  Mutex mu_;
  std::vector<pid_t> pids_ GUARDED_BY(mu_);
};

// Starts `tensorfs SOURCE /dev/fd/N -f [-o OPTIONS]`, its output on a pipe
// (returned in *output). The descriptor is closed here.
StatusOr<pid_t> StartChild(const Handoff& handoff, const sigset_t& unblock, int* output) {
  ScopedFd fd(handoff.fd);
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) return UnavailableError("pipe: " + ErrnoText(errno));
  ScopedFd read_end(pipe_fds[0]);
  ScopedFd write_end(pipe_fds[1]);
  std::vector<std::string> args = {"tensorfs", handoff.source, "/dev/fd/" + std::to_string(fd.get()), "-f"};
  if (!handoff.options.empty()) {
    args.push_back("-o");
    args.push_back(handoff.options);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) return UnavailableError("fork: " + ErrnoText(errno));
  if (pid == 0) {  // only async-signal-safe calls from here to exec
    ::dup2(write_end.get(), STDOUT_FILENO);
    ::dup2(write_end.get(), STDERR_FILENO);
    ::fcntl(fd.get(), F_SETFD, 0);  // the one descriptor the child inherits
    ::sigprocmask(SIG_SETMASK, &unblock, nullptr);
    ::execv("/proc/self/exe", argv.data());
    static constexpr char kMessage[] = "tensorfs: cannot run /proc/self/exe\n";
    (void)!::write(STDERR_FILENO, kMessage, sizeof kMessage - 1);
    ::_exit(127);
  }
  *output = read_end.release();
  return pid;
}

// Relays a child's output, waits for it to end, and records a failure.
// Returns true if it ended cleanly.
bool WatchChild(pid_t pid, int output, const std::string& name, const std::string& error_file,
                Children& children) {
  std::string last_line;
  std::string pending;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(output, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<size_t>(n));
    for (size_t nl; (nl = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.empty()) last_line = line;
      std::fprintf(stderr, "[%s] %s\n", name.c_str(), line.c_str());
    }
  }
  if (!pending.empty()) {
    last_line = pending;
    std::fprintf(stderr, "[%s] %s\n", name.c_str(), pending.c_str());
  }
  ::close(output);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  children.Remove(pid);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    spdlog::info("{}: the mount has ended", name);
    return true;
  }
  const std::string how = WIFEXITED(status) ? "exited with status " + std::to_string(WEXITSTATUS(status))
                                            : "was killed by signal " + std::to_string(WTERMSIG(status));
  const std::string text = "tensorfs " + how + (last_line.empty() ? "" : ": " + last_line);
  spdlog::error("{}: {}", name, text);
  WriteErrorFile(error_file, text);
  return false;
}

}  // namespace

StatusOr<Handoff> ReceiveHandoff(const std::string& path) {
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
  ASSIGN_OR_RETURN(Handoff handoff, ParseMessage(raw.bytes));
  handoff.fd = owned[0]->release();
  if (handoff.fd <= STDERR_FILENO) {  // /dev/fd/N must not be one of the child's standard streams
    const int moved = ::fcntl(handoff.fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    ::close(handoff.fd);
    if (moved < 0) return UnavailableError("fcntl: " + ErrnoText(errno));
    handoff.fd = moved;
  }
  return handoff;
}

int RunHandoff(const std::string& socket_dir, std::chrono::seconds wait) {
  struct stat st;
  if (::stat(socket_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    std::fprintf(stderr, "tensorfs: handoff: %s is not a directory\n", socket_dir.c_str());
    return 1;
  }
  std::vector<std::string> sockets = SocketsIn(socket_dir);
  const auto give_up = std::chrono::steady_clock::now() + wait;
  while (sockets.empty() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    sockets = SocketsIn(socket_dir);
  }
  if (sockets.empty()) {
    std::fprintf(stderr, "tensorfs: handoff: no socket appeared in %s within %lld s\n", socket_dir.c_str(),
                 static_cast<long long>(wait.count()));
    return 1;
  }

  // Signals go to one thread that passes them on; children get the old mask back.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  // Children is never destroyed: the signal thread may still use it at exit.
  auto* children = new Children();
  std::thread([stop_signals, children] {
    while (true) {
      int sig = 0;
      if (sigwait(&stop_signals, &sig) != 0) continue;
      spdlog::info("handoff: passing signal {} to the mounts", sig);
      children->Signal(sig);
    }
  }).detach();

  bool all_ok = true;
  std::vector<std::thread> watchers;
  std::vector<size_t> started;  // indexes into sockets
  std::vector<char> results(sockets.size(), 0);
  for (size_t i = 0; i < sockets.size(); ++i) {
    const std::string& path = sockets[i];
    const std::string name = std::filesystem::path(path).filename().string();
    const std::string error_file = path + ".error";
    std::remove(error_file.c_str());  // a failure of an earlier run is not this one's
    StatusOr<Handoff> handoff = ReceiveHandoff(path);
    if (!handoff.ok()) {
      spdlog::error("{}: {}", name, handoff.status().message());
      WriteErrorFile(error_file, "handoff: " + handoff.status().message());
      all_ok = false;
      continue;
    }
    spdlog::info("{}: serving {} from descriptor {}", name, handoff->source, handoff->fd);
    int output = -1;
    StatusOr<pid_t> pid = StartChild(*handoff, old_mask, &output);
    if (!pid.ok()) {
      spdlog::error("{}: {}", name, pid.status().message());
      WriteErrorFile(error_file, "handoff: cannot start tensorfs: " + pid.status().message());
      all_ok = false;
      continue;
    }
    children->Add(*pid);
    started.push_back(i);
    watchers.emplace_back([&results, i, pid = *pid, output, name, error_file, children] {
      results[i] = WatchChild(pid, output, name, error_file, *children) ? 1 : 0;
    });
  }
  for (std::thread& t : watchers) t.join();
  for (size_t i : started) all_ok &= results[i] == 1;
  spdlog::info("handoff: every mount has ended");
  return all_ok ? 0 : 1;
}

}  // namespace tensorfs
