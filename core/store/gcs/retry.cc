#include "core/store/gcs/retry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

namespace tensorfs {
namespace {

std::string WithServerMessage(std::string text, const HttpResponse& r) {
  std::string m = ServerErrorMessage(r.body);
  if (!m.empty()) text += " (server said: " + m + ")";
  return text;
}

}  // namespace

JitterSource DefaultJitter() {
  return [] {
    thread_local std::mt19937_64 rng{std::random_device{}()};
    return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  };
}

Backoff::Backoff(const RetryOptions& options, JitterSource jitter)
    : options_(options), jitter_(std::move(jitter)), cap_(options.initial_backoff) {}

std::chrono::milliseconds Backoff::Next() {
  const double fraction = std::clamp(jitter_(), 0.0, 1.0);
  const auto delay = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(fraction * static_cast<double>(cap_.count()))));
  const double next = static_cast<double>(cap_.count()) * options_.multiplier;
  cap_ = next >= static_cast<double>(options_.max_backoff.count())
             ? options_.max_backoff
             : std::chrono::milliseconds(static_cast<int64_t>(next));
  return delay;
}

void Backoff::Reset() { cap_ = options_.initial_backoff; }

RetryLoop::RetryLoop(const RetryOptions& options, Clock& clock, JitterSource jitter)
    : options_(options), clock_(clock), backoff_(options, std::move(jitter)) {}

Status RetryLoop::Run(std::string_view what, const std::function<AttemptResult()>& attempt,
                      const RetryObserver& on_retry) {
  const Clock::TimePoint start = clock_.Now();
  Clock::TimePoint window_start = start;
  for (;;) {
    ++attempts_;
    AttemptResult result = attempt();
    if (result.status.ok()) return OkStatus();
    if (!result.retryable) return result.status;
    const Clock::TimePoint now = clock_.Now();
    if (result.progress) {
      window_start = now;
      backoff_.Reset();
    }
    const std::chrono::milliseconds delay = backoff_.Next();
    if (now + delay > window_start + options_.deadline) {
      return Status(result.status.code(),
                    std::string(what) + ": gave up after " + std::to_string(attempts_) +
                        (attempts_ == 1 ? " attempt" : " attempts") + " over " + FormatSeconds(now - start) +
                        ": " + result.status.message());
    }
    if (on_retry) on_retry(attempts_, result.status, delay);
    clock_.Sleep(delay);
  }
}

bool IsRetryableHttpStatus(long status) { return status == 408 || status == 429 || (status >= 500 && status < 600); }

std::string ServerErrorMessage(std::string_view body) {
  if (body.empty() || body.front() != '{') return "";
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  auto it = j.find("error");
  if (it == j.end()) return "";
  if (it->is_object()) {
    auto m = it->find("message");
    if (m != it->end() && m->is_string()) return m->get<std::string>();
  } else if (it->is_string()) {
    // OAuth token endpoints: {"error": "invalid_grant", "error_description": "..."}.
    std::string s = it->get<std::string>();
    auto d = j.find("error_description");
    if (d != j.end() && d->is_string()) s += ": " + d->get<std::string>();
    return s;
  }
  return "";
}

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

AttemptResult ClassifyHttpResponse(const HttpResponse& r, const RequestContext& c) {
  switch (r.error) {
    case TransportError::kNone:
      break;
    case TransportError::kConnectFailed:
    case TransportError::kConnectionLost:
      return AttemptResult::Transient(UnavailableError(r.Summary()));
    case TransportError::kTimeout:
      return AttemptResult::Transient(DeadlineExceededError(r.Summary()));
    case TransportError::kTls:
      return AttemptResult::Permanent(UnavailableError(
          "TLS failure while accessing " + c.object_url + ": " + r.Summary() +
          "; check the system CA certificates (the ca-certificates package) and the endpoint URL"));
    case TransportError::kSinkOverflow:
      return AttemptResult::Permanent(InternalError(
          "the server returned more bytes than requested for " + c.object_url +
          "; the endpoint may not support Range requests"));
    case TransportError::kBodyTooLarge:
    case TransportError::kOther:
      return AttemptResult::Permanent(InternalError(c.what + ": " + r.Summary()));
  }

  const long s = r.status;
  if (IsRetryableHttpStatus(s)) {
    return AttemptResult::Transient(UnavailableError(WithServerMessage("HTTP " + std::to_string(s), r)));
  }
  switch (s) {
    case 404:
      if (c.generation.has_value()) {
        return AttemptResult::Permanent(StaleError(c.object_url + " changed while mounted (generation " +
                                                   c.generation->ToString() + " is gone)"));
      }
      if (c.is_listing) {
        return AttemptResult::Permanent(NotFoundError(WithServerMessage(
            "bucket gs://" + c.bucket + " not found (HTTP 404); check the bucket name in the URL", r)));
      }
      return AttemptResult::Permanent(NotFoundError(c.object_url + " not found"));
    case 412:
      return AttemptResult::Permanent(StaleError(
          c.object_url + " changed while mounted (generation " +
          (c.generation ? c.generation->ToString() : std::string("?")) + " is gone)"));
    case 401: {
      std::string fix = c.anonymous
                            ? "the bucket is not public: drop -o anonymous to use Application Default "
                              "Credentials, or pass -o key_file=PATH"
                            : "the credentials may be expired, revoked or for another project: run "
                              "'gcloud auth application-default login' or pass a valid service-account "
                              "key with -o key_file=PATH";
      return AttemptResult::Permanent(PermissionDeniedError(WithServerMessage(
          "credentials rejected (HTTP 401) for " + c.object_url + " using " + c.credentials, r) + "; " + fix));
    }
    case 403: {
      std::string fix = c.anonymous
                            ? "the bucket does not allow public reads: drop -o anonymous to use Application "
                              "Default Credentials, or pass -o key_file=PATH"
                            : "grant that account roles/storage.objectViewer on gs://" + c.bucket +
                                  ", or use other credentials (-o key_file=PATH)";
      return AttemptResult::Permanent(PermissionDeniedError(
          WithServerMessage("access denied (HTTP 403) to " + c.object_url + " using " + c.credentials, r) +
          "; " + fix));
    }
    case 400:
      return AttemptResult::Permanent(
          InvalidArgumentError(WithServerMessage(c.what + ": bad request (HTTP 400)", r)));
    case 416:
      return AttemptResult::Permanent(InvalidArgumentError(
          c.what + ": range not satisfiable (HTTP 416); the object is shorter than the read expects"));
    default:
      return AttemptResult::Permanent(
          InternalError(WithServerMessage(c.what + ": unexpected HTTP " + std::to_string(s), r)));
  }
}

}  // namespace tensorfs
