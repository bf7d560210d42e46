#include "core/engine/object_state.h"

#include <algorithm>
#include <iterator>

namespace tensorfs {

bool GivenRanges::Holds(ByteRange range) const {
  auto it = ranges_.upper_bound(range.offset);
  return it != ranges_.begin() && std::prev(it)->second >= range.end();
}

std::vector<ByteRange> GivenRanges::NotGiven(ByteRange range) const {
  std::vector<ByteRange> out;
  uint64_t at = range.offset;
  auto it = ranges_.upper_bound(at);
  if (it != ranges_.begin() && std::prev(it)->second > at) --it;
  for (; it != ranges_.end() && it->first < range.end() && at < range.end(); ++it) {
    if (it->first > at) out.push_back(ByteRange{at, it->first - at});
    at = std::max(at, it->second);
  }
  if (at < range.end()) out.push_back(ByteRange{at, range.end() - at});
  return out;
}

void GivenRanges::Add(ByteRange range) {
  uint64_t begin = range.offset;
  uint64_t end = range.end();
  auto it = ranges_.upper_bound(begin);
  if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
  while (it != ranges_.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    it = ranges_.erase(it);
  }
  ranges_.emplace(begin, end);
}

bool GivenRanges::Dropped(ByteRange range) {
  // Only whole pages: the kernel reads the page a given range ends in (part
  // of it not given) with the bytes after it.
  constexpr uint64_t kPage = 4096;
  auto it = ranges_.upper_bound(range.offset);
  if (it != ranges_.begin()) --it;
  for (; it != ranges_.end() && it->first < range.end(); ++it) {
    const uint64_t b = (it->first + kPage - 1) & ~(kPage - 1);
    const uint64_t e = it->second & ~(kPage - 1);
    if (b < e && b < range.end() && e > range.offset) {
      ranges_.clear();
      return true;
    }
  }
  return false;
}

}  // namespace tensorfs
