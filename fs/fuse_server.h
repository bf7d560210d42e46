// FuseServer: the low-level FUSE adapter. It decodes each kernel request, calls
// the Namespace, and replies exactly once (a read may reply later, from the
// thread that completes it). It decides nothing about storage.
//
// Life cycle: Mount() (the mount point is live when it returns OK), Run() (serves
// until unmounted, or until SIGINT/SIGTERM/SIGHUP or Stop(), then unmounts),
// destruction.
//
// Who mounts. Given a directory, Mount() mounts it (mount(2) as root, else
// fusermount3) and owns the kernel-side settings: allow_other, read-only and the
// bdi's readahead. Given /dev/fd/N, a parent has already mounted that /dev/fuse
// descriptor and owns those settings; Mount() only checks the descriptor and
// serves it: no mount(2), no path lookup, nothing written to sysfs, and Run()
// leaves the unmount to the parent (it ends when the parent unmounts).
// Either way Mount() never resolves or stats the mount point before mounting:
// an automount there would wait for this very mount.
//
// Kernel caches: entries and attributes are cached for attr_timeout and
// entry_timeout (by default the metadata TTL), names not found for
// NegativeEntryTimeout; a file's pages are kept across opens (a node is one
// version of an object), a directory's readdir pages until its listing
// changes. The kernel's lookup counts are the Namespace's to keep (Lookup,
// READDIRPLUS entries, FORGET); the Namespace's changes reach the kernel
// through a KernelNotifier, which the server starts and stops with Run().
//
// Thread-safety: Run() serves requests on up to options.max_threads threads;
// Stop() may be called from any thread; the rest from the thread that called
// Mount() (which must also call Run()).
#ifndef TENSORFS_FS_FUSE_SERVER_H_
#define TENSORFS_FS_FUSE_SERVER_H_

#include <pthread.h>

#include <atomic>
#include <functional>
#include <memory>

#include "core/metrics/metrics.h"
#include "core/options/mount_options.h"
#include "core/util/log_limiter.h"
#include "core/util/status.h"
#include "core/vfs/namespace.h"
#include "fs/handle_table.h"
#include "fs/kernel_notifier.h"

struct fuse_session;

namespace tensorfs {

class FuseServer {
 public:
  // The largest read the kernel sends in one request.
  static constexpr unsigned kMaxRead = 1 << 20;
  // The INIT reply's max_readahead: the kernel lowers the bdi's readahead to it
  // when it takes the reply, so it must not be below any readahead that this
  // mount (read_ahead=) or a parent (/dev/fd/N) sets; the option's upper bound.
  static constexpr unsigned kInitMaxReadahead = 1u << 30;

  // Mounts `ns` at options.mountpoint, or adopts the /dev/fd/N named there.
  // `ns`, `options` and `metrics` must outlive the server; the metrics are
  // published for `tensorfs stats`, and reads answered with EIO are counted in
  // them. Errors say what to fix (a missing directory, a descriptor that is not
  // /dev/fuse opened read-write).
  static StatusOr<std::unique_ptr<FuseServer>> Mount(Namespace& ns, const MountOptions& options,
                                                     Metrics& metrics);
  ~FuseServer();

  // `callback` runs on Run()'s thread when the FUSE loop has ended (a signal or
  // an unmount asked it to) and before the mount point is unmounted: the start
  // of shutdown, e.g. for systemd's STOPPING=1. Set it before Run().
  void OnStopping(std::function<void()> callback) { on_stopping_ = std::move(callback); }

  // Serves until the file system is unmounted or a signal (or Stop()) asks to
  // stop; a mount made by Mount() is unmounted when this returns.
  Status Run();

  // Asks Run() to return, as SIGTERM does. From any thread; signals must be
  // blocked in the calling thread if it is not the one running Run().
  void Stop();

  // True when serving a descriptor handed over as /dev/fd/N.
  bool adopted_fd() const { return fuse_fd_ >= 0; }

  // Sets the kernel readahead of the mount (its bdi's read_ahead_kb), for the
  // files opened from now on, and reads it back: a value the kernel rounds or
  // refuses (writing it needs root) is a warning naming the value in force,
  // once; the mount works without it. Calls must not overlap (ReadEngine's
  // readahead sink serialises them). Not for an adopted descriptor.
  void SetReadahead(uint64_t bytes);

 private:
  FuseServer(Namespace& ns, const MountOptions& options, Metrics& metrics);

  Namespace& ns_;
  const MountOptions& options_;
  Metrics& metrics_;
  const uid_t uid_;  // every node's owner: options_.uid, else the user we run as
  const gid_t gid_;
  const double negative_timeout_s_;  // NegativeEntryTimeout(options_)
  // Tells the kernel what changed. Released (left running, with the
  // session) if it cannot be stopped: it may still use the session.
  std::unique_ptr<KernelNotifier> notifier_;
  fuse_session* session_ = nullptr;
  int fuse_fd_ = -1;  // N of /dev/fd/N, or -1 when Mount() mounted a directory
  pthread_t loop_thread_{};  // the thread that called Mount() and runs Run()
  bool mounted_ = false;
  bool signals_set_ = false;
  std::function<void()> on_stopping_;
  // failed requests: one warning a second
  LogRateLimiter error_log_limiter_{std::chrono::seconds(1), "failed requests"};
  std::atomic<uint64_t> next_reader_{1};  // the reader of the next file opened (0: no reader)
  HandleTable handles_;  // what open files' and directories' handles point to
  std::string read_ahead_path_;  // the bdi's read_ahead_kb, once found (SetReadahead)
  bool read_ahead_warned_ = false;
  // The readahead in force (bytes), as read back by SetReadahead; 0 until then
  // (files opened meanwhile are not counted in metrics_.opens_by_read_ahead).
  std::atomic<uint64_t> read_ahead_in_force_{0};

  friend struct FuseHandlers;
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_FUSE_SERVER_H_
