#include "core/util/clock.h"

#include <thread>

namespace tensorfs {
namespace {

class RealClock : public Clock {
 public:
  TimePoint Now() override { return std::chrono::steady_clock::now(); }
  void Sleep(std::chrono::nanoseconds duration) override { std::this_thread::sleep_for(duration); }
};

}  // namespace

Clock& SystemClock() {
  static RealClock* clock = new RealClock();
  return *clock;
}

}  // namespace tensorfs
