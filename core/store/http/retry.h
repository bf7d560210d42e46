// The retry policy of the HTTP stores (GcsStore, S3Store), kept apart from the
// transport so it can be tested with a fake clock and no real sleeps.
//
//  - Clock (core/util/clock.h): Now(), Sleep() and WaitFor(), injected;
//    SystemClock() is the real one.
//  - Backoff: exponential backoff with full jitter (initial 100 ms, x2, capped at
//    2 s; at 1 s after a failure to connect, so that a server coming back is
//    found within a second).
//  - EndpointHealth: what the requests to one endpoint learn from each other.
//    A request that succeeds wakes the requests waiting in backoff after a
//    failure to connect: the endpoint answering is what they wait for.
//  - RetryWindows: when each failing byte range first failed, so that a read the
//    kernel re-issues after an EIO continues the first read's retry window
//    instead of opening a fresh one.
//  - RetryLoop: runs one operation's attempts until success, a permanent error,
//    or the retry deadline; composes the "gave up after N attempts" message.
//  - StoreRetries: what one store's requests share (an EndpointHealth,
//    RetryWindows, the retry counters in Metrics, a rate-limited log line per
//    retry), and Run(), which drives one operation's RetryLoop with them.
//  - ClassifyTransportFailure: what a failure below HTTP means (which Status,
//    whether another attempt could help, the cause counted in the metrics), for
//    every store; each store maps HTTP statuses itself (gcs/gcs_errors.h,
//    s3/s3_errors.h).
//
// Retried: HTTP 408, 429, 5xx; connection refused/reset/lost, timeouts and
// stalls; a body cut short; a malformed response. Not retried: TLS failures,
// and the 4xx statuses each store names.
//
// Thread-safety: Backoff and RetryLoop are per-operation objects used by one
// thread. EndpointHealth, RetryWindows and StoreRetries are shared by all of a
// store's requests and safe to use from any thread (their mutexes are leaf
// locks). SystemClock() is safe from any thread. The classifiers are pure.
#ifndef TENSORFS_CORE_STORE_HTTP_RETRY_H_
#define TENSORFS_CORE_STORE_HTTP_RETRY_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/metrics/metrics.h"
#include "core/store/http/http.h"
#include "core/util/clock.h"
#include "core/util/log_limiter.h"
#include "core/util/status.h"
#include "core/util/thread_annotations.h"
#include "core/util/types.h"

namespace tensorfs {

// Returns a uniformly distributed value in [0, 1]. Injected so tests can pin
// the jitter; DefaultJitter() is a thread-safe pseudo-random source.
using JitterSource = std::function<double()>;
JitterSource DefaultJitter();

struct RetryOptions {
  std::chrono::milliseconds initial_backoff{100};
  double multiplier = 2.0;
  std::chrono::milliseconds max_backoff{2000};
  // The cap after a failure to connect: such a retry costs the server nothing,
  // and it is how a returning server is found.
  std::chrono::milliseconds max_reconnect_backoff{1000};
  // Retries stop once this much time has passed without progress (see RetryLoop).
  std::chrono::milliseconds deadline{120000};
};

// Exponential backoff with full jitter: the n-th delay (n = 0, 1, ...) is
// uniform in [0, min(max_backoff, initial_backoff * multiplier^n)], and after a
// failure to connect at most max_reconnect_backoff.
class Backoff {
 public:
  Backoff(const RetryOptions& options, JitterSource jitter);
  // The cap of the next delay, before jitter (and before the reconnect cap).
  std::chrono::milliseconds NextCap() const { return cap_; }
  // The next delay; advances the cap.
  std::chrono::milliseconds Next(bool reconnect = false);
  // Back to the initial cap (after an attempt that made progress).
  void Reset();

 private:
  RetryOptions options_;
  JitterSource jitter_;
  std::chrono::milliseconds cap_;
};

// The outcome of one attempt.
struct AttemptResult {
  Status status;           // OK: the operation is done
  bool retryable = false;  // for an error: would another attempt help?
  bool progress = false;   // this attempt made progress (e.g. some bytes arrived)
  RetryCause cause = RetryCause::kOther;  // for a retryable error: why, for the counters
  long http_status = 0;                   // with RetryCause::kHttpStatus

  static AttemptResult Done() { return {}; }
  static AttemptResult Permanent(Status s) { return {std::move(s), false, false}; }
  static AttemptResult Transient(Status s, bool progress = false, RetryCause cause = RetryCause::kOther,
                                 long http_status = 0) {
    return {std::move(s), true, progress, cause, http_status};
  }
};

// The requests to one endpoint share one of these. Every attempt that succeeds
// (or delivers bytes) records a success; a request waiting in backoff after a
// failure to connect wakes at the first success recorded after its own attempt
// started, so when a server comes back every waiting request retries as soon
// as one of them gets through.
//
// Only failures to connect are woken early: an HTTP error (429, 503) or a
// stall comes from a server that is reachable and is slowing down or has
// trouble with that object, and other requests succeeding says nothing about
// when to try again.
class EndpointHealth {
 public:
  explicit EndpointHealth(Clock& clock) : clock_(clock) {}

  // Successes so far; a request notes it before each attempt.
  uint64_t successes() const { return successes_.load(std::memory_order_acquire); }
  void RecordSuccess() EXCLUDES(mu_);
  // Waits `delay` on the clock, or until a success after `seen` is recorded.
  // True if a success ended the wait.
  bool WaitForSuccess(uint64_t seen, std::chrono::nanoseconds delay) EXCLUDES(mu_);

 private:
  Clock& clock_;
  Mutex mu_;
  CondVar cv_;
  // Written under mu_ (so a waiter checking it cannot miss the notification),
  // read without it by successes().
  std::atomic<uint64_t> successes_{0};
};

// When each failing byte range first failed. A read that fails looks here
// first: if an overlapping range of the same object version failed recently,
// its retry window continues from that first failure. This bounds the time to
// EIO across the kernel's own repetition of a failed read (after an EIO it reads
// the same bytes again, often as a smaller range) and across readers waiting on
// the same bytes.
//
// Entries are dropped when a read of the range succeeds, when nothing failed on
// them for `forget_after` (a later read is a new attempt by the user and gets a
// fresh window), and, oldest first, beyond `capacity`.
class RetryWindows {
 public:
  struct Range {
    std::string object;  // the full object name
    Generation generation;
    uint64_t first = 0;  // byte range [first, last]
    uint64_t last = 0;
  };

  RetryWindows(size_t capacity, std::chrono::nanoseconds forget_after)
      : capacity_(capacity), forget_after_(forget_after) {}

  // `range` failed at `now` for the first time in this read: returns when its
  // window started (the first failure of an overlapping remembered range, or
  // `now`, which is then remembered).
  Clock::TimePoint Open(const Range& range, Clock::TimePoint now) EXCLUDES(mu_);
  // Another failure of `range` at `now` (keeps it from being forgotten).
  void Failed(const Range& range, Clock::TimePoint now) EXCLUDES(mu_);
  // An attempt on `range` made progress: its window starts again at `now`.
  void Restart(const Range& range, Clock::TimePoint now) EXCLUDES(mu_);
  // A read of `range` succeeded: forget the failures overlapping it.
  void Succeeded(const Range& range) EXCLUDES(mu_);

  size_t size() const EXCLUDES(mu_);

 private:
  struct Entry {
    Range range;
    Clock::TimePoint window_start;
    Clock::TimePoint last_failure;
  };
  static bool Overlaps(const Range& a, const Range& b);
  // The entry overlapping `range`, after dropping forgotten ones; nullptr if none.
  Entry* Find(const Range& range, Clock::TimePoint now) REQUIRES(mu_);

  const size_t capacity_;
  const std::chrono::nanoseconds forget_after_;
  mutable Mutex mu_;
  std::vector<Entry> entries_ GUARDED_BY(mu_);
  std::atomic<size_t> count_{0};  // entries_.size(), read without mu_ on the success path
};

// Drives the attempts of one operation.
//
// Between attempts it waits a Backoff delay on the injected Clock (or on the
// EndpointHealth, which may end the wait early). It gives up when the next
// wait would end past the deadline, where the deadline runs from the start of
// the retry window: the operation's first failure (or an earlier operation's
// first failure on the same bytes, see Hooks::window_start), or the last
// attempt that made progress (so a long download that is cut now and then
// keeps going as long as it advances). An attempt that made progress also
// resets the backoff.
//
// On giving up it returns the last error's code (kUnavailable, or
// kDeadlineExceeded when the last attempt timed out) with the message
// "<what>: gave up after 7 attempts over 12.3 s: <last error>". A permanent
// error is returned unchanged (its message names the object already).
class RetryLoop {
 public:
  // Called before each wait: the attempt that failed (1-based), its result and
  // the delay about to be waited. For logging and counting.
  using RetryObserver = std::function<void(int attempt, const AttemptResult& result, std::chrono::milliseconds delay)>;

  struct Hooks {
    RetryObserver on_retry;
    // The endpoint's shared health: records successes, and lets a success end
    // a wait after a failure to connect. Null: plain sleeps on the clock.
    EndpointHealth* health = nullptr;
    // Asked at the operation's first failure (at `now`): when its retry window
    // starts. Unset: at `now`.
    std::function<Clock::TimePoint(Clock::TimePoint now)> window_start;
    // Called when an attempt made progress, and the window restarts at `now`.
    std::function<void(Clock::TimePoint now)> on_progress;
  };

  RetryLoop(const RetryOptions& options, Clock& clock, JitterSource jitter);

  Status Run(std::string_view what, const std::function<AttemptResult()>& attempt, const Hooks& hooks);
  Status Run(std::string_view what, const std::function<AttemptResult()>& attempt,
             const RetryObserver& on_retry = nullptr);

  int attempts() const { return attempts_; }
  // True when Run failed because the deadline ran out (not a permanent error).
  bool gave_up() const { return gave_up_; }

 private:
  RetryOptions options_;
  Clock& clock_;
  Backoff backoff_;
  int attempts_ = 0;
  bool gave_up_ = false;
};

// The retry state one store's requests share, and the loop that uses it: an
// EndpointHealth (a request back through wakes those waiting to reconnect),
// RetryWindows (a read's window continues an earlier failure of its bytes),
// the retry counters of `metrics`, and one rate-limited warning per retry.
class StoreRetries {
 public:
  // `log_name` names the warnings' rate limiter ("GCS request retries").
  // `clock` and `metrics` must outlive this.
  StoreRetries(const RetryOptions& options, Clock& clock, JitterSource jitter, Metrics& metrics,
               std::string log_name);

  // Runs one operation's attempts, counting and logging its retries. With
  // `range`, a read's: its window continues an earlier failure of those bytes.
  Status Run(const std::string& what, const std::function<AttemptResult()>& attempt,
             const RetryWindows::Range* range = nullptr);

  // Attempts after the first, over all operations so far.
  uint64_t retries() const { return retries_.load(std::memory_order_relaxed); }

 private:
  const RetryOptions options_;
  Clock& clock_;
  const JitterSource jitter_;
  Metrics& metrics_;
  EndpointHealth health_;
  RetryWindows windows_;
  LogRateLimiter log_limiter_;
  std::atomic<uint64_t> retries_{0};
};

// A failure below HTTP (response.transport_ok() false) as an AttemptResult;
// nullopt when the transport succeeded and the status is the store's to judge.
// `what` and `object_url` name the request in permanent errors.
std::optional<AttemptResult> ClassifyTransportFailure(const HttpResponse& response, std::string_view what,
                                                      std::string_view object_url);

// A credentials error met before a request could be sent: transient
// (kUnavailable, kDeadlineExceeded: worth another attempt) or permanent.
AttemptResult FromCredentialsError(const Status& status);

// True for the HTTP statuses worth retrying: 408, 429 and 5xx.
bool IsRetryableHttpStatus(long status);

// "1.5 s", "120 s".
std::string FormatSeconds(std::chrono::nanoseconds duration);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_HTTP_RETRY_H_
