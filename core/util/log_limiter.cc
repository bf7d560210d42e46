#include "core/util/log_limiter.h"

namespace tensorfs {

std::optional<uint64_t> LogRateLimiter::Allow() {
  const Clock::TimePoint now = clock_.Now();
  MutexLock lock(mu_);
  if (last_.has_value() && now - *last_ < interval_) {
    ++suppressed_;
    return std::nullopt;
  }
  last_ = now;
  uint64_t n = suppressed_;
  suppressed_ = 0;
  return n;
}

std::string SuppressedSuffix(uint64_t suppressed) {
  if (suppressed == 0) return "";
  return " [" + std::to_string(suppressed) + " similar warnings suppressed]";
}

}  // namespace tensorfs
