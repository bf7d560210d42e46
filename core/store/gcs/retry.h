// The retry policy of the GCS backend, kept apart from the transport so it can
// be tested with a fake clock and no real sleeps.
//
//  - Clock (core/util/clock.h): Now() and Sleep(), injected; SystemClock() is the real one.
//  - Backoff: exponential backoff with full jitter (initial 100 ms, x2, capped at
//    30 s), as Google's client libraries do.
//  - RetryLoop: runs one operation's attempts until success, a permanent error,
//    or the retry deadline; composes the "gave up after N attempts" message.
//  - ClassifyHttpResponse: what an HTTP outcome means (which Status, and
//    whether another attempt could help). This is the one place HTTP statuses
//    and transport failures become ErrorCodes.
//
// Retried: HTTP 408, 429, 5xx; connection refused/reset/lost, timeouts and
// stalls; a body cut short. Not retried: 400, 401 (the store refreshes the token
// once itself), 403, 404, 412, 416 and any other 4xx; TLS failures.
//
// Thread-safety: Backoff and RetryLoop are per-operation objects used by one
// thread. SystemClock() is safe from any thread. ClassifyHttpResponse is pure.
#ifndef TENSORFS_CORE_STORE_GCS_RETRY_H_
#define TENSORFS_CORE_STORE_GCS_RETRY_H_

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/store/gcs/http.h"
#include "core/util/clock.h"
#include "core/util/status.h"
#include "core/util/types.h"

namespace tensorfs {

// Returns a uniformly distributed value in [0, 1]. Injected so tests can pin
// the jitter; DefaultJitter() is a thread-safe pseudo-random source.
using JitterSource = std::function<double()>;
JitterSource DefaultJitter();

struct RetryOptions {
  std::chrono::milliseconds initial_backoff{100};
  double multiplier = 2.0;
  std::chrono::milliseconds max_backoff{30000};
  // Retries stop once this much time has passed without progress (see RetryLoop).
  std::chrono::milliseconds deadline{120000};
};

// Exponential backoff with full jitter: the n-th delay (n = 0, 1, ...) is
// uniform in [0, min(max_backoff, initial_backoff * multiplier^n)].
class Backoff {
 public:
  Backoff(const RetryOptions& options, JitterSource jitter);
  // The cap of the next delay, before jitter.
  std::chrono::milliseconds NextCap() const { return cap_; }
  // The next delay; advances the cap.
  std::chrono::milliseconds Next();
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

  static AttemptResult Done() { return {}; }
  static AttemptResult Permanent(Status s) { return {std::move(s), false, false}; }
  static AttemptResult Transient(Status s, bool progress = false) { return {std::move(s), true, progress}; }
};

// Drives the attempts of one operation.
//
// Between attempts it sleeps a Backoff delay on the injected Clock. It gives up
// when the next sleep would end past the deadline, where the deadline runs from
// the start of the operation or from the last attempt that made progress (so a
// long download that is cut now and then keeps going as long as it advances).
// An attempt that made progress also resets the backoff.
//
// On giving up it returns the last error's code (kUnavailable, or
// kDeadlineExceeded when the last attempt timed out) with the message
// "<what>: gave up after 7 attempts over 120 s: <last error>". A permanent
// error is returned unchanged (its message names the object already).
class RetryLoop {
 public:
  // Called before each sleep: the attempt that failed (1-based), its error and
  // the delay about to be slept. For logging.
  using RetryObserver = std::function<void(int attempt, const Status& error, std::chrono::milliseconds delay)>;

  RetryLoop(const RetryOptions& options, Clock& clock, JitterSource jitter);

  Status Run(std::string_view what, const std::function<AttemptResult()>& attempt,
             const RetryObserver& on_retry = nullptr);

  int attempts() const { return attempts_; }

 private:
  RetryOptions options_;
  Clock& clock_;
  Backoff backoff_;
  int attempts_ = 0;
};

// What a request was, for error messages.
struct RequestContext {
  std::string what;         // "read of bytes 0-1023 of gs://b/m.safetensors (generation 17)"
  std::string object_url;   // "gs://b/m.safetensors", or "gs://b" for bucket-level calls
  std::string bucket;
  std::string credentials;  // CredentialsProvider::Describe()
  bool anonymous = false;   // no credentials were sent
  std::optional<Generation> generation;  // set when the request is pinned to one
  bool is_listing = false;
};

// Maps an HTTP outcome that is not a success to a Status and retryability.
// Permanent errors get a self-contained message naming the object and saying
// what to fix; transient ones a short description of the last error, which
// RetryLoop puts after "<what>: gave up after ...". A response with
// transport_ok() and a 2xx status is a success and must not be passed here.
AttemptResult ClassifyHttpResponse(const HttpResponse& response, const RequestContext& context);

// True for the HTTP statuses worth retrying: 408, 429 and 5xx.
bool IsRetryableHttpStatus(long status);

// "error.message" from a JSON error body, or "" if the body is not one.
std::string ServerErrorMessage(std::string_view body);

// "1.5 s", "120 s".
std::string FormatSeconds(std::chrono::nanoseconds duration);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_GCS_RETRY_H_
