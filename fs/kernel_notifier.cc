#define FUSE_USE_VERSION 314
#include "fs/kernel_notifier.h"

#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace tensorfs {

KernelNotifier::~KernelNotifier() { (void)Stop(); }

void KernelNotifier::Start(fuse_session* session) {
  session_ = session;
  {
    MutexLock lock(mu_);
    running_ = true;
  }
  thread_ = std::thread([this] { Run(); });
}

bool KernelNotifier::Stop() {
  bool left = false;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    queue_.clear();
    cv_.NotifyAll();
    left = cv_.WaitFor(mu_, std::chrono::seconds(2), [&]() REQUIRES(mu_) { return !running_; });
  }
  if (!left) {
    spdlog::debug("the kernel notifier still waits in the kernel; it is left running");
    if (thread_.joinable()) thread_.detach();
    return false;
  }
  if (thread_.joinable()) thread_.join();
  return true;
}

void KernelNotifier::EntriesChanged(NodeId dir, std::vector<std::string> names) {
  MutexLock lock(mu_);
  if (stopping_ || !running_) return;
  queue_.emplace_back(dir, std::move(names));
  cv_.NotifyAll();
}

bool KernelNotifier::stop_requested() {
  MutexLock lock(mu_);
  return stopping_;
}

void KernelNotifier::Run() {
  for (;;) {
    std::pair<NodeId, std::vector<std::string>> change;
    {
      MutexLock lock(mu_);
      cv_.Wait(mu_, [&]() REQUIRES(mu_) { return stopping_ || !queue_.empty(); });
      if (stopping_) {
        running_ = false;
        cv_.NotifyAll();
        return;
      }
      change = std::move(queue_.front());
      queue_.pop_front();
    }
    const fuse_ino_t dir = change.first.value;
    // ENOENT: the kernel holds no such entry or directory (nothing to drop).
    auto sent = [&](int rc, const std::string& what) {
      if (rc == 0 || rc == -ENOENT) {
        metrics_.kernel_invalidations.fetch_add(1, std::memory_order_relaxed);
      } else {
        spdlog::debug("cannot invalidate {} of directory {} in the kernel: {}", what, dir, std::strerror(-rc));
      }
    };
    for (const std::string& name : change.second) {
      if (stop_requested()) break;
      sent(fuse_lowlevel_notify_inval_entry(session_, dir, name.c_str(), name.size()), "entry " + name);
    }
    // Its attributes and pages: the readdir cache.
    sent(fuse_lowlevel_notify_inval_inode(session_, dir, 0, 0), "the listing");
  }
}

}  // namespace tensorfs
