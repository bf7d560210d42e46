#include "core/util/process.h"

#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

namespace tensorfs {
namespace {

TEST(ProcessTest, AThreadBelongsToItsProcess) {
  const auto self = static_cast<uint64_t>(::getpid());
  EXPECT_EQ(ThreadGroupOf(self), self);
  uint64_t other_thread = 0;
  uint64_t its_group = 0;
  std::thread t([&] {
    other_thread = static_cast<uint64_t>(::syscall(SYS_gettid));
    its_group = ThreadGroupOf(other_thread);
  });
  t.join();
  EXPECT_NE(other_thread, self);
  EXPECT_EQ(its_group, self);
}

TEST(ProcessTest, NoThreadIsNoProcessAndAnUnknownOneIsItself) {
  EXPECT_EQ(ThreadGroupOf(0), 0u);
  // Above the kernel's largest pid (4194304): no /proc entry.
  EXPECT_EQ(ThreadGroupOf(uint64_t{1} << 40), uint64_t{1} << 40);
}

}  // namespace
}  // namespace tensorfs
