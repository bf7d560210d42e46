// Recovering a dead mount point before mounting.
//
// When a FUSE daemon dies without unmounting (SIGKILL, a crash, the OOM killer),
// its mount stays in the mount table and every access that reaches the daemon
// fails with ENOTCONN, "Transport endpoint is not connected" (a stat() of the
// mount point may be answered from the attribute cache; statfs() never is). Mounting again on that directory would
// fail, so a restarted tensorfs (systemd's Restart=on-failure, or a user running
// the same command again) first detaches the dead mount lazily: umount2(2) with
// MNT_DETACH as root, else `fusermount3 -uz` (which checks that the user mounted
// it). A live mount, or a directory that is no mount point, is left alone.
//
// Thread-safety: call from main before mounting; it logs through spdlog.
#ifndef TENSORFS_FS_MOUNT_RECOVERY_H_
#define TENSORFS_FS_MOUNT_RECOVERY_H_

#include <string>

#include "core/util/status.h"

namespace tensorfs {

// True if `mountpoint` was a dead FUSE mount and is now detached; false if there
// was nothing to do; an error, saying what to run, if a dead mount could not be
// detached.
// Looks at /proc/self/mountinfo first and touches the mount point only when a
// FUSE mount is listed there: an automount on it (systemd's x-systemd.automount)
// would otherwise wait for the very mount that is starting.
StatusOr<bool> RecoverDeadMountPoint(const std::string& mountpoint);

// `path` made absolute, with its parent's symbolic links resolved but never
// the last component (a dead mount, or an automount, cannot be looked at):
// how /proc/self/mountinfo names a mount on it.
std::string CanonicalMountPath(const std::string& path);

}  // namespace tensorfs

#endif  // TENSORFS_FS_MOUNT_RECOVERY_H_
