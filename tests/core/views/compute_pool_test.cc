// ComputePool: tasks run side by side on its threads, and every task posted
// runs, the ones still queued when it is destroyed included.
#include "core/views/compute_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "tests/support/test_util.h"

namespace tensorfs {
namespace {

TEST(ComputePoolTest, TasksRunSideBySide) {
  ComputePool pool(2);
  ASSERT_EQ(pool.threads(), 2);
  // Each task waits for the other to start: they finish only if they run at once.
  std::atomic<int> started{0};
  std::atomic<int> finished{0};
  for (int i = 0; i < 2; ++i) {
    pool.Post([&] {
      ++started;
      (void)testing::WaitUntil([&] { return started.load() == 2; }, "the other task to start");
      ++finished;
    });
  }
  ASSERT_TRUE(testing::WaitUntil([&] { return finished.load() == 2; }, "both tasks to finish"));
  EXPECT_EQ(started.load(), 2);
}

TEST(ComputePoolTest, EveryPostedTaskRunsBeforeThePoolIsGone) {
  std::atomic<int> ran{0};
  {
    ComputePool pool(1);
    pool.Post([] { std::this_thread::sleep_for(std::chrono::milliseconds(20)); });  // the others queue behind it
    for (int i = 0; i < 100; ++i) pool.Post([&] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 100);
}

TEST(ComputePoolTest, ZeroThreadsMeansOnePerCore) {
  ComputePool pool;
  EXPECT_EQ(pool.threads(), std::max(1, static_cast<int>(std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace tensorfs
