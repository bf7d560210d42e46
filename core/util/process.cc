#include "core/util/process.h"

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
    const size_t digits = line.find_first_not_of(" \t", kTgid.size());
    uint64_t tgid = 0;
    if (digits == std::string::npos) break;
    auto [end, ec] = std::from_chars(line.data() + digits, line.data() + line.size(), tgid);
    if (ec == std::errc() && tgid != 0) return tgid;
    break;
  }
  return tid;
}

}  // namespace tensorfs
