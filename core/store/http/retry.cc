#include "core/store/http/retry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <fmt/format.h>


namespace tensorfs {

JitterSource DefaultJitter() {
  return [] {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  };
}

Backoff::Backoff(const RetryOptions& options, JitterSource jitter)
    : options_(options), jitter_(std::move(jitter)), cap_(options.initial_backoff) {}

std::chrono::milliseconds Backoff::Next(bool reconnect) {
  const double fraction = std::clamp(jitter_(), 0.0, 1.0);
  const std::chrono::milliseconds cap = reconnect ? std::min(cap_, options_.max_reconnect_backoff) : cap_;
  const auto delay = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(fraction * static_cast<double>(cap.count()))));
  const double next = static_cast<double>(cap_.count()) * options_.multiplier;
  cap_ = next >= static_cast<double>(options_.max_backoff.count())
             ? options_.max_backoff
             : std::chrono::milliseconds(static_cast<int64_t>(next));
  return delay;
}

void Backoff::Reset() { cap_ = options_.initial_backoff; }

void EndpointHealth::RecordSuccess() {
  {
    MutexLock lock(mu_);
    successes_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.NotifyAll();
}

bool EndpointHealth::WaitForSuccess(uint64_t seen, std::chrono::nanoseconds delay) {
  MutexLock lock(mu_);
  return clock_.WaitFor(mu_, cv_, delay, [&] { return successes_.load(std::memory_order_acquire) != seen; });
}

bool RetryWindows::Overlaps(const Range& a, const Range& b) {
  return a.generation == b.generation && a.first <= b.last && b.first <= a.last && a.object == b.object;
}

RetryWindows::Entry* RetryWindows::Find(const Range& range, Clock::TimePoint now) {
  std::erase_if(entries_, [&](const Entry& e) { return now - e.last_failure > forget_after_; });
  count_.store(entries_.size(), std::memory_order_relaxed);
  for (Entry& e : entries_) {
    if (Overlaps(e.range, range)) return &e;
  }
  return nullptr;
}

Clock::TimePoint RetryWindows::Open(const Range& range, Clock::TimePoint now) {
  MutexLock lock(mu_);
  if (Entry* e = Find(range, now)) {
    e->last_failure = now;
    return e->window_start;
  }
  if (entries_.size() >= capacity_ && !entries_.empty()) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(),
                                   [](const Entry& a, const Entry& b) { return a.last_failure < b.last_failure; });
    entries_.erase(oldest);
  }
  if (capacity_ > 0) entries_.push_back(Entry{range, now, now});
  count_.store(entries_.size(), std::memory_order_relaxed);
  return now;
}

void RetryWindows::Failed(const Range& range, Clock::TimePoint now) {
  MutexLock lock(mu_);
  for (Entry& e : entries_) {
    if (Overlaps(e.range, range)) e.last_failure = std::max(e.last_failure, now);
  }
}

void RetryWindows::Restart(const Range& range, Clock::TimePoint now) {
  MutexLock lock(mu_);
  for (Entry& e : entries_) {
    if (Overlaps(e.range, range)) {
      e.window_start = now;
      e.last_failure = std::max(e.last_failure, now);
    }
  }
}

void RetryWindows::Succeeded(const Range& range) {
  if (count_.load(std::memory_order_relaxed) == 0) return;  // the common case: nothing is failing
  MutexLock lock(mu_);
  std::erase_if(entries_, [&](const Entry& e) { return Overlaps(e.range, range); });
  count_.store(entries_.size(), std::memory_order_relaxed);
}

size_t RetryWindows::size() const {
  MutexLock lock(mu_);
  return entries_.size();
}

RetryLoop::RetryLoop(const RetryOptions& options, Clock& clock, JitterSource jitter)
    : options_(options), clock_(clock), backoff_(options, std::move(jitter)) {}

Status RetryLoop::Run(std::string_view what, const std::function<AttemptResult()>& attempt,
                      const RetryObserver& on_retry) {
  Hooks hooks;
  hooks.on_retry = on_retry;
  return Run(what, attempt, hooks);
}

Status RetryLoop::Run(std::string_view what, const std::function<AttemptResult()>& attempt, const Hooks& hooks) {
  const Clock::TimePoint start = clock_.Now();
  std::optional<Clock::TimePoint> window_start;  // set at the first failure
  for (;;) {
    ++attempts_;
    const uint64_t seen = hooks.health != nullptr ? hooks.health->successes() : 0;
    AttemptResult result = attempt();
    if (hooks.health != nullptr && (result.status.ok() || result.progress)) hooks.health->RecordSuccess();
    if (result.status.ok()) return OkStatus();
    if (!result.retryable) return result.status;
    const Clock::TimePoint now = clock_.Now();
    if (result.progress) {
      window_start = now;
      backoff_.Reset();
      if (hooks.on_progress) hooks.on_progress(now);
    } else if (!window_start.has_value()) {
      window_start = hooks.window_start ? std::min(hooks.window_start(now), now) : now;
    }
    const bool reconnect = result.cause == RetryCause::kConnect;
    const std::chrono::milliseconds delay = backoff_.Next(reconnect);
    if (now + delay > *window_start + options_.deadline) {
      gave_up_ = true;
      std::string over = *window_start < start
                             ? FormatSeconds(now - start) + " (" + FormatSeconds(now - *window_start) +
                                   " since these bytes first failed)"
                             : FormatSeconds(now - start);
      return Status(result.status.code(), std::string(what) + ": gave up after " + std::to_string(attempts_) +
                                              (attempts_ == 1 ? " attempt" : " attempts") + " over " + over +
                                              ": " + result.status.message());
    }
    if (hooks.on_retry) hooks.on_retry(attempts_, result, delay);
    // A server that could not be reached, or failed (5xx), is back once any
    // request to it succeeds; a 429 or 408 asked this client to wait.
    const bool server_down =
        reconnect || (result.cause == RetryCause::kHttpStatus && result.http_status >= 500);
    if (hooks.health != nullptr && server_down) {
      hooks.health->WaitForSuccess(seen, delay);
    } else {
      clock_.Sleep(delay);
    }
  }
}

bool IsRetryableHttpStatus(long status) { return status == 408 || status == 429 || (status >= 500 && status < 600); }

std::string FormatSeconds(std::chrono::nanoseconds duration) {
  const double s = std::chrono::duration<double>(duration).count();
  char buf[32];
  if (s < 10) {
    std::snprintf(buf, sizeof(buf), "%.1f s", s);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0f s", s);
  }
  return buf;
}

std::optional<AttemptResult> ClassifyTransportFailure(const HttpResponse& r, std::string_view what,
                                                      std::string_view object_url) {
  switch (r.error) {
    case TransportError::kNone:
      return std::nullopt;
    case TransportError::kConnectFailed:
      return AttemptResult::Transient(UnavailableError(r.Summary()), false, RetryCause::kConnect);
    case TransportError::kConnectionLost:
      return AttemptResult::Transient(UnavailableError(r.Summary()), false, RetryCause::kReset);
    case TransportError::kTruncated:
      return AttemptResult::Transient(UnavailableError(r.Summary()), false, RetryCause::kTruncated);
    case TransportError::kMalformed:
      // A proxy or a server in trouble; the connection was closed, and a new
      // one may get a well-formed answer.
      return AttemptResult::Transient(UnavailableError(r.Summary()), false, RetryCause::kOther);
    case TransportError::kStalled:
      return AttemptResult::Transient(DeadlineExceededError(r.Summary()), false, RetryCause::kStall);
    case TransportError::kTimeout:
      // No status line yet: the connection (or the request) never got through.
      return AttemptResult::Transient(DeadlineExceededError(r.Summary()), false,
                                      r.status == 0 ? RetryCause::kConnect : RetryCause::kStall);
    case TransportError::kTls:
      return AttemptResult::Permanent(UnavailableError(
          "TLS failure while accessing " + std::string(object_url) + ": " + r.Summary() +
          "; check the system CA certificates (the ca-certificates package) and the endpoint URL"));
    case TransportError::kSinkOverflow:
      return AttemptResult::Permanent(InternalError(
          "the server returned more bytes than requested for " + std::string(object_url) +
          "; the endpoint may not support Range requests"));
    case TransportError::kBodyTooLarge:
    case TransportError::kOther:
      return AttemptResult::Permanent(InternalError(std::string(what) + ": " + r.Summary()));
  }
  return AttemptResult::Permanent(InternalError(std::string(what) + ": " + r.Summary()));
}

AttemptResult FromCredentialsError(const Status& s) {
  const bool transient = s.code() == ErrorCode::kUnavailable || s.code() == ErrorCode::kDeadlineExceeded;
  return transient ? AttemptResult::Transient(s, false, RetryCause::kCredentials) : AttemptResult::Permanent(s);
}

namespace {

// How many failing ranges RetryWindows remembers, and for how long after their
// last failure: long enough for the kernel (or a loader) to repeat a failed
// read, short enough that a user trying again later gets a full window.
constexpr size_t kRetryWindowCapacity = 1024;
constexpr std::chrono::seconds kRetryWindowMemory{10};

}  // namespace

StoreRetries::StoreRetries(const RetryOptions& options, Clock& clock, JitterSource jitter, Metrics& metrics,
                           std::string log_name)
    : options_(options),
      clock_(clock),
      jitter_(std::move(jitter)),
      metrics_(metrics),
      health_(clock),
      windows_(kRetryWindowCapacity, kRetryWindowMemory),
      log_limiter_(clock, std::chrono::seconds(1), std::move(log_name)) {}

Status StoreRetries::Run(const std::string& what, const std::function<AttemptResult()>& attempt,
                         const RetryWindows::Range* range) {
  RetryLoop loop(options_, clock_, jitter_);
  RetryLoop::Hooks hooks;
  hooks.health = &health_;
  if (range != nullptr) {
    hooks.window_start = [&](Clock::TimePoint now) { return windows_.Open(*range, now); };
    hooks.on_progress = [&](Clock::TimePoint now) { windows_.Restart(*range, now); };
  }
  hooks.on_retry = [&](int attempt_number, const AttemptResult& result, std::chrono::milliseconds delay) {
    retries_.fetch_add(1, std::memory_order_relaxed);
    metrics_.retries.Count(result.cause, result.http_status);
    if (range != nullptr) windows_.Failed(*range, clock_.Now());
    log_limiter_.Warn(fmt::format("{}: {}; retrying in {} ms (attempt {} failed)", what, result.status.message(),
                                  delay.count(), attempt_number));
  };
  Status s = loop.Run(what, attempt, hooks);
  if (loop.gave_up()) metrics_.retries.exhausted.fetch_add(1, std::memory_order_relaxed);
  if (s.ok() && range != nullptr) windows_.Succeeded(*range);
  return s;
}

}  // namespace tensorfs
