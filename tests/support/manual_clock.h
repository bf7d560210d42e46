// ManualClock: a Clock whose time moves only when a test advances it, for
// expiry logic (TTLs, rate limits) tested without sleeping.
//
// Thread-safety: all methods may be called concurrently.
#ifndef TENSORFS_TESTS_SUPPORT_MANUAL_CLOCK_H_
#define TENSORFS_TESTS_SUPPORT_MANUAL_CLOCK_H_

#include <chrono>
#include <cstdint>

#include "core/util/clock.h"
#include "core/util/thread_annotations.h"

namespace tensorfs::testing {

class ManualClock : public Clock {
 public:
  TimePoint Now() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++now_calls_;
    return now_;
  }
  void Sleep(std::chrono::nanoseconds d) override { Advance(d); }
  void Advance(std::chrono::nanoseconds d) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    now_ += d;
  }
  // How many times Now() was called: a test waits on it to know that the
  // threads it started have reached a check of the time.
  uint64_t now_calls() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return now_calls_;
  }

 private:
  Mutex mu_;
  TimePoint now_ GUARDED_BY(mu_){};
  uint64_t now_calls_ GUARDED_BY(mu_) = 0;
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_MANUAL_CLOCK_H_
