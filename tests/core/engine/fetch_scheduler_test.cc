// The fetch scheduler: workers run demand before prefetch, a promoted
// prefetch ahead of the others, and stop without losing a queued job.
#include "core/engine/fetch_scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace tensorfs {
namespace {

struct TestJob {
  int id = 0;
};

// Job 0 blocks its worker until `release` is set, so the jobs pushed after it
// queue up.
class FetchSchedulerTest : public ::testing::Test {
 protected:
  void StartOneWorker() {
    scheduler_.Start(1, [this](const TestJob& job) {
      if (job.id == 0) {
        started_.set_value();
        release_.get_future().wait();
      }
      std::lock_guard lock(mu_);
      ran_.push_back(job.id);
      return uint64_t{0};
    });
  }
  std::vector<int> Ran() {
    std::lock_guard lock(mu_);
    return ran_;
  }

  FetchScheduler<TestJob> scheduler_;
  std::promise<void> started_;
  std::promise<void> release_;
  std::mutex mu_;
  std::vector<int> ran_;
};

TEST_F(FetchSchedulerTest, DemandRunsFirstThenAPromotedPrefetchThenTheOthers) {
  StartOneWorker();
  scheduler_.Push(TestJob{0}, /*prefetch=*/false);
  started_.get_future().wait();
  for (int id : {1, 2, 3}) scheduler_.Push(TestJob{id}, /*prefetch=*/true);
  scheduler_.Push(TestJob{4}, /*prefetch=*/false);
  EXPECT_TRUE(scheduler_.Promote([](const TestJob& j) { return j.id == 3; }));
  EXPECT_FALSE(scheduler_.Promote([](const TestJob& j) { return j.id == 0; })) << "running already";
  EXPECT_FALSE(scheduler_.Idle());
  release_.set_value();
  while (!scheduler_.Idle()) std::this_thread::yield();
  EXPECT_EQ(Ran(), (std::vector<int>{0, 4, 3, 1, 2}));
  EXPECT_TRUE(scheduler_.Stop().empty());
  scheduler_.Join();
}

TEST_F(FetchSchedulerTest, StopHandsBackTheQueuedJobsAndTheRunningOneFinishes) {
  StartOneWorker();
  scheduler_.Push(TestJob{0}, /*prefetch=*/true);
  started_.get_future().wait();
  scheduler_.Push(TestJob{1}, /*prefetch=*/true);
  scheduler_.Push(TestJob{2}, /*prefetch=*/false);
  std::vector<TestJob> queued = scheduler_.Stop();
  ASSERT_EQ(queued.size(), 2u);
  EXPECT_EQ(queued[0].id, 2) << "demand first";
  EXPECT_EQ(queued[1].id, 1);
  EXPECT_FALSE(scheduler_.Idle()) << "job 0 runs until its run returns";
  scheduler_.Push(TestJob{3}, /*prefetch=*/false);  // dropped: stopping
  release_.set_value();
  scheduler_.Join();
  EXPECT_TRUE(scheduler_.Idle());
  EXPECT_EQ(Ran(), std::vector<int>{0});
}

// The bound: a bounded prefetch starts while fewer bounded bytes run than
// the fetches delivered within the horizon (or than the floor), and always
// when none runs; what was delivered before the horizon no longer counts.
TEST(PrefetchBudgetTest, BoundedPrefetchRunsUpToWhatWasDeliveredInTheHorizon) {
  using std::chrono::milliseconds;
  const Clock::TimePoint t0{};
  PrefetchBudget budget(/*floor=*/8, milliseconds(1000));
  EXPECT_TRUE(budget.MayStart(t0)) << "none runs";
  budget.Started(8);
  EXPECT_FALSE(budget.MayStart(t0)) << "the floor's worth runs, nothing delivered yet";
  budget.Started(0);  // a job not bounded
  budget.Finished(0, 8, t0 + milliseconds(100));
  EXPECT_FALSE(budget.MayStart(t0 + milliseconds(100))) << "8 delivered: the bound is still 8";
  budget.Finished(8, 8, t0 + milliseconds(200));
  budget.Started(8);
  EXPECT_TRUE(budget.MayStart(t0 + milliseconds(200))) << "16 delivered in the horizon: up to 16 run";
  budget.Started(8);
  EXPECT_FALSE(budget.MayStart(t0 + milliseconds(200)));
  budget.Finished(8, 8, t0 + milliseconds(1150));
  // At 1.15 s the 8 bytes delivered at 0.1 s are past the horizon: 16 remain, 8 run.
  EXPECT_TRUE(budget.MayStart(t0 + milliseconds(1150)));
  budget.Started(8);
  EXPECT_FALSE(budget.MayStart(t0 + milliseconds(1150)));
  // At 2.5 s nothing delivered is within the horizon: the floor is left.
  budget.Finished(8, 0, t0 + milliseconds(2500));  // a failed fetch delivers nothing
  EXPECT_FALSE(budget.MayStart(t0 + milliseconds(2500))) << "8 run, the floor's worth";
  budget.Finished(8, 8, t0 + milliseconds(2500));
  EXPECT_TRUE(budget.MayStart(t0 + milliseconds(2500))) << "none runs";
}

// Over the scheduler: while a bounded prefetch runs at the floor, the next
// bounded one waits; a prefetch not bounded queued after it starts, and so
// does a demand job. When the first ends, the one held back starts.
TEST(FetchSchedulerBoundTest, ABoundedPrefetchWaitsWhileOthersStart) {
  struct Job {
    int id = 0;
    uint64_t bounded = 0;
  };
  FetchScheduler<Job> scheduler;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> started;
  std::promise<void> release_first;
  std::shared_future<void> first_released = release_first.get_future().share();
  std::promise<void> release_rest;
  std::shared_future<void> rest_released = release_rest.get_future().share();
  scheduler.Start(
      4,
      [&](const Job& job) {
        {
          std::lock_guard lock(mu);
          started.push_back(job.id);
        }
        cv.notify_all();
        (job.id == 1 ? first_released : rest_released).wait();
        return uint64_t{0};
      },
      FetchScheduler<Job>::PrefetchBound{.bytes_of = [](const Job& job) { return job.bounded; },
                                         .floor = 100,
                                         .horizon = std::chrono::hours(1)});
  auto wait_started = [&](size_t n) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return started.size() >= n; });
    return started;
  };
  scheduler.Push(Job{1, 100}, /*prefetch=*/true);
  wait_started(1);
  scheduler.Push(Job{2, 100}, /*prefetch=*/true);
  scheduler.Push(Job{3, 0}, /*prefetch=*/true);
  scheduler.Push(Job{4, 100}, /*prefetch=*/false);
  std::vector<int> first_three = wait_started(3);
  std::sort(first_three.begin(), first_three.end());  // 3 and 4 start on two workers, in either order
  EXPECT_EQ(first_three, (std::vector<int>{1, 3, 4})) << "the demand job and the prefetch not bounded";
  release_first.set_value();
  EXPECT_EQ(wait_started(4).back(), 2);
  release_rest.set_value();
  while (!scheduler.Idle()) std::this_thread::yield();
  EXPECT_TRUE(scheduler.Stop().empty());
  scheduler.Join();
}

}  // namespace
}  // namespace tensorfs
