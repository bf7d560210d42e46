// ExtentMap: which byte ranges of one object version the cache holds or is
// loading, by file offset. Each extent is one cache entry (one range request's
// bytes) with an identity of its own (ExtentId, never reused), so a read that
// took an extent's bytes can name them after the extent was evicted and
// another extent took its place.
//
// Extents never overlap: a new extent replaces the ones it overlaps (see
// ChunkCache::InsertLoading). Every extent lies within one planned chunk: a
// chunk, or a part of it (the gaps a slice reader or a view's run of tensors
// needed), never reaching across a chunk boundary.
//
// Thread-safety: none of its own; only ChunkCache changes it.
#ifndef TENSORFS_CORE_ENGINE_EXTENT_MAP_H_
#define TENSORFS_CORE_ENGINE_EXTENT_MAP_H_

#include <cstdint>
#include <map>
#include <vector>

#include "core/util/types.h"

namespace tensorfs {

using ExtentId = uint64_t;

class ExtentMap {
 public:
  struct Extent {
    ByteRange range;
    ExtentId id = 0;
  };

  // The extents overlapping `range`, in order of offset.
  std::vector<Extent> Overlapping(ByteRange range) const;
  // Whether any extent overlaps `range` (Overlapping without the copies).
  bool Overlaps(ByteRange range) const;
  // The extent holding byte `offset`, or null. Valid until the map changes.
  const Extent* At(uint64_t offset) const;
  // The extent that covers exactly `range` (a whole chunk, cached or coming),
  // or null. Valid until the map changes.
  const Extent* Exactly(ByteRange range) const;
  bool Holds(ByteRange range) const { return Exactly(range) != nullptr; }
  // Whether extents, one or several, cover every byte of `range`.
  bool Covers(ByteRange range) const;
  size_t size() const { return by_begin_.size(); }

 private:
  friend class ChunkCache;
  // `extent` overlaps none in the map (ChunkCache removes those first).
  void Insert(const Extent& extent) { by_begin_[extent.range.offset] = extent; }
  // Removes `extent` if the map still holds it.
  void Erase(const Extent& extent);

  using Map = std::map<uint64_t, Extent>;
  // The first extent that ends after `offset` (extents never overlap, so
  // the one holding it, if any, else the next after it).
  Map::const_iterator FirstEndingAfter(uint64_t offset) const;

  Map by_begin_;  // by first byte
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_EXTENT_MAP_H_
