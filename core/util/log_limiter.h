// LogRateLimiter: lets at most one log line through per interval on a hot path
// (retry warnings, failed reads) and counts the ones it held back, so the next
// line can say "[12 similar warnings suppressed]". Use one limiter per kind of line:
//
//   limiter_.Warn(fmt::format("{}: {}", what, error));   // adds the suffix itself
//
// or, to build the line only when it goes out:
//
//   if (std::optional<uint64_t> suppressed = limiter_.Allow()) {
//     spdlog::warn("{}: {}{}", what, error, SuppressedSuffix(*suppressed));
//   }
//
// Lines held back are reported even when no later line comes: once the
// interval has passed since the last line that went out, a background thread
// (started at the first line held back) logs "3 similar warnings held back in
// the last 1.0 s; the last: <line>", and FlushHeldBackWarnings() does the same
// for every limiter at once (the mount calls it when it unmounts). Only
// limiters on SystemClock() are reported by that thread: one on a test clock
// reports when the test calls FlushIfDue() or Flush().
//
// Thread-safety: all methods may be called from any thread. Lock order: the
// process-wide list of limiters (taken by the background thread and by
// FlushHeldBackWarnings, and briefly on construction and destruction) before a
// limiter's mu_; no lock is held while the line is logged except that list's.
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
  // `what` names the kind of line in a report that has no line of its own
  // ("failed requests"); may be empty.
  LogRateLimiter(Clock& clock, std::chrono::nanoseconds interval, std::string what = "");
  explicit LogRateLimiter(std::chrono::nanoseconds interval, std::string what = "")
      : LogRateLimiter(SystemClock(), interval, std::move(what)) {}
  // Reports the lines still held back.
  ~LogRateLimiter();
  LogRateLimiter(const LogRateLimiter&) = delete;
  LogRateLimiter& operator=(const LogRateLimiter&) = delete;

  // If a line may be logged now, returns how many were suppressed since the last
  // one that was; otherwise counts this one as suppressed and returns nullopt.
  std::optional<uint64_t> Allow() EXCLUDES(mu_);
  // Logs `line` as a warning now (with SuppressedSuffix) or holds it back,
  // remembering it as the last line held back.
  void Warn(std::string line) EXCLUDES(mu_);
  // Reports the lines held back since the last one logged, if any. True if it
  // logged a report.
  bool Flush() EXCLUDES(mu_);
  // Flush(), but only once the interval has passed since the last line logged.
  bool FlushIfDue() EXCLUDES(mu_);

  bool reported_in_background() const { return background_; }

 private:
  // Counts a held-back line; starts the background reporter at the first.
  void HoldBack(std::optional<std::string> line) REQUIRES(mu_);
  bool Report(bool only_if_due) EXCLUDES(mu_);

  Clock& clock_;
  const std::chrono::nanoseconds interval_;
  const std::string what_;
  const bool background_;  // reported by the background thread (on SystemClock())
  Mutex mu_;
  std::optional<Clock::TimePoint> last_ GUARDED_BY(mu_);
  uint64_t suppressed_ GUARDED_BY(mu_) = 0;
  std::string last_held_back_ GUARDED_BY(mu_);  // the last line Warn() held back
};

// "" for 0, else " [N similar warnings suppressed]".
std::string SuppressedSuffix(uint64_t suppressed);

// Reports the lines every live LogRateLimiter holds back (at unmount, before
// the process exits without running destructors).
void FlushHeldBackWarnings();

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_LOG_LIMITER_H_
