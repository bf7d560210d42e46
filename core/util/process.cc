#include "core/util/process.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <string>
#include <string_view>

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

}  // namespace tensorfs
