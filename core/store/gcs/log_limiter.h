// LogRateLimiter: lets at most one log line through per interval on a hot path
// (retry warnings, say) and counts the ones it held back, so the next line can
// say "(12 similar suppressed)".
//
// Thread-safety: Allow() may be called from any thread. mu_ is a leaf lock.
#ifndef TENSORFS_CORE_STORE_GCS_LOG_LIMITER_H_
#define TENSORFS_CORE_STORE_GCS_LOG_LIMITER_H_

#include <chrono>
#include <cstdint>
#include <optional>

#include "core/store/gcs/retry.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

class LogRateLimiter {
 public:
  LogRateLimiter(Clock& clock, std::chrono::nanoseconds interval) : clock_(clock), interval_(interval) {}

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

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_GCS_LOG_LIMITER_H_
