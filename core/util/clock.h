// Clock: time for retries, token expiry and log rate limits, injected so tests
// can drive it without real sleeps. SystemClock() is the real one.
//
// Thread-safety: SystemClock() may be used from any thread. A Clock given to
// several objects must be safe for concurrent Now() and Sleep().
#ifndef TENSORFS_CORE_UTIL_CLOCK_H_
#define TENSORFS_CORE_UTIL_CLOCK_H_

#include <chrono>

namespace tensorfs {

class Clock {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  virtual ~Clock() = default;
  virtual TimePoint Now() = 0;
  virtual void Sleep(std::chrono::nanoseconds duration) = 0;
};

// The process-wide steady clock, sleeping for real.
Clock& SystemClock();

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_CLOCK_H_
