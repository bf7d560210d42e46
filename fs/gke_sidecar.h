// `tensorfs gke-sidecar`: the sidecar side of the exchange of Google's Cloud
// Storage FUSE CSI driver (gcsfuse.csi.storage.gke.io, a GKE add-on), so that a
// pod whose container `gke-gcsfuse-sidecar` runs the tensorfs image mounts its
// buckets through tensorfs, with the node plugin, webhook and volume
// lifecycle GKE already runs (docs/GKE.md).
//
// The exchange, as the driver does it:
//  1. Before the pod's containers start, the node plugin (privileged) opens
//     /dev/fuse, mount(2)s it on the volume's target (type "fuse", data
//     "allow_other,default_permissions,rootmode=40000,user_id=0,group_id=0,fd=N",
//     nodev, nosuid, and ro for a read-only volume) and listens on
//     TMP/.volumes/VOL/socket, TMP being the pod's emptyDir gke-gcsfuse-tmp,
//     mounted at /gcsfuse-tmp in this container (--tmp-dir).
//  2. At start gke-sidecar connects to every TMP/.volumes/*/socket and receives
//     one message, the JSON {"bucketName": "b", "options": ["only-dir=x", ...]}
//     ("bucket_name" from drivers before 2023; "options" absent when empty)
//     with the descriptor attached by SCM_RIGHTS, then EOF (descriptor_child.h).
//     It deletes the socket and serves the volume as
//     `tensorfs gs://b[/x] /dev/fd/N -f -o ...`, one child per volume
//     (TranslateGkeVolume says which option becomes what).
//  3. What fails for a volume is appended, one line each, to
//     TMP/.volumes/VOL/error, which the node plugin reads at each republish and
//     turns into the pod's event and status code by the phrases in it
//     ("bucket doesn't exist": NotFound, "googleapi: Error 403":
//     PermissionDenied, "Incorrect Usage": InvalidArgument, "signal: killed":
//     ResourceExhausted): GkeErrorLine writes them where they apply.
//  4. Stopping. A native sidecar (an init container with restartPolicy Always,
//     env NATIVE_SIDECAR=TRUE) stops on SIGTERM. A regular one keeps serving
//     through SIGTERM and stops when the node plugin writes TMP/.volumes/exit
//     (looked for every kExitFilePollPeriod), which it deletes. Either way the
//     children get SIGTERM, any still running after kStopGrace SIGKILL, and
//     gke-sidecar exits 0: a volume's failure is reported in its error file,
//     never by the exit status (a sidecar that exits non-zero fails the pod).
//     SIGINT stops either kind.
//  5. Each volume's metrics are served on TMP/.volumes/VOL/metrics.sock
//     (-o prometheus_socket), which the node plugin scrapes.
//  6. Ordinary lines, its own and the children's (prefixed "[VOL]"), go to
//     stdout; errors to stderr.
// It mounts nothing, needs no privilege and no capability, and writes only
// under TMP (error files, metrics sockets; sockets and the exit file it deletes).
//
// Thread-safety: RunGkeSidecar() is called once, from main, before any other
// thread exists; it starts one thread per volume. The other functions are
// pure.
#ifndef TENSORFS_FS_GKE_SIDECAR_H_
#define TENSORFS_FS_GKE_SIDECAR_H_

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/options/memory_limit.h"
#include "core/util/status.h"
#include "fs/descriptor_child.h"

namespace tensorfs {

// The driver's sidecar looks for the exit file every 5 s.
inline constexpr std::chrono::seconds kExitFilePollPeriod{5};
// The driver gives gcsfuse 5 s after SIGTERM before it kills it; a native
// sidecar must be gone by then.
inline constexpr std::chrono::milliseconds kStopGrace{4000};

// The node plugin's message.
struct GkeVolumeMessage {
  std::string bucket;
  std::vector<std::string> options;
};

StatusOr<GkeVolumeMessage> ParseGkeMessage(std::string_view json);

// What a volume is served as.
struct GkeMount {
  std::string source;   // gs://bucket[/only-dir]
  std::string options;  // the child's -o list
  // Serve the volume's metrics on TMP/.volumes/VOL/metrics.sock, where the
  // node plugin scrapes them; off with the driver's disable-metrics-for-gke:true.
  bool metrics = true;
  // Lines to log: one per option that has no effect, naming it and why; the
  // cache's share of the memory limit (ShareMemoryLimit).
  std::vector<std::string> notes;
};

// Translates the driver's options:
//   only-dir=DIR                  the prefix: gs://bucket/DIR
//   uid=N, gid=N                  uid=N, gid=N (what the files report)
//   file-mode=OCTAL, dir-mode=OCTAL  file_mode, dir_mode
//   tensorfs:NAME:VALUE           NAME=VALUE, NAME as in -o with '-' or '_'
//                                 (a flag: tensorfs:NAME or tensorfs:NAME:true)
//   disable-metrics-for-gke:true  metrics = false
//   anything else                 ignored, with a line in `notes`
// Bucket "_" (the driver's dynamic mount of every bucket) and a tensorfs
// option that does not parse are errors that start with "Incorrect Usage",
// the phrase the node plugin maps to InvalidArgument.
StatusOr<GkeMount> TranslateGkeVolume(const GkeVolumeMessage& message);

// All volumes' mounts run in this one container, under its one memory limit,
// where each would size its default cache to the whole limit. With `volumes`
// > 1 and a limit, a mount without tensorfs:cache_size gets the cache that
// 1/volumes of the limit allows (FitCacheToMemoryLimit), with a line in
// `notes`; an error (starting "Incorrect Usage") when the share is too small.
Status ShareMemoryLimit(GkeMount& mount, const std::optional<MemoryLimit>& limit, size_t volumes);

// The error file's line for a child that ended on its own, not cleanly.
std::string GkeErrorLine(const ChildEnd& end, const std::string& source);

// Go's strconv.ParseBool, as the driver reads NATIVE_SIDECAR: nullopt if
// `text` is none of 1 t T TRUE true True 0 f F FALSE false False.
std::optional<bool> ParseGoBool(std::string_view text);

struct GkeSidecarOptions {
  std::string tmp_dir = "/gcsfuse-tmp";
  bool native = false;  // NATIVE_SIDECAR
  // Arguments for the driver's own sidecar (the webhook passes klog's --v=5),
  // each logged once and otherwise ignored.
  std::vector<std::string> ignored_args;
};

// The options from the command line's --tmp-dir and other arguments, and from
// NATIVE_SIDECAR (a value Go cannot parse is a warning, and false, as in the
// driver).
GkeSidecarOptions GkeSidecarOptionsFrom(std::string tmp_dir, std::vector<std::string> args,
                                        const char* native_sidecar_env);

// Serves every volume of `options.tmp_dir` as described above until told to
// stop; exits the process (status 0), or returns 2 when tmp_dir is no directory.
// Logs through SetUpSplitLogging's logger, which the caller sets up.
int RunGkeSidecar(const GkeSidecarOptions& options);

}  // namespace tensorfs

#endif  // TENSORFS_FS_GKE_SIDECAR_H_
