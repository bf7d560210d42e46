#include "fs/service_notifier.h"

#include <spdlog/spdlog.h>
#include <sys/vfs.h>
#include <systemd/sd-daemon.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/util/thread_annotations.h"

namespace tensorfs {
namespace {

constexpr long kFuseSuperMagic = 0x65735546;

}  // namespace

struct ServiceNotifier::State {
  State(std::string source_in, std::string mountpoint_in)
      : source(std::move(source_in)), mountpoint(std::move(mountpoint_in)) {}
  const std::string source;
  const std::string mountpoint;
  Mutex mu;
  bool stopping GUARDED_BY(mu) = false;
};

ServiceNotifier::ServiceNotifier(std::string source, std::string mountpoint)
    : state_(std::make_shared<State>(std::move(source), std::move(mountpoint))) {}

ServiceNotifier::~ServiceNotifier() = default;

void ServiceNotifier::NotifyWhenServing(bool probe_mount_point) {
  // Nobody to tell. (The probe below also holds the mount point busy while it
  // waits, which would make an unmount right after mounting fail with EBUSY.)
  const char* socket = std::getenv("NOTIFY_SOCKET");
  if (socket == nullptr || *socket == '\0') return;
  if (!probe_mount_point) {
    MutexLock lock(state_->mu);
    if (state_->stopping) return;
    std::string message = "READY=1\nSTATUS=Serving " + state_->source + " on " + state_->mountpoint;
    sd_notify(0, message.c_str());
    return;
  }
  std::thread([state = state_] {
    // Blocks until the FUSE loop answers (or the mount goes away).
    struct statfs sfs;
    int rc = ::statfs(state->mountpoint.c_str(), &sfs);
    int err = errno;
    MutexLock lock(state->mu);
    if (state->stopping) return;
    if (rc != 0 || sfs.f_type != kFuseSuperMagic) {
      spdlog::error("{} does not answer after mounting ({}); not reporting ready", state->mountpoint,
                    rc != 0 ? std::strerror(err) : "not a FUSE file system");
      return;
    }
    std::string message = "READY=1\nSTATUS=Serving " + state->source + " on " + state->mountpoint;
    sd_notify(0, message.c_str());
    spdlog::debug("{} answers; reported ready", state->mountpoint);
  }).detach();
}

void ServiceNotifier::Stopping() {
  MutexLock lock(state_->mu);
  if (state_->stopping) return;
  state_->stopping = true;
  std::string message = "STOPPING=1\nSTATUS=Unmounting " + state_->mountpoint;
  sd_notify(0, message.c_str());
}

}  // namespace tensorfs
