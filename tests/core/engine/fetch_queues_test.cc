// FetchQueues: demand before prefetch, each in order; a promoted prefetch runs
// after the demand queued before it and before every other prefetch.
#include "core/engine/fetch_queues.h"

#include <gtest/gtest.h>

#include <vector>

namespace tensorfs {
namespace {

struct TestJob {
  int id = 0;
};

std::vector<int> Drain(FetchQueues<TestJob>& queues) {
  std::vector<int> order;
  while (std::optional<TestJob> job = queues.Pop()) order.push_back(job->id);
  return order;
}

TEST(FetchQueuesTest, DemandRunsBeforePrefetchEachInTheOrderQueued) {
  FetchQueues<TestJob> queues;
  EXPECT_TRUE(queues.empty());
  EXPECT_FALSE(queues.Pop().has_value());
  queues.Push({1}, /*prefetch=*/true);
  queues.Push({2}, /*prefetch=*/false);
  queues.Push({3}, /*prefetch=*/true);
  queues.Push({4}, /*prefetch=*/false);
  EXPECT_EQ(queues.size(), 4u);
  EXPECT_EQ(Drain(queues), (std::vector<int>{2, 4, 1, 3}));
  EXPECT_TRUE(queues.empty());
}

// A bound on prefetch in flight holds some prefetches back: the oldest one
// it lets start is taken, and demand is taken whatever it says.
TEST(FetchQueuesTest, PopTakesTheOldestPrefetchThatMayStartAndDemandAlways) {
  FetchQueues<TestJob> queues;
  for (int id : {1, 2, 3}) queues.Push({id}, /*prefetch=*/true);
  queues.Push({4}, /*prefetch=*/false);
  auto odd = [](const TestJob& j) { return j.id % 2 == 1; };
  auto none = [](const TestJob&) { return false; };
  bool prefetch = true;
  EXPECT_EQ(queues.Pop(none, &prefetch)->id, 4) << "demand";
  EXPECT_FALSE(prefetch);
  std::optional<TestJob> job = queues.Pop([](const TestJob& j) { return j.id == 2; }, &prefetch);
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->id, 2) << "past the prefetch held back";
  EXPECT_TRUE(prefetch);
  EXPECT_FALSE(queues.Pop(none).has_value()) << "every prefetch held back";
  EXPECT_EQ(queues.size(), 2u);
  EXPECT_EQ(queues.Pop(odd)->id, 1);
  EXPECT_EQ(queues.Pop(odd)->id, 3);
  EXPECT_TRUE(queues.empty());
}

// Prefetches no longer wanted are taken out, in queue order; demand jobs
// (a read waits for them) stay, and so does the order of the rest.
TEST(FetchQueuesTest, WithdrawTakesOutOnlyTheQueuedPrefetchesItMatches) {
  FetchQueues<TestJob> queues;
  for (int id : {1, 2, 3, 4, 5}) queues.Push({id}, /*prefetch=*/true);
  queues.Push({12}, /*prefetch=*/false);
  std::vector<int> withdrawn;
  for (const TestJob& j : queues.Withdraw([](const TestJob& j) { return j.id % 2 == 0; })) withdrawn.push_back(j.id);
  EXPECT_EQ(withdrawn, (std::vector<int>{2, 4}));
  EXPECT_TRUE(queues.Withdraw([](const TestJob& j) { return j.id == 2; }).empty());
  EXPECT_EQ(queues.size(), 4u);
  EXPECT_EQ(Drain(queues), (std::vector<int>{12, 1, 3, 5}));
}

TEST(FetchQueuesTest, APromotedPrefetchRunsAfterTheDemandBeforeItAndAheadOfOtherPrefetches) {
  FetchQueues<TestJob> queues;
  for (int id : {1, 2, 3}) queues.Push({id}, /*prefetch=*/true);
  queues.Push({10}, /*prefetch=*/false);
  EXPECT_TRUE(queues.Promote([](const TestJob& j) { return j.id == 3; }));
  EXPECT_FALSE(queues.Promote([](const TestJob& j) { return j.id == 3; }));   // not a prefetch any more
  EXPECT_FALSE(queues.Promote([](const TestJob& j) { return j.id == 10; }));  // demand already
  EXPECT_EQ(Drain(queues), (std::vector<int>{10, 3, 1, 2}));
}

TEST(FetchQueuesTest, TakeAllEmptiesBothQueuesDemandFirst) {
  FetchQueues<TestJob> queues;
  queues.Push({1}, /*prefetch=*/true);
  queues.Push({2}, /*prefetch=*/false);
  std::vector<TestJob> all = queues.TakeAll();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].id, 2);
  EXPECT_EQ(all[1].id, 1);
  EXPECT_TRUE(queues.empty());
}

}  // namespace
}  // namespace tensorfs
