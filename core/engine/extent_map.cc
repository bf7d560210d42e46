#include "core/engine/extent_map.h"

#include <iterator>

namespace tensorfs {

ExtentMap::Map::const_iterator ExtentMap::FirstEndingAfter(uint64_t offset) const {
  auto it = by_begin_.upper_bound(offset);
  if (it != by_begin_.begin() && std::prev(it)->second.range.end() > offset) --it;
  return it;
}

std::vector<ExtentMap::Extent> ExtentMap::Overlapping(ByteRange range) const {
  std::vector<Extent> found;
  for (auto it = FirstEndingAfter(range.offset); it != by_begin_.end() && it->first < range.end(); ++it) {
    found.push_back(it->second);
  }
  return found;
}

bool ExtentMap::Overlaps(ByteRange range) const {
  auto it = FirstEndingAfter(range.offset);
  return it != by_begin_.end() && it->first < range.end();
}

const ExtentMap::Extent* ExtentMap::At(uint64_t offset) const {
  auto it = FirstEndingAfter(offset);
  return it != by_begin_.end() && it->first <= offset ? &it->second : nullptr;
}

const ExtentMap::Extent* ExtentMap::Exactly(ByteRange range) const {
  auto it = by_begin_.find(range.offset);
  return it != by_begin_.end() && it->second.range.length == range.length ? &it->second : nullptr;
}

void ExtentMap::Erase(const Extent& extent) {
  auto it = by_begin_.find(extent.range.offset);
  if (it != by_begin_.end() && it->second.id == extent.id) by_begin_.erase(it);
}

bool ExtentMap::Covers(ByteRange range) const {
  uint64_t at = range.offset;
  for (auto it = FirstEndingAfter(at); at < range.end() && it != by_begin_.end() && it->second.range.offset <= at;
       ++it) {
    at = it->second.range.end();
  }
  return at >= range.end();
}

}  // namespace tensorfs
