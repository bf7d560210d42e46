#include "core/store/http/retry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "tests/core/store/http/fakes.h"

namespace tensorfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::tensorfs::testing::FakeClock;
using ::tensorfs::testing::ManualClock;
using std::chrono::milliseconds;
using std::chrono::seconds;

JitterSource Fixed(double v) {
  return [v] { return v; };
}

TEST(BackoffTest, FullJitterAtOneFollowsTheCapSequence) {
  Backoff b(RetryOptions{}, Fixed(1.0));
  std::vector<int64_t> delays;
  for (int i = 0; i < 7; ++i) delays.push_back(b.Next().count());
  EXPECT_THAT(delays, ElementsAre(100, 200, 400, 800, 1600, 2000, 2000));
}

TEST(BackoffTest, WaitsAfterAFailureToConnectStayWithinASecond) {
  Backoff b(RetryOptions{}, Fixed(1.0));
  std::vector<int64_t> delays;
  for (int i = 0; i < 7; ++i) delays.push_back(b.Next(/*reconnect=*/true).count());
  EXPECT_THAT(delays, ElementsAre(100, 200, 400, 800, 1000, 1000, 1000));
  EXPECT_EQ(b.Next(/*reconnect=*/false), milliseconds(2000)) << "other failures keep the larger cap";
}

TEST(BackoffTest, JitterScalesTheCap) {
  Backoff b(RetryOptions{}, Fixed(0.5));
  EXPECT_EQ(b.Next(), milliseconds(50));
  EXPECT_EQ(b.Next(), milliseconds(100));
  EXPECT_EQ(b.Next(), milliseconds(200));
  Backoff zero(RetryOptions{}, Fixed(0.0));
  EXPECT_EQ(zero.Next(), milliseconds(0));
}

TEST(BackoffTest, RandomJitterStaysWithinZeroAndTheCap) {
  Backoff b(RetryOptions{}, DefaultJitter());
  int below_half = 0, above_half = 0;
  for (int round = 0; round < 200; ++round) {
    b.Reset();
    for (int i = 0; i < 12; ++i) {
      const milliseconds cap = b.NextCap();
      const milliseconds d = b.Next();
      ASSERT_GE(d.count(), 0);
      ASSERT_LE(d, cap);
      (d * 2 < cap ? below_half : above_half)++;
    }
  }
  // Full jitter spreads over the whole interval, not just its top.
  EXPECT_GT(below_half, 500);
  EXPECT_GT(above_half, 500);
}

TEST(BackoffTest, ResetReturnsToTheInitialCap) {
  Backoff b(RetryOptions{}, Fixed(1.0));
  b.Next();
  b.Next();
  b.Reset();
  EXPECT_EQ(b.Next(), milliseconds(100));
}

TEST(RetryLoopTest, RetriesTransientErrorsThenSucceeds) {
  FakeClock clock;
  RetryLoop loop(RetryOptions{}, clock, Fixed(0.5));
  int calls = 0;
  Status s = loop.Run("read", [&] {
    return ++calls < 3 ? AttemptResult::Transient(UnavailableError("HTTP 503")) : AttemptResult::Done();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(loop.attempts(), 3);
  EXPECT_THAT(clock.sleeps(), ElementsAre(milliseconds(50), milliseconds(100)));
}

TEST(RetryLoopTest, PermanentErrorStopsAtOnceUnchanged) {
  FakeClock clock;
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  Status s = loop.Run("read", [&] { return AttemptResult::Permanent(NotFoundError("gs://b/o not found")); });
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_EQ(s.message(), "gs://b/o not found");
  EXPECT_EQ(loop.attempts(), 1);
  EXPECT_TRUE(clock.sleeps().empty());
}

TEST(RetryLoopTest, GivesUpBeforeASleepWouldPassTheDeadline) {
  FakeClock clock;
  RetryOptions options;
  options.deadline = seconds(120);
  options.max_backoff = seconds(30);
  RetryLoop loop(options, clock, Fixed(1.0));
  Status s = loop.Run("read of bytes 0-99 of gs://b/o",
                      [&] { return AttemptResult::Transient(UnavailableError("HTTP 503")); });
  // Sleeps 0.1+0.2+...+25.6 (= 51.1 s) then 30, 30, 30 (= 141.1 s) would pass 120 s:
  // 11 sleeps, 12 attempts, the last at 111.1 s.
  EXPECT_EQ(clock.sleeps().size(), 11u);
  EXPECT_EQ(loop.attempts(), 12);
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(s.message(), "read of bytes 0-99 of gs://b/o: gave up after 12 attempts over 111 s: HTTP 503");
}

TEST(RetryLoopTest, LastErrorATimeoutGivesDeadlineExceeded) {
  FakeClock clock;
  RetryOptions options;
  options.deadline = seconds(1);
  RetryLoop loop(options, clock, Fixed(1.0));
  Status s = loop.Run("read", [&] { return AttemptResult::Transient(DeadlineExceededError("timed out")); });
  EXPECT_EQ(s.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("gave up after 4 attempts over 0.7 s: timed out"));
}

TEST(RetryLoopTest, ZeroDeadlineMeansASingleAttempt) {
  FakeClock clock;
  RetryOptions options;
  options.deadline = milliseconds(0);
  RetryLoop loop(options, clock, Fixed(1.0));
  Status s = loop.Run("stat", [&] { return AttemptResult::Transient(UnavailableError("HTTP 500")); });
  EXPECT_EQ(loop.attempts(), 1);
  EXPECT_THAT(s.message(), HasSubstr("gave up after 1 attempt over 0.0 s: HTTP 500"));
}

TEST(RetryLoopTest, ProgressRestartsTheDeadlineAndTheBackoff) {
  FakeClock clock;
  RetryOptions options;
  options.deadline = seconds(1);
  RetryLoop loop(options, clock, Fixed(1.0));
  int calls = 0;
  // Each attempt takes 0.8 s and delivers some bytes before failing: 6 of them
  // take far longer than the 1 s deadline, but every one made progress.
  Status s = loop.Run("read", [&] {
    clock.Advance(milliseconds(800));
    return ++calls <= 6 ? AttemptResult::Transient(UnavailableError("connection lost"), /*progress=*/true)
                        : AttemptResult::Done();
  });
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(loop.attempts(), 7);
  for (milliseconds d : clock.sleeps()) EXPECT_EQ(d, milliseconds(100));
}

TEST(RetryLoopTest, ObserverSeesEachRetry) {
  FakeClock clock;
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  std::vector<std::pair<int, int64_t>> seen;
  int calls = 0;
  Status s = loop.Run(
      "read",
      [&] { return ++calls < 3 ? AttemptResult::Transient(UnavailableError("HTTP 429")) : AttemptResult::Done(); },
      [&](int attempt, const AttemptResult& result, milliseconds delay) {
        EXPECT_EQ(result.status.message(), "HTTP 429");
        seen.emplace_back(attempt, delay.count());
      });
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(seen, ElementsAre(std::pair(1, 100), std::pair(2, 200)));
}

AttemptResult Refused() {
  return AttemptResult::Transient(UnavailableError("cannot connect (Connection refused)"), false,
                                  RetryCause::kConnect);
}

TEST(RetryLoopTest, ARefusedConnectionIsRetriedWithinASecondHoweverLongItLasts) {
  FakeClock clock;
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  int calls = 0;
  Status s = loop.Run("read", [&] { return ++calls <= 40 ? Refused() : AttemptResult::Done(); });
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(clock.sleeps().size(), 40u);
  for (milliseconds d : clock.sleeps()) EXPECT_LE(d, milliseconds(1000));
}

// One request waits in backoff after a refused connection; another request to
// the endpoint succeeds: the waiting one retries at once, long before its wait
// would have ended (the clock does not move at all).
TEST(EndpointHealthTest, ASuccessWakesARequestWaitingToReconnect) {
  ManualClock clock;
  EndpointHealth health(clock);
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  const Clock::TimePoint start = clock.Now();
  int calls = 0;
  Status status;
  std::thread waiter([&] {
    RetryLoop::Hooks hooks;
    hooks.health = &health;
    status = loop.Run("read", [&] { return ++calls == 1 ? Refused() : AttemptResult::Done(); }, hooks);
  });
  while (clock.waiting() == 0) std::this_thread::yield();
  health.RecordSuccess();
  waiter.join();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(loop.attempts(), 2);
  EXPECT_EQ(clock.Now(), start) << "woken by the success, not by the end of its wait";
}

TEST(EndpointHealthTest, WithoutASuccessTheWaitRunsItsCourse) {
  ManualClock clock;
  EndpointHealth health(clock);
  bool woken = true;
  std::thread waiter([&] { woken = health.WaitForSuccess(health.successes(), milliseconds(500)); });
  while (clock.waiting() == 0) std::this_thread::yield();
  clock.Advance(milliseconds(500));
  waiter.join();
  EXPECT_FALSE(woken);
}

TEST(EndpointHealthTest, ASuccessDuringTheFailedAttemptMeansNoWaitAtAll) {
  FakeClock clock;
  EndpointHealth health(clock);
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  RetryLoop::Hooks hooks;
  hooks.health = &health;
  int calls = 0;
  Status s = loop.Run("read", [&] {
    if (++calls > 1) return AttemptResult::Done();
    health.RecordSuccess();  // another request got through while this one was refused
    return Refused();
  }, hooks);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(clock.sleeps().empty());
}

TEST(EndpointHealthTest, AnHttpErrorWaitsItsFullDelayDespiteSuccesses) {
  FakeClock clock;
  EndpointHealth health(clock);
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  RetryLoop::Hooks hooks;
  hooks.health = &health;
  int calls = 0;
  Status s = loop.Run("read", [&] {
    if (++calls > 1) return AttemptResult::Done();
    health.RecordSuccess();  // the server answers others, but told this one to slow down
    return AttemptResult::Transient(UnavailableError("HTTP 429"), false, RetryCause::kHttpStatus, 429);
  }, hooks);
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(clock.sleeps(), ElementsAre(milliseconds(100)));
}

TEST(EndpointHealthTest, AServerErrorWaitEndsWhenAnotherRequestSucceeds) {
  FakeClock clock;
  EndpointHealth health(clock);
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  RetryLoop::Hooks hooks;
  hooks.health = &health;
  int calls = 0;
  Status s = loop.Run("read", [&] {
    if (++calls > 1) return AttemptResult::Done();
    health.RecordSuccess();  // the server is answering again
    return AttemptResult::Transient(UnavailableError("HTTP 503"), false, RetryCause::kHttpStatus, 503);
  }, hooks);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(calls, 2);
  EXPECT_TRUE(clock.sleeps().empty()) << "no full backoff once another request got through";
}

TEST(EndpointHealthTest, SuccessfulAttemptsAreRecorded) {
  FakeClock clock;
  EndpointHealth health(clock);
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  RetryLoop::Hooks hooks;
  hooks.health = &health;
  ASSERT_TRUE(loop.Run("read", [] { return AttemptResult::Done(); }, hooks).ok());
  EXPECT_EQ(health.successes(), 1u);
}

TEST(RetryLoopTest, AnInheritedWindowGivesUpAfterOneAttemptOnceItIsOver) {
  FakeClock clock;
  RetryOptions options;
  options.deadline = seconds(3);
  RetryLoop loop(options, clock, Fixed(1.0));
  RetryLoop::Hooks hooks;
  hooks.window_start = [](Clock::TimePoint now) { return now - milliseconds(3100); };
  Status s = loop.Run("read of bytes 0-9 of gs://b/o",
                      [] { return AttemptResult::Transient(UnavailableError("HTTP 503"), false,
                                                           RetryCause::kHttpStatus, 503); },
                      hooks);
  EXPECT_EQ(loop.attempts(), 1);
  EXPECT_TRUE(loop.gave_up());
  EXPECT_EQ(s.message(),
            "read of bytes 0-9 of gs://b/o: gave up after 1 attempt over 0.0 s (3.1 s since these bytes first "
            "failed): HTTP 503");
}

TEST(RetryLoopTest, PermanentErrorIsNotGivingUp) {
  FakeClock clock;
  RetryLoop loop(RetryOptions{}, clock, Fixed(1.0));
  Status s = loop.Run("read", [] { return AttemptResult::Permanent(NotFoundError("gone")); });
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(loop.gave_up());
}

using Range = RetryWindows::Range;
const Clock::TimePoint kT0 = Clock::TimePoint() + std::chrono::hours(1);

TEST(RetryWindowsTest, ARepeatedReadOfOverlappingBytesContinuesTheFirstWindow) {
  RetryWindows windows(16, seconds(10));
  EXPECT_EQ(windows.Open(Range{"m", Generation{7}, 0, 1 << 20}, kT0), kT0);
  // The kernel reads one page of it again after the EIO.
  EXPECT_EQ(windows.Open(Range{"m", Generation{7}, 8192, 12287}, kT0 + seconds(3)), kT0);
}

TEST(RetryWindowsTest, OtherBytesVersionsAndObjectsOpenTheirOwnWindow) {
  RetryWindows windows(16, seconds(10));
  windows.Open(Range{"m", Generation{7}, 0, 999}, kT0);
  const Clock::TimePoint later = kT0 + seconds(1);
  EXPECT_EQ(windows.Open(Range{"m", Generation{7}, 1000, 1999}, later), later);
  EXPECT_EQ(windows.Open(Range{"m", Generation{8}, 0, 999}, later), later);
  EXPECT_EQ(windows.Open(Range{"n", Generation{7}, 0, 999}, later), later);
}

TEST(RetryWindowsTest, ASuccessForgetsTheFailure) {
  RetryWindows windows(16, seconds(10));
  windows.Open(Range{"m", Generation{7}, 0, 999}, kT0);
  windows.Succeeded(Range{"m", Generation{7}, 500, 600});
  EXPECT_EQ(windows.size(), 0u);
  EXPECT_EQ(windows.Open(Range{"m", Generation{7}, 0, 999}, kT0 + seconds(1)), kT0 + seconds(1));
}

TEST(RetryWindowsTest, AFailureNotRepeatedForAWhileIsForgotten) {
  RetryWindows windows(16, seconds(10));
  windows.Open(Range{"m", Generation{7}, 0, 999}, kT0);
  windows.Failed(Range{"m", Generation{7}, 0, 999}, kT0 + seconds(5));
  EXPECT_EQ(windows.Open(Range{"m", Generation{7}, 0, 999}, kT0 + seconds(14)), kT0) << "failed 9 s ago: remembered";
  EXPECT_EQ(windows.Open(Range{"m", Generation{7}, 0, 999}, kT0 + seconds(25)), kT0 + seconds(25)) << "11 s: forgotten";
}

TEST(RetryWindowsTest, ProgressRestartsTheWindow) {
  RetryWindows windows(16, seconds(10));
  windows.Open(Range{"m", Generation{7}, 0, 999}, kT0);
  windows.Restart(Range{"m", Generation{7}, 0, 999}, kT0 + seconds(2));
  EXPECT_EQ(windows.Open(Range{"m", Generation{7}, 0, 999}, kT0 + seconds(3)), kT0 + seconds(2));
}

TEST(RetryWindowsTest, BeyondCapacityTheLeastRecentFailureGoes) {
  RetryWindows windows(2, seconds(10));
  windows.Open(Range{"a", Generation{1}, 0, 9}, kT0);
  windows.Open(Range{"b", Generation{1}, 0, 9}, kT0 + seconds(1));
  windows.Open(Range{"c", Generation{1}, 0, 9}, kT0 + seconds(2));
  EXPECT_EQ(windows.size(), 2u);
  EXPECT_EQ(windows.Open(Range{"a", Generation{1}, 0, 9}, kT0 + seconds(3)), kT0 + seconds(3)) << "a was dropped";
}

TEST(FormatSecondsTest, OneDecimalBelowTen) {
  EXPECT_EQ(FormatSeconds(milliseconds(1500)), "1.5 s");
  EXPECT_EQ(FormatSeconds(seconds(120)), "120 s");
}

}  // namespace
}  // namespace tensorfs
