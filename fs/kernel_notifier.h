// KernelNotifier: tells the kernel to drop what it caches of a directory
// whose listing changed: the dentries of the names that changed (a name now
// naming a new version, a name gone, a name the kernel remembers as absent)
// and the directory's cached pages (its readdir cache).
//
// Why a thread of its own: the Namespace finds a change while it serves a
// request, often a lookup in that very directory, which the kernel holds
// locked until the request is answered; fuse_lowlevel_notify_inval_entry takes
// that lock, so sent from the request's thread it would wait for itself
// (hf-mount deadlocked so). EntriesChanged only queues; the thread sends the
// notifications holding no lock of tensorfs, and may wait in the kernel for
// such a request to be answered, which nothing it holds prevents.
//
// Thread-safety: EntriesChanged may be called from any thread; Start and Stop
// from the thread that owns the FUSE session, Start once before serving, Stop
// once after the session's loop has ended.
#ifndef TENSORFS_FS_KERNEL_NOTIFIER_H_
#define TENSORFS_FS_KERNEL_NOTIFIER_H_

#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/metrics/metrics.h"
#include "core/util/thread_annotations.h"
#include "core/vfs/namespace.h"

struct fuse_session;

namespace tensorfs {

class KernelNotifier final : public ChangeObserver {
 public:
  // Counts the notifications it sends in metrics.kernel_invalidations.
  explicit KernelNotifier(Metrics& metrics) : metrics_(metrics) {}
  ~KernelNotifier() override;

  // Starts the thread that notifies `session`, which must stay valid until
  // Stop returns true.
  void Start(fuse_session* session) EXCLUDES(mu_);
  // Stops the thread; changes still queued are dropped (the kernel's caches
  // go with the mount). Waits at most a few seconds: false if the thread is
  // still inside a notification then (the kernel waits for a request that
  // will not be answered any more), in which case it is left running and the
  // session must not be destroyed.
  bool Stop() EXCLUDES(mu_);

  void EntriesChanged(NodeId dir, std::vector<std::string> names) override EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);
  bool stop_requested() EXCLUDES(mu_);

  Metrics& metrics_;
  fuse_session* session_ = nullptr;
  std::thread thread_;
  Mutex mu_;  // a leaf: never held while notifying the kernel
  CondVar cv_;
  std::deque<std::pair<NodeId, std::vector<std::string>>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  bool running_ GUARDED_BY(mu_) = false;  // the thread is started and has not left Run
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_KERNEL_NOTIFIER_H_
