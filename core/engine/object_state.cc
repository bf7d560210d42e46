#include "core/engine/object_state.h"

#include <algorithm>
#include <iterator>

namespace tensorfs {

bool GivenRanges::Holds(ByteRange range) const {
  auto it = ranges_.upper_bound(range.offset);
  return it != ranges_.begin() && std::prev(it)->second >= range.end();
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

void GivenRanges::Remove(ByteRange range) {
  auto it = ranges_.upper_bound(range.offset);
  if (it != ranges_.begin() && std::prev(it)->second > range.offset) --it;
  while (it != ranges_.end() && it->first < range.end()) {
    const uint64_t begin = it->first;
    const uint64_t end = it->second;
    it = ranges_.erase(it);
    if (begin < range.offset) ranges_.emplace(begin, range.offset);
    if (end > range.end()) it = ranges_.emplace(range.end(), end).first;
  }
}

}  // namespace tensorfs
