// tensorfs as `mount-s3`: the command line of Mountpoint for Amazon S3, so that
// the Mountpoint for Amazon S3 CSI driver (v2) runs tensorfs where it runs
// mount-s3 (docs/EKS.md). tensorfs takes this form when its argv[0] is named
// mount-s3 (the package's /usr/lib/tensorfs/bin/mount-s3, or the bundle's
// launcher that packaging/build-eks-image.sh makes).
//
// How the driver runs it: in each volume's Mountpoint Pod (uid 1000, no
// capabilities, no /dev/fuse), aws-s3-csi-mounter receives from the node
// plugin the /dev/fuse descriptor it mounted, the bucket, the arguments and the
// environment, and runs
//   $MOUNTPOINT_BIN_DIR/mount-s3 BUCKET /dev/fd/3 ARGS... --foreground
// with exactly that environment; ARGS are the PersistentVolume's mountOptions
// (each "--key[=value]") and the driver's own (--allow-root or --allow-other,
// --gid/--dir-mode/--file-mode for an fsGroup, --user-agent-prefix, --cache),
// sorted. It keeps the whole of stderr, which it shows the user when mount-s3
// fails; stdout is the pod's log.
//
// TranslateMountS3 turns that command line into tensorfs' own MountOptions,
// through one table (MountS3Options(): each of mount-s3's documented options
// is mapped, refused because it asks for writes or for what tensorfs does not
// do, or accepted without effect with a note); then the ordinary start-up path
// runs (fs/startup.h), serving /dev/fd/N without mounting. tensorfs' own
// options travel as --tensorfs=LIST, LIST as for -o (a PersistentVolume's
// mountOptions entry "tensorfs cache_size=4G,views=none", which the driver
// passes as --tensorfs=cache_size=4G,views=none), applied after the rest.
// A command line mount-s3 would refuse is refused with clap's words
// (MountS3UsageError), exit status 2.
//
// Thread-safety: pure functions.
#ifndef TENSORFS_FS_MOUNT_S3_H_
#define TENSORFS_FS_MOUNT_S3_H_

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/options/mount_options.h"
#include "core/util/status.h"

namespace tensorfs {

// True when `argv0`'s last path component is "mount-s3".
bool IsMountS3Invocation(std::string_view argv0);

// What a mount-s3 command line asks for.
struct MountS3Command {
  enum class Action { kMount, kHelp, kVersion };
  Action action = Action::kMount;
  // Source (s3://BUCKET[/PREFIX]), mount point and options; not yet validated
  // (ValidateMountOptions).
  MountOptions options;
  // One line for each option accepted without effect, naming it and why.
  std::vector<std::string> notes;
};

// Translates `args` (argv after argv[0]). Errors are kInvalidArgument with
// the message mount-s3 gives ("unexpected argument '--x' found", "invalid
// value 'x' for '--dir-mode <DIR_MODE>': must be a valid octal number"), or
// one saying why tensorfs refuses an option of mount-s3's ("--allow-delete
// asks for ...").
StatusOr<MountS3Command> TranslateMountS3(const std::vector<std::string>& args);

// What to print on stderr for a refused command line, as mount-s3 does:
//   error: MESSAGE
//
//   Usage: mount-s3 [OPTIONS] <BUCKET_NAME> <DIRECTORY>
//
//   For more information, try '--help'.
std::string MountS3UsageError(std::string_view message);

// mount-s3 --help: the usage, each option of MountS3Options() and what it
// becomes, within kHelpWidth columns.
std::string MountS3Help();

// One row of the translation table, for --help, the man page and the tests.
struct MountS3OptionDoc {
  std::string_view names;       // "--prefix <PREFIX>", "-f, --foreground"
  std::string_view kind;        // "mapped", "unused", "refused"
  std::string_view meaning;     // what tensorfs does with it
};
std::vector<MountS3OptionDoc> MountS3Options();

}  // namespace tensorfs

#endif  // TENSORFS_FS_MOUNT_S3_H_
