// Clock: time for retries, token expiry and log rate limits, injected so tests
// can drive it without real sleeps. SystemClock() is the real one.
//
// Thread-safety: SystemClock() may be used from any thread. A Clock given to
// several objects must be safe for concurrent Now(), Sleep() and WaitFor().
#ifndef TENSORFS_CORE_UTIL_CLOCK_H_
#define TENSORFS_CORE_UTIL_CLOCK_H_

#include <chrono>
#include <functional>

#include "core/util/thread_annotations.h"

namespace tensorfs {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() = 0;
  virtual void Sleep(std::chrono::nanoseconds duration) = 0;
  // Waits on `cv`, whose mutex `mu` the caller holds, until `ready()` (checked
  // with `mu` held, after each notification) or until `duration` has passed on
  // this clock; returns ready(). The default waits on the condition variable in
  // real time; a test clock may advance its own time instead.
  virtual bool WaitFor(Mutex& mu, CondVar& cv, std::chrono::nanoseconds duration,
                       const std::function<bool()>& ready) REQUIRES(mu) {
    return cv.WaitFor(mu, duration, ready);
  }
};

// The process-wide steady clock, sleeping for real.
Clock& SystemClock();

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_CLOCK_H_
