// The mount(8) helper: how `mount -t tensorfs SOURCE DIR -o OPTS` and fstab lines
// reach tensorfs. mount(8) runs
//
//   /sbin/mount.tensorfs SOURCE DIR [-sfnvrw] [-N NS] [-o OPTS] [-t tensorfs[.SUBTYPE]]
//
// (the tensorfs binary under another name) and passes along options that are
// mount(8)'s or systemd's business rather than tensorfs's. ParseMountHelperArgs
// turns that command line into a tensorfs -o list, dropping those options:
//
//   dropped silently   ro, defaults, auto, noauto, user, nouser, users, owner,
//                      group, _netdev, nofail, comment=..., x-... (x-systemd.*,
//                      x-gvfs-*), and the generic mount flags exec, noexec, suid,
//                      nosuid, dev, nodev, sync, async, dirsync, atime, noatime,
//                      diratime, nodiratime, relatime, norelatime, strictatime,
//                      nostrictatime, lazytime, nolazytime, iversion, noiversion,
//                      mand, nomand, loud, silent, nosymfollow
//   rw                 mount(8) adds it whenever ro is not given, so it cannot be
//                      refused without breaking `mount -t tensorfs SRC DIR`: the
//                      mount is read-only anyway and `warnings` says so
//   everything else    handed to tensorfs, which rejects what it does not know
//                      (with -s, "sloppy", unknown options are dropped with a
//                      warning instead)
//
// Why the generic flags can be dropped: a tensorfs mount is always nosuid and
// nodev (libfuse mounts so), holds only read-only regular files without exec
// bits (0444) and directories, and never updates access times, so none of them
// changes what a reader sees.
//
// Thread-safety: pure functions.
#ifndef TENSORFS_CORE_OPTIONS_MOUNT_HELPER_H_
#define TENSORFS_CORE_OPTIONS_MOUNT_HELPER_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"

namespace tensorfs {

// The program name under which tensorfs acts as the mount(8) helper.
inline constexpr std::string_view kMountHelperName = "mount.tensorfs";

// True when argv[0] names the helper ("/sbin/mount.tensorfs", "mount.tensorfs").
bool IsMountHelperInvocation(std::string_view argv0);

struct MountHelperArgs {
  std::string source;
  std::string mountpoint;
  std::string options;  // a tensorfs -o list ("allow_other,log_level=debug"), maybe empty
  bool fake = false;    // -f: do everything but mount
  bool verbose = false;                // -v
  std::vector<std::string> warnings;   // for stderr: options ignored or overridden
};

// Parses the helper's arguments (argv without argv[0]).
StatusOr<MountHelperArgs> ParseMountHelperArgs(std::span<const std::string> args);

// Filters one comma-separated -o list as described above. `sloppy` (-s) drops
// unknown options instead of passing them on; they are named in `warnings`.
// Escaped commas ("\,") in values are kept as they are.
std::string FilterMountHelperOptions(std::string_view list, bool sloppy, std::vector<std::string>& warnings);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_OPTIONS_MOUNT_HELPER_H_
