// `tensorfs handoff SOCKET_DIR`: the unprivileged end of a Kubernetes node
// plugin's descriptor handoff. The plugin (privileged) opens /dev/fuse and
// mounts; tensorfs, in the workload's pod without any capability, serves.
//
// The protocol, for a node plugin to implement (docs/KUBERNETES.md):
//   1. Per volume, the plugin opens /dev/fuse read-write, mount(2)s it on the
//      target with the settings of `tensorfs --print-mount-params`, and listens
//      on a Unix stream socket in SOCKET_DIR (any name; the directory must be
//      writable by the user tensorfs runs as).
//   2. tensorfs handoff connects to every socket in SOCKET_DIR (waiting up to
//      `wait` for the first to appear) and reads one message: a JSON object,
//        {"source": "gs://bucket/prefix", "options": "cache_size=4G,shard=0/8"}
//      ("options" optional: a string as for -o, or an array of "name[=value]"
//      strings), with the /dev/fuse descriptor attached by SCM_RIGHTS to its
//      first bytes. The plugin then closes the connection: the message ends at
//      EOF (at most kMaxDescriptorMessage bytes, within kDescriptorReceiveTimeout;
//      fs/descriptor_child.h).
//   3. Per message, tensorfs runs `tensorfs SOURCE /dev/fd/N -f -o OPTIONS` as
//      a child process, so one mount's failure leaves the others serving. The
//      child's output goes to handoff's stderr, each line prefixed with the
//      socket's name.
//   4. What fails is written, one line, to SOCKET.error beside the socket: a
//      message that cannot be received or understood, a child that exits
//      non-zero (with its last line of output). Nothing is written on success.
//   5. handoff exits when every child has ended (its mount was unmounted, or a
//      signal stopped it): 0 if each ended cleanly and every socket was served,
//      else 1. SIGTERM, SIGINT and SIGHUP to handoff are passed to each child.
//
// Thread-safety: RunHandoff() is called once, from main, before any other
// thread exists; it starts one thread per mount and one for signals.
#ifndef TENSORFS_FS_HANDOFF_H_
#define TENSORFS_FS_HANDOFF_H_

#include <chrono>
#include <string>

#include "core/util/status.h"
#include "fs/descriptor_child.h"

namespace tensorfs {

// One received handoff: the descriptor (close-on-exec) and what to serve from it.
struct Handoff {
  std::string source;
  std::string options;  // a -o list; "" for none
  int fd = -1;
};

// Connects to the Unix socket at `path` and receives one handoff. Errors say
// what was wrong with the message, for SOCKET.error.
StatusOr<Handoff> ReceiveHandoff(const std::string& path);

// Serves every socket in `socket_dir` as described above; returns the exit status.
int RunHandoff(const std::string& socket_dir, std::chrono::seconds wait);

}  // namespace tensorfs

#endif  // TENSORFS_FS_HANDOFF_H_
