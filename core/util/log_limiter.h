// LogRateLimiter: lets at most one log line through per interval on a hot path
// (retry warnings, failed reads) and counts the ones it held back, so the next
// line can say "[12 similar warnings suppressed]". Use one limiter per kind of line:
//
//   if (std::optional<uint64_t> suppressed = limiter_.Allow()) {
//     spdlog::warn("{}: {}{}", what, error, SuppressedSuffix(*suppressed));
//   }
//
// Thread-safety: Allow() may be called from any thread. mu_ is a leaf lock.
#ifndef TENSORFS_CORE_UTIL_LOG_LIMITER_H_
#define TENSORFS_CORE_UTIL_LOG_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "core/util/clock.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

class LogRateLimiter {
 public:
  LogRateLimiter(Clock& clock, std::chrono::nanoseconds interval) : clock_(clock), interval_(interval) {}
  explicit LogRateLimiter(std::chrono::nanoseconds interval) : LogRateLimiter(SystemClock(), interval) {}

  // If a line may be logged now, returns how many were suppressed since the last
  // one that was; otherwise counts this one as suppressed and returns nullopt.
  std::optional<uint64_t> Allow() EXCLUDES(mu_);

 private:
  Clock& clock_;
  const std::chrono::nanoseconds interval_;
  Mutex mu_;
  std::optional<Clock::TimePoint> last_ GUARDED_BY(mu_);
  uint64_t suppressed_ GUARDED_BY(mu_) = 0;
};

// "" for 0, else " [N similar warnings suppressed]".
std::string SuppressedSuffix(uint64_t suppressed);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_LOG_LIMITER_H_
