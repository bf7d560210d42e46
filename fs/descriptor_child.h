// What `tensorfs handoff` and `tensorfs gke-sidecar` share: a /dev/fuse
// descriptor received on a Unix socket from the privileged parent that opened
// and mounted it, and the child `tensorfs SOURCE /dev/fd/N -f -o OPTIONS` that
// serves it, one child per mount so that one mount's failure leaves the others
// serving. The two commands differ only in the message they expect, where they
// report a failure and when they stop.
//
// The exchange on the socket: the receiver connects; the parent sends its
// message (at most kMaxDescriptorMessage bytes) with the descriptor attached by
// SCM_RIGHTS to its first bytes, and closes the connection: the message ends
// at EOF, within kDescriptorReceiveTimeout.
//
// Thread-safety: ReceiveDescriptor, StartServingChild and WatchServingChild
// work on their own descriptors and may run on several threads at once.
// StartServingChild forks with only async-signal-safe calls between fork and
// exec, so other threads may hold locks meanwhile. ChildProcesses is
// thread-safe.
#ifndef TENSORFS_FS_DESCRIPTOR_CHILD_H_
#define TENSORFS_FS_DESCRIPTOR_CHILD_H_

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

inline constexpr size_t kMaxDescriptorMessage = 1 << 20;
inline constexpr std::chrono::seconds kDescriptorReceiveTimeout{30};

// One received message: its bytes, and the one descriptor that came with them
// (close-on-exec, numbered above stderr so that it can be a child's /dev/fd/N).
struct DescriptorMessage {
  std::string bytes;
  int fd = -1;
};

// Connects to the Unix socket at `path` and receives one message carrying
// exactly one descriptor. Errors say what was wrong, for the parent to fix.
StatusOr<DescriptorMessage> ReceiveDescriptor(const std::string& path);

// `option` as one item of a -o list: a comma inside is written "\,".
std::string OptionListItem(std::string_view option);

// A started child and the read end of the pipe carrying its stdout and stderr.
struct ServingChild {
  pid_t pid = -1;
  int output = -1;
};

// Starts `tensorfs SOURCE /dev/fd/N -f [-o OPTIONS]` (this very binary), N
// being `fd`, which is closed here whatever happens. The child runs with the
// signal mask `mask`.
StatusOr<ServingChild> StartServingChild(const std::string& source, const std::string& options, int fd,
                                         const sigset_t& mask);

// How a child ended.
struct ChildEnd {
  int exit_code = 0;  // when it exited
  int signal = 0;     // when a signal killed it (then exit_code is -1)
  std::string last_line;  // its last non-empty line of output

  bool clean() const { return signal == 0 && exit_code == 0; }
  // "exited with status 4" or "was killed by signal 9 (Killed)".
  std::string How() const;
};

class ChildProcesses;

// Reads the child's output to EOF, handing each line (without its newline) to
// `on_line`, closes the pipe and reaps the child, removing it from `children`
// first: a signal passed on never reaches a process that reused its pid.
ChildEnd WatchServingChild(const ServingChild& child, ChildProcesses& children,
                           const std::function<void(const std::string&)>& on_line);

// The running children, for passing a signal on to all of them.
class ChildProcesses {
 public:
  void Add(pid_t pid) EXCLUDES(mu_);
  void Remove(pid_t pid) EXCLUDES(mu_);
  void Signal(int sig) EXCLUDES(mu_);

 private:
  Mutex mu_;
  std::vector<pid_t> pids_ GUARDED_BY(mu_);
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_DESCRIPTOR_CHILD_H_
