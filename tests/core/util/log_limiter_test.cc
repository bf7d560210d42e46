#include "core/util/log_limiter.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <sstream>

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

// Routes spdlog's default logger into a string for the test's lifetime.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(out_));
    logger->set_pattern("%v");
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

TEST(LogRateLimiterTest, WarnLogsTheFirstLineAndCountsTheHeldBackOnesOnTheNext) {
  CapturedLog log;
  ManualClock clock;
  LogRateLimiter limiter(clock, seconds(1));
  limiter.Warn("retry a");
  limiter.Warn("retry b");
  clock.Advance(seconds(1));
  limiter.Warn("retry c");
  EXPECT_EQ(log.text(), "retry a\nretry c [1 similar warnings suppressed]\n");
}

TEST(LogRateLimiterTest, HeldBackLinesAreReportedOnceTheIntervalPassesWithoutALaterLine) {
  CapturedLog log;
  ManualClock clock;
  LogRateLimiter limiter(clock, seconds(1), "GCS request retries");
  limiter.Warn("retry a");
  limiter.Warn("retry b");
  limiter.Warn("retry c");
  EXPECT_FALSE(limiter.FlushIfDue()) << "not before the interval has passed";
  clock.Advance(milliseconds(1500));
  EXPECT_TRUE(limiter.FlushIfDue());
  EXPECT_FALSE(limiter.FlushIfDue()) << "reported once";
  EXPECT_EQ(log.text(),
            "retry a\n2 similar warnings held back in the last 1.5 s (GCS request retries); the last: retry c\n");
}

TEST(LogRateLimiterTest, FlushReportsAtOnceAndNothingWhenNothingIsHeldBack) {
  CapturedLog log;
  ManualClock clock;
  LogRateLimiter limiter(clock, seconds(1));
  EXPECT_FALSE(limiter.Flush());
  EXPECT_EQ(limiter.Allow(), std::optional<uint64_t>(0));
  EXPECT_EQ(limiter.Allow(), std::nullopt);
  EXPECT_TRUE(limiter.Flush());
  EXPECT_EQ(log.text(), "1 similar warning held back in the last 0.0 s\n");
}

TEST(LogRateLimiterTest, FlushHeldBackWarningsReportsEveryLiveLimiter) {
  CapturedLog log;
  ManualClock clock;
  LogRateLimiter first(clock, seconds(1), "first kind");
  LogRateLimiter second(clock, seconds(1), "second kind");
  for (LogRateLimiter* l : {&first, &second}) {
    l->Warn("line");
    l->Warn("line");
  }
  FlushHeldBackWarnings();
  EXPECT_THAT(log.text(), ::testing::HasSubstr("(first kind); the last: line"));
  EXPECT_THAT(log.text(), ::testing::HasSubstr("(second kind); the last: line"));
}

TEST(LogRateLimiterTest, DestructionReportsWhatIsHeldBack) {
  CapturedLog log;
  ManualClock clock;
  {
    LogRateLimiter limiter(clock, seconds(1));
    limiter.Warn("x");
    limiter.Warn("y");
  }
  EXPECT_THAT(log.text(), ::testing::HasSubstr("1 similar warning held back in the last 0.0 s; the last: y"));
}

TEST(SuppressedSuffixTest, EmptyForNoneAndCountsOtherwise) {
  EXPECT_EQ(SuppressedSuffix(0), "");
  EXPECT_EQ(SuppressedSuffix(12), " [12 similar warnings suppressed]");
}

}  // namespace
}  // namespace tensorfs
