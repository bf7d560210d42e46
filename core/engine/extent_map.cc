#include "core/engine/extent_map.h"

#include <iterator>

namespace tensorfs {

std::vector<ExtentMap::Extent> ExtentMap::Overlapping(ByteRange range) const {
  std::vector<Extent> found;
  auto it = by_begin_.upper_bound(range.offset);
  if (it != by_begin_.begin() && std::prev(it)->second.range.end() > range.offset) --it;
  for (; it != by_begin_.end() && it->first < range.end(); ++it) found.push_back(it->second);
  return found;
}

bool ExtentMap::Overlaps(ByteRange range) const {
  auto it = by_begin_.upper_bound(range.offset);
  if (it != by_begin_.begin() && std::prev(it)->second.range.end() > range.offset) return true;
  return it != by_begin_.end() && it->first < range.end();
}

const ExtentMap::Extent* ExtentMap::At(uint64_t offset) const {
  auto it = by_begin_.upper_bound(offset);
  if (it == by_begin_.begin()) return nullptr;
  --it;
  return it->second.range.end() > offset ? &it->second : nullptr;
}

const ExtentMap::Extent* ExtentMap::Exactly(ByteRange range) const {
  auto it = by_begin_.find(range.offset);
  return it != by_begin_.end() && it->second.range.length == range.length ? &it->second : nullptr;
}

void ExtentMap::Erase(const Extent& extent) {
  auto it = by_begin_.find(extent.range.offset);
  if (it != by_begin_.end() && it->second.id == extent.id) by_begin_.erase(it);
}

}  // namespace tensorfs
