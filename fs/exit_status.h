// The exit statuses of `tensorfs SOURCE MOUNTPOINT` (and mount.tensorfs), one
// per kind of start-up failure, so that a supervisor can tell an error that
// retrying will not fix from one it may: tensorfs@.service lists the permanent
// ones in RestartPreventExitStatus=; --help, the man page and docs/ document them.
//
// Thread-safety: pure functions.
#ifndef TENSORFS_FS_EXIT_STATUS_H_
#define TENSORFS_FS_EXIT_STATUS_H_

#include <string_view>

#include "core/util/status.h"

namespace tensorfs {

enum class ExitStatus : int {
  kOk = 0,  // mounted; or, in the foreground, unmounted or stopped by a signal
  // Transient: the source could not be reached within startup_deadline (server
  // down, network not up yet), or the mount ended with an error. Restarting
  // may help.
  kTransient = 1,
  // Permanent: retrying the same command fails the same way.
  kUsage = 2,           // an invalid command line or option
  kMountPoint = 3,      // the mount point (or /dev/fuse, or a /dev/fd/N) cannot be used
  kSourceNotFound = 4,  // the bucket, prefix or local directory does not exist
  kAccessDenied = 5,    // credentials refused, or no permission to read the source
};

// The status for a failure to open or reach the source: by the error's code.
inline ExitStatus SourceExitStatus(const Status& status) {
  switch (status.code()) {
    case ErrorCode::kInvalidArgument:
      return ExitStatus::kUsage;
    case ErrorCode::kNotFound:
      return ExitStatus::kSourceNotFound;
    case ErrorCode::kPermissionDenied:
      return ExitStatus::kAccessDenied;
    default:
      return ExitStatus::kTransient;
  }
}

// What each status means, for --help, the man page and docs/.
struct ExitStatusDoc {
  ExitStatus status;
  std::string_view meaning;
};
inline constexpr ExitStatusDoc kExitStatusDocs[] = {
    {ExitStatus::kOk, "mounted; in the foreground: unmounted, or stopped by a signal"},
    {ExitStatus::kTransient, "the source was not reached within startup_deadline, or the mount failed (transient)"},
    {ExitStatus::kUsage, "an invalid command line or option"},
    {ExitStatus::kMountPoint, "the mount point, /dev/fuse or the /dev/fd/N given cannot be used"},
    {ExitStatus::kSourceNotFound, "the bucket, the prefix or the local directory does not exist"},
    {ExitStatus::kAccessDenied, "credentials refused, or no permission to read the source"},
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_EXIT_STATUS_H_
