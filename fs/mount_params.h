// What a parent that mounts for tensorfs must apply: the kernel-side settings
// of a mount served through a descriptor (`tensorfs SOURCE /dev/fd/N`).
//
// Who mounts owns the kernel's settings. When tensorfs mounts on a directory
// itself, it sets them all (mount data, read-only, allow_other, the bdi's
// read_ahead_kb). When a parent (a Kubernetes CSI node plugin, mount.fuse3 -o
// drop_privileges) has opened /dev/fuse and called mount(2), tensorfs only
// serves the descriptor, unprivileged: it cannot change the mount afterwards,
// so the parent sets what RenderMountParams() prints (`tensorfs
// --print-mount-params`), and the options that only the kernel mount applies
// (KernelMountOptionsNote) are ignored by tensorfs with one warning.
//
// max_read: tensorfs answers INIT with max_read = FuseServer::kMaxRead and
// opens its session with the same -o max_read, which libfuse requires to agree
// (else INIT fails with EPROTO). The kernel's own max_read is whatever the
// parent's mount data says: any value works (the kernel then sends reads of at
// most that size, and never more than kMaxRead, as INIT also caps max_pages);
// kMaxRead is the value to choose, since smaller reads cost more requests.
//
// Thread-safety: plain functions of their arguments.
#ifndef TENSORFS_FS_MOUNT_PARAMS_H_
#define TENSORFS_FS_MOUNT_PARAMS_H_

#include <sys/types.h>

#include <string>

#include "core/options/mount_options.h"

namespace tensorfs {

// The kernel-side settings tensorfs wants, for a parent to apply.
struct MountParams {
  std::string fstype;      // "fuse.tensorfs"
  unsigned long flags = 0;  // MS_NOSUID | MS_NODEV | MS_RDONLY
  std::string flag_names;  // "MS_NOSUID|MS_NODEV|MS_RDONLY"
  // Mount data without the leading "fd=N,": "rootmode=40000,user_id=U,group_id=G,
  // default_permissions,max_read=1048576" and ",allow_other" when asked for.
  std::string data;
  unsigned read_ahead_kb = 0;  // the bdi's read_ahead_kb
};

// For `options` (allow_other, read_ahead are the ones that matter), with the
// mount owned by `uid`:`gid` (the user that will read it without allow_other).
MountParams MountParamsFor(const MountOptions& options, uid_t uid, gid_t gid);

// `tensorfs --print-mount-params`: KEY=VALUE lines (fstype, flags, data,
// read_ahead_kb) after comment lines saying how to use them.
std::string RenderMountParams(const MountParams& params);

// In descriptor mode: "" if no option that only the kernel mount applies was
// given, else one line naming each such option and what the parent must set
// instead (the option itself is then ignored).
std::string KernelMountOptionsNote(const MountOptions& options);

}  // namespace tensorfs

#endif  // TENSORFS_FS_MOUNT_PARAMS_H_
