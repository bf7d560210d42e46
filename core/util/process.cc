#include "core/util/process.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

// A build with AddressSanitizer has LeakSanitizer too (gcc says so with
// __SANITIZE_ADDRESS__, clang with __has_feature).
#if defined(__SANITIZE_ADDRESS__)
#define TENSORFS_LEAK_CHECK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TENSORFS_LEAK_CHECK 1
#endif
#endif
#ifdef TENSORFS_LEAK_CHECK
#include <sanitizer/lsan_interface.h>
#endif

namespace tensorfs {

uint64_t ThreadGroupOf(uint64_t tid) {
  if (tid == 0) return 0;
  std::ifstream status("/proc/" + std::to_string(tid) + "/status");
  constexpr std::string_view kTgid = "Tgid:";
  for (std::string line; std::getline(status, line);) {
    if (!line.starts_with(kTgid)) continue;
    const size_t digits = std::min(line.find_first_not_of(" \t", kTgid.size()), line.size());
    uint64_t tgid = 0;
    auto [end, ec] = std::from_chars(line.data() + digits, line.data() + line.size(), tgid);
    return ec == std::errc() && tgid != 0 ? tgid : tid;
  }
  return tid;
}

void ExitNow(int status) {
#ifdef TENSORFS_LEAK_CHECK
  __lsan_do_leak_check();
#endif
  std::_Exit(status);
}

}  // namespace tensorfs
