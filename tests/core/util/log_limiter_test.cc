#include "core/util/log_limiter.h"

#include <gtest/gtest.h>

#include "core/util/thread_annotations.h"

namespace tensorfs {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Time moves only when the test says so.
class ManualClock : public Clock {
 public:
  TimePoint Now() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return now_;
  }
  void Sleep(std::chrono::nanoseconds d) override { Advance(d); }
  void Advance(std::chrono::nanoseconds d) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    now_ += d;
  }

 private:
  Mutex mu_;
  TimePoint now_ GUARDED_BY(mu_){};
};

TEST(LogRateLimiterTest, OneLinePerIntervalWithASuppressedCount) {
  ManualClock clock;
  LogRateLimiter limiter(clock, seconds(1));
  EXPECT_EQ(limiter.Allow(), std::optional<uint64_t>(0));
  EXPECT_EQ(limiter.Allow(), std::nullopt);
  clock.Advance(milliseconds(500));
  EXPECT_EQ(limiter.Allow(), std::nullopt);
  EXPECT_EQ(limiter.Allow(), std::nullopt);
  clock.Advance(milliseconds(500));
  EXPECT_EQ(limiter.Allow(), std::optional<uint64_t>(3));
  EXPECT_EQ(limiter.Allow(), std::nullopt);
}

TEST(LogRateLimiterTest, SystemClockLimiterLetsTheFirstLineThrough) {
  LogRateLimiter limiter(seconds(60));
  EXPECT_EQ(limiter.Allow(), std::optional<uint64_t>(0));
  EXPECT_EQ(limiter.Allow(), std::nullopt);
}

TEST(SuppressedSuffixTest, EmptyForNoneAndCountsOtherwise) {
  EXPECT_EQ(SuppressedSuffix(0), "");
  EXPECT_EQ(SuppressedSuffix(12), " [12 similar warnings suppressed]");
}

}  // namespace
}  // namespace tensorfs
