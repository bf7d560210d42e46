// Test doubles around an ObjectStore.
//
// ControlledStore: reads block until the test releases them, so the test
// decides when each fetch completes and races are reproducible. It records
// every read (object, offset, length) and the most reads ever blocked at once.
//
// FaultInjectingStore: fails the next reads with a given Status, then passes
// through (a wrapper, not sleeps).
//
// Thread-safety: all methods may be called concurrently.
#ifndef TENSORFS_TESTS_SUPPORT_CONTROLLED_STORE_H_
#define TENSORFS_TESTS_SUPPORT_CONTROLLED_STORE_H_

#include <chrono>
#include <vector>

#include "core/store/object_store.h"
#include "core/util/thread_annotations.h"

namespace tensorfs::testing {

struct RecordedRead {
  std::string object;
  uint64_t offset = 0;
  uint64_t length = 0;
};

class ControlledStore : public ObjectStore {
 public:
  // Reads are served by `inner` once released. With `hold` false, reads pass
  // straight through (recording only) until Hold() is called.
  explicit ControlledStore(ObjectStore& inner, bool hold = true) : inner_(inner), hold_(hold) {}

  void Hold() EXCLUDES(mu_);
  // Lets every blocked read (and every later one) proceed.
  void ReleaseAll() EXCLUDES(mu_);
  // Lets `n` reads proceed (blocked now or arriving later), in arrival order.
  void Release(int n) EXCLUDES(mu_);
  // Waits until `n` reads are blocked; false after `timeout`.
  bool WaitForBlocked(int n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) EXCLUDES(mu_);
  int blocked() const EXCLUDES(mu_);
  int max_concurrent() const EXCLUDES(mu_);
  std::vector<RecordedRead> reads() const EXCLUDES(mu_);

  StatusOr<ObjectInfo> Stat(std::string_view name) override { return inner_.Stat(name); }
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override {
    return inner_.List(prefix, delimiter);
  }
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override EXCLUDES(mu_);
  std::string Describe() const override { return "controlled " + inner_.Describe(); }

 private:
  ObjectStore& inner_;
  mutable Mutex mu_;
  CondVar cv_;
  bool hold_ GUARDED_BY(mu_);
  int permits_ GUARDED_BY(mu_) = 0;
  int blocked_ GUARDED_BY(mu_) = 0;
  int running_ GUARDED_BY(mu_) = 0;
  int max_running_ GUARDED_BY(mu_) = 0;
  std::vector<RecordedRead> reads_ GUARDED_BY(mu_);
};

class FaultInjectingStore : public ObjectStore {
 public:
  explicit FaultInjectingStore(ObjectStore& inner) : inner_(inner) {}
  // The next `count` reads fail with `status`.
  void FailReads(int count, Status status) EXCLUDES(mu_);

  StatusOr<ObjectInfo> Stat(std::string_view name) override { return inner_.Stat(name); }
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override {
    return inner_.List(prefix, delimiter);
  }
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override EXCLUDES(mu_);
  std::string Describe() const override { return inner_.Describe(); }

 private:
  ObjectStore& inner_;
  Mutex mu_;
  int failures_left_ GUARDED_BY(mu_) = 0;
  Status failure_ GUARDED_BY(mu_);
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_CONTROLLED_STORE_H_
