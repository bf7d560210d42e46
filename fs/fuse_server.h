// FuseServer: the low-level FUSE adapter. It decodes each kernel request, calls
// the Namespace, and replies exactly once (a read may reply later, from the
// thread that completes it). It decides nothing about storage.
//
// Life cycle: Mount() (the mount point is live when it returns OK), Run() (serves
// until unmounted, or until SIGINT/SIGTERM/SIGHUP, then unmounts), destruction.
// Thread-safety: Run() serves requests on up to options.max_threads threads;
// the object itself is used from one thread.
#ifndef TENSORFS_FS_FUSE_SERVER_H_
#define TENSORFS_FS_FUSE_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>

#include "core/metrics/metrics.h"
#include "core/options/mount_options.h"
#include "core/util/log_limiter.h"
#include "core/util/status.h"
#include "core/vfs/namespace.h"

struct fuse_session;

namespace tensorfs {

class FuseServer {
 public:
  // The largest read the kernel sends in one request.
  static constexpr unsigned kMaxRead = 1 << 20;

  // Mounts `ns` at options.mountpoint. `ns`, `options` and `metrics` must
  // outlive the server; the metrics are published for `tensorfs stats`, and
  // reads answered with EIO are counted in them.
  static StatusOr<std::unique_ptr<FuseServer>> Mount(Namespace& ns, const MountOptions& options,
                                                     Metrics& metrics);
  ~FuseServer();

  // `callback` runs on Run()'s thread when the FUSE loop has ended (a signal or
  // an unmount asked it to) and before the mount point is unmounted: the start
  // of shutdown, e.g. for systemd's STOPPING=1. Set it before Run().
  void OnStopping(std::function<void()> callback) { on_stopping_ = std::move(callback); }

  // Serves until the file system is unmounted or a signal asks to stop; the
  // mount point is unmounted when this returns.
  Status Run();

 private:
  FuseServer(Namespace& ns, const MountOptions& options, Metrics& metrics)
      : ns_(ns), options_(options), metrics_(metrics) {}

  Namespace& ns_;
  const MountOptions& options_;
  Metrics& metrics_;
  fuse_session* session_ = nullptr;
  bool mounted_ = false;
  bool signals_set_ = false;
  std::function<void()> on_stopping_;
  // failed requests: one warning a second
  LogRateLimiter error_log_limiter_{std::chrono::seconds(1), "failed requests"};
  std::atomic<uint64_t> next_reader_{1};  // the handle of the next file opened (0: no reader)

  friend struct FuseHandlers;
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_FUSE_SERVER_H_
