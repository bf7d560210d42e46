// ServiceNotifier: tells a supervising systemd (a Type=notify unit, such as
// packaging/systemd/tensorfs@.service) how the mount is doing, through
// sd_notify(3):
//
//  - READY=1 and STATUS= once the mount answers. NotifyWhenServing() is called
//    just before the FUSE loop starts; a thread statfs()es the mount point,
//    which the kernel holds until the loop has answered, and only then notifies.
//    So `systemctl start` returns, and units ordered after the service start,
//    when files can be read, not merely when mount(2) has returned.
//  - STOPPING=1 and STATUS= when shutdown begins: the FUSE loop has ended (a
//    signal such as systemd's SIGTERM, or an unmount) and the mount point is
//    about to be unmounted.
//
// Without NOTIFY_SOCKET in the environment (not run by systemd) nothing is sent
// and nothing is checked.
//
// Thread-safety: Stopping() may be called from any thread. The readiness
// thread and Stopping() serialize on a mutex, so READY=1 never follows
// STOPPING=1. The thread is detached and owns what it uses: destroying the
// notifier never waits for a mount that does not answer.
#ifndef TENSORFS_FS_SERVICE_NOTIFIER_H_
#define TENSORFS_FS_SERVICE_NOTIFIER_H_

#include <memory>
#include <string>

namespace tensorfs {

class ServiceNotifier {
 public:
  // `mountpoint` is an absolute path (the background process changes to /).
  ServiceNotifier(std::string source, std::string mountpoint);
  ServiceNotifier(const ServiceNotifier&) = delete;
  ServiceNotifier& operator=(const ServiceNotifier&) = delete;
  ~ServiceNotifier();

  // Starts the readiness check; call once, after mounting. Without
  // `probe_mount_point` (a /dev/fd/N mount, which has no path here) READY=1 is
  // sent at once.
  void NotifyWhenServing(bool probe_mount_point = true);
  // Sends STOPPING=1 (once).
  void Stopping();

  struct State;  // shared with the readiness thread

 private:
  std::shared_ptr<State> state_;
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_SERVICE_NOTIFIER_H_
