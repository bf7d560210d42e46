#include "tests/support/controlled_store.h"

namespace tensorfs::testing {

void ControlledStore::Hold() {
  MutexLock lock(mu_);
  hold_ = true;
}

void ControlledStore::ReleaseAll() {
  MutexLock lock(mu_);
  hold_ = false;
  cv_.NotifyAll();
}

void ControlledStore::Release(int n) {
  MutexLock lock(mu_);
  permits_ += n;
  cv_.NotifyAll();
}

bool ControlledStore::WaitForBlocked(int n, std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  return cv_.WaitFor(mu_, timeout, [&]() REQUIRES(mu_) { return blocked_ >= n; });
}

int ControlledStore::blocked() const {
  MutexLock lock(mu_);
  return blocked_;
}

int ControlledStore::max_concurrent() const {
  MutexLock lock(mu_);
  return max_running_;
}

std::vector<RecordedRead> ControlledStore::reads() const {
  MutexLock lock(mu_);
  return reads_;
}

Status ControlledStore::Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) {
  {
    MutexLock lock(mu_);
    reads_.push_back(RecordedRead{object.name, offset, out.size()});
    ++blocked_;
    cv_.NotifyAll();
    cv_.Wait(mu_, [&]() REQUIRES(mu_) { return !hold_ || permits_ > 0; });
    if (hold_) --permits_;
    --blocked_;
    max_running_ = std::max(max_running_, ++running_);
  }
  Status status = inner_.Read(object, offset, out);
  MutexLock lock(mu_);
  --running_;
  return status;
}

void FaultInjectingStore::FailReads(int count, Status status) {
  MutexLock lock(mu_);
  failures_left_ = count;
  failure_ = std::move(status);
}

Status FaultInjectingStore::Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) {
  {
    MutexLock lock(mu_);
    if (failures_left_ > 0) {
      --failures_left_;
      return failure_;
    }
  }
  return inner_.Read(object, offset, out);
}

}  // namespace tensorfs::testing
