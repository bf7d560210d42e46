// ExpiringCache<T>: a value that a source hands out with a lifetime (an access
// token, temporary credentials), kept until shortly before it expires. It is
// fetched again once less than min(5 minutes, 10% of its lifetime) is left,
// so hour-long values refresh 5 minutes early and a 2-second test value 0.2 s
// early. One caller fetches at a time, without the lock held; meanwhile the
// others use the value while it is still valid, or wait for that fetch and
// share its outcome. If a fetch fails while the old value is still valid, the
// old value is used (with a warning).
//
// Thread-safety: every method may be called from any thread; `fetch` is called
// from one thread at a time.
#ifndef TENSORFS_CORE_UTIL_EXPIRING_CACHE_H_
#define TENSORFS_CORE_UTIL_EXPIRING_CACHE_H_

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>

#include "core/util/clock.h"
#include "core/util/status.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

template <typename T>
class ExpiringCache {
 public:
  struct Fetched {
    T value;
    std::chrono::seconds lifetime;
  };
  using Fetcher = std::function<StatusOr<Fetched>()>;

  // `what` ("access token") and `source` (where it comes from) name the log lines.
  ExpiringCache(Fetcher fetch, std::string what, std::string source, Clock& clock)
      : fetch_(std::move(fetch)), what_(std::move(what)), source_(std::move(source)), clock_(clock) {}

  // Puts an already-fetched value in the cache (a probe that fetched it).
  void Seed(T value, std::chrono::seconds lifetime) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    Store(Fetched{std::move(value), lifetime}, clock_.Now());
  }

  StatusOr<T> Get() EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      for (;;) {
        const Clock::TimePoint now = clock_.Now();
        if (value_ && now < refresh_at_) return *value_;
        if (!refreshing_) {
          refreshing_ = true;
          break;
        }
        // Another thread is fetching: keep using a value that is still valid,
        // otherwise wait for that fetch and share its outcome.
        if (value_ && now < expires_at_) return *value_;
        const uint64_t seen = refresh_seq_;
        refreshed_.Wait(mu_, [&]() REQUIRES(mu_) { return !refreshing_; });
        if (refresh_seq_ != seen && !last_refresh_.ok()) return last_refresh_;
      }
    }
    // This thread fetches, without holding mu_ across the network call.
    StatusOr<Fetched> fetched = fetch_();
    const Clock::TimePoint now = clock_.Now();
    StatusOr<T> result = InternalError("unset");
    {
      MutexLock lock(mu_);
      refreshing_ = false;
      ++refresh_seq_;
      if (fetched.ok()) {
        Store(*fetched, now);
        ++refresh_count_;
        last_refresh_ = OkStatus();
        result = *value_;
      } else {
        last_refresh_ = fetched.status();
        result = value_ && now < expires_at_ ? StatusOr<T>(*value_) : StatusOr<T>(fetched.status());
      }
    }
    refreshed_.NotifyAll();
    if (fetched.ok()) {
      spdlog::info("refreshed {} via {}, expires in {} s", what_, source_, fetched->lifetime.count());
    } else if (result.ok()) {
      spdlog::warn("could not refresh the {} ({}); using the current one until it expires", what_,
                   fetched.status().message());
    }
    return result;
  }

  // Drops the value: the next Get fetches (the server refused it).
  void Invalidate() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    value_.reset();
  }

  // Successful fetches so far (for tests and stats).
  int refresh_count() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return refresh_count_;
  }

 private:
  void Store(const Fetched& fetched, Clock::TimePoint now) REQUIRES(mu_) {
    value_ = fetched.value;
    expires_at_ = now + fetched.lifetime;
    const auto margin = std::min<std::chrono::nanoseconds>(std::chrono::minutes(5),
                                                           std::chrono::nanoseconds(fetched.lifetime) / 10);
    refresh_at_ = expires_at_ - margin;
  }

  const Fetcher fetch_;
  const std::string what_;
  const std::string source_;
  Clock& clock_;
  mutable Mutex mu_;
  CondVar refreshed_;  // signalled when a fetch ends (refreshing_ becomes false)
  std::optional<T> value_ GUARDED_BY(mu_);
  Clock::TimePoint refresh_at_ GUARDED_BY(mu_);
  Clock::TimePoint expires_at_ GUARDED_BY(mu_);
  bool refreshing_ GUARDED_BY(mu_) = false;
  uint64_t refresh_seq_ GUARDED_BY(mu_) = 0;  // completed fetches
  Status last_refresh_ GUARDED_BY(mu_);       // outcome of the latest one
  int refresh_count_ GUARDED_BY(mu_) = 0;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_EXPIRING_CACHE_H_
