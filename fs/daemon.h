// Daemon: runs the mount in the background the way mount(8) expects: the
// command returns only once the mount is live and its source reached (exit 0)
// or start-up has failed (the child's exit status, see fs/exit_status.h, with
// the reason printed as the last line, at err priority in the journal), never
// leaving a half-mounted directory behind.
//
// Call Start() before any thread exists: it forks. The parent waits for the
// child's verdict; the child carries on and reports with Ready() or Failed().
#ifndef TENSORFS_FS_DAEMON_H_
#define TENSORFS_FS_DAEMON_H_

#include <string_view>

#include "fs/exit_status.h"

namespace tensorfs {

// Prints "tensorfs: MESSAGE" on stderr, with the journal's err priority when
// stderr is the journal: the line that says why start-up failed.
void PrintFatal(std::string_view message);

class Daemon {
 public:
  // Forks; returns only in the child (the parent exits with the child's verdict).
  void Start();
  // The mount is live: the parent exits 0; we start a session of our own and
  // our stdio detaches from the terminal.
  void Ready();
  // Start-up failed: the parent prints `message` and exits with `status`.
  void Failed(ExitStatus status, std::string_view message);

 private:
  int pipe_fd_ = -1;  // write end, in the child; -1 in the foreground
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_DAEMON_H_
