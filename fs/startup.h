// Start-up: the one path from validated options to a mount that serves.
//
// It has three callers, which differ only in who mounts and who owns the
// kernel-side settings (allow_other, read-only, the bdi's readahead):
//
//  - a person, or fstab through mount.tensorfs (maybe behind systemd's
//    x-systemd.automount): tensorfs mounts the directory itself and, unless -f,
//    runs in the background; the command returns once the source is reached;
//  - the systemd unit (tensorfs@.service): the same, in the foreground, with
//    READY=1 sent through sd_notify once the source is reached;
//  - a parent that has opened /dev/fuse, mounted it and hands the descriptor
//    over as /dev/fd/N (a container's privileged helper): tensorfs mounts
//    nothing, needs no privilege, and leaves the kernel settings to the parent.
//    `tensorfs handoff`, `tensorfs gke-sidecar` and tensorfs run as mount-s3
//    by Mountpoint's CSI driver (fs/mount_s3.h, its command line translated
//    into MountOptions first) all end up here.
//
// The order, the same for all three:
//  1. options are validated without touching the mount point or the network;
//  2. the FUSE session is mounted (or the descriptor adopted) and served at
//     once, so the kernel's INIT and the root's attributes are answered before
//     any storage request: nothing before this looks at the mount point, which
//     an automount would hold until this very mount is done;
//  3. the source is listed, retrying transient errors for at most
//     startup_deadline; then --ready-file is written, the background parent
//     exits 0 and systemd hears READY=1. A failure unmounts (a /dev/fd/N mount
//     is the parent's to unmount), prints the reason as the last stderr line
//     (at err priority in the journal), writes it to --error-file, and exits
//     with a status that tells a permanent error from a transient one
//     (fs/exit_status.h).
//
// Thread-safety: called once, from main, before any other thread exists.
#ifndef TENSORFS_FS_STARTUP_H_
#define TENSORFS_FS_STARTUP_H_

#include "core/options/mount_options.h"
#include "fs/exit_status.h"

namespace tensorfs {

// Prints `status`'s message as the start-up failure line, writes it to
// options.error_file if set, and returns the exit status to leave with.
int FailStartup(const MountOptions& options, ExitStatus exit_status, const Status& status);

// Mounts and serves until unmounted or stopped; returns (or exits with) the
// process's exit status. `options` has passed ValidateMountOptions.
int MountAndServe(const MountOptions& options);

}  // namespace tensorfs

#endif  // TENSORFS_FS_STARTUP_H_
