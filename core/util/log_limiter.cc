#include "core/util/log_limiter.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <mutex>
#include <set>
#include <thread>

namespace tensorfs {
namespace {

// Every live limiter, and the thread that reports lines held back once their
// limiter's interval has passed. Never destroyed: the thread outlives main().
struct Registry {
  Mutex mu;
  std::set<LogRateLimiter*> live GUARDED_BY(mu);
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

constexpr std::chrono::milliseconds kReportTick{250};

// Called with a limiter's mu_ held, so it takes no lock of the registry's:
// the reporter takes the registry's, then each limiter's (the lock order),
// and a held-back line taking the registry's here deadlocked with it.
void StartReporterOnce() {
  static std::once_flag started;
  std::call_once(started, [] {
    std::thread([] {
      Registry& r = TheRegistry();
      for (;;) {
        std::this_thread::sleep_for(kReportTick);
        MutexLock lock(r.mu);
        for (LogRateLimiter* limiter : r.live) {
          if (limiter->reported_in_background()) limiter->FlushIfDue();
        }
      }
    }).detach();
  });
}

std::string Seconds(std::chrono::nanoseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", std::chrono::duration<double>(d).count());
  return buf;
}

}  // namespace

LogRateLimiter::LogRateLimiter(Clock& clock, std::chrono::nanoseconds interval, std::string what)
    : clock_(clock), interval_(interval), what_(std::move(what)), background_(&clock == &SystemClock()) {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  r.live.insert(this);
}

LogRateLimiter::~LogRateLimiter() {
  Registry& r = TheRegistry();
  {
    MutexLock lock(r.mu);
    r.live.erase(this);
  }
  Flush();
}

std::optional<uint64_t> LogRateLimiter::Allow() {
  const Clock::TimePoint now = clock_.Now();
  MutexLock lock(mu_);
  if (last_.has_value() && now - *last_ < interval_) {
    HoldBack(std::nullopt);
    return std::nullopt;
  }
  last_ = now;
  uint64_t n = suppressed_;
  suppressed_ = 0;
  last_held_back_.clear();
  return n;
}

void LogRateLimiter::Warn(std::string line) {
  const Clock::TimePoint now = clock_.Now();
  uint64_t n = 0;
  {
    MutexLock lock(mu_);
    if (last_.has_value() && now - *last_ < interval_) {
      HoldBack(std::move(line));
      return;
    }
    last_ = now;
    n = suppressed_;
    suppressed_ = 0;
    last_held_back_.clear();
  }
  spdlog::warn("{}{}", line, SuppressedSuffix(n));
}

void LogRateLimiter::HoldBack(std::optional<std::string> line) {
  if (line.has_value()) last_held_back_ = std::move(*line);
  if (++suppressed_ == 1 && background_) StartReporterOnce();
}

bool LogRateLimiter::Flush() { return Report(/*only_if_due=*/false); }

bool LogRateLimiter::FlushIfDue() { return Report(/*only_if_due=*/true); }

bool LogRateLimiter::Report(bool only_if_due) {
  const Clock::TimePoint now = clock_.Now();
  uint64_t n = 0;
  std::string line;
  std::chrono::nanoseconds since{0};
  {
    MutexLock lock(mu_);
    if (suppressed_ == 0) return false;
    if (only_if_due && last_.has_value() && now - *last_ < interval_) return false;
    n = suppressed_;
    since = last_.has_value() ? now - *last_ : std::chrono::nanoseconds(0);
    line = std::move(last_held_back_);
    suppressed_ = 0;
    last_held_back_.clear();
    // The report counts as the line of this interval.
    last_ = now;
  }
  std::string text = std::to_string(n) + (n == 1 ? " similar warning" : " similar warnings") +
                     " held back in the last " + Seconds(since);
  if (!what_.empty()) text += " (" + what_ + ")";
  if (!line.empty()) text += "; the last: " + line;
  spdlog::warn("{}", text);
  return true;
}

std::string SuppressedSuffix(uint64_t suppressed) {
  if (suppressed == 0) return "";
  return " [" + std::to_string(suppressed) + " similar warnings suppressed]";
}

void FlushHeldBackWarnings() {
  Registry& r = TheRegistry();
  MutexLock lock(r.mu);
  for (LogRateLimiter* limiter : r.live) limiter->Flush();
}

}  // namespace tensorfs
