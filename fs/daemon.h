// Daemon: runs the mount in the background the way mount(8) expects: the
// command returns only once the mount is live (exit 0) or has failed (exit 1,
// with the reason printed), never leaving a half-mounted directory behind.
//
// Call Start() before any thread exists: it forks. The parent waits for the
// child's verdict; the child carries on and reports with Ready() or Failed().
#ifndef TENSORFS_FS_DAEMON_H_
#define TENSORFS_FS_DAEMON_H_

#include <string_view>

namespace tensorfs {

class Daemon {
 public:
  // Forks; returns only in the child (the parent exits with the child's verdict).
  void Start();
  // The mount is live: the parent exits 0; our stdio detaches from the terminal.
  void Ready();
  // Start-up failed: the parent prints `message` and exits 1.
  void Failed(std::string_view message);

 private:
  int pipe_fd_ = -1;  // write end, in the child; -1 in the foreground
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_DAEMON_H_
