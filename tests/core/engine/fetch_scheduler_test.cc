// The fetch scheduler: workers run demand before prefetch, a promoted
// prefetch ahead of the others, and stop without losing a queued job.
#include "core/engine/fetch_scheduler.h"

#include <gtest/gtest.h>

#include <future>
#include <mutex>

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

}  // namespace
}  // namespace tensorfs
