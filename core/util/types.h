// Strong types for values that are easy to mix up.
#ifndef TENSORFS_CORE_UTIL_TYPES_H_
#define TENSORFS_CORE_UTIL_TYPES_H_

#include <compare>
#include <cstdint>
#include <string>

namespace tensorfs {

// A half-open byte range [offset, offset + length) of one object.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;

  uint64_t end() const { return offset + length; }
  bool empty() const { return length == 0; }
  bool Contains(const ByteRange& o) const { return o.offset >= offset && o.end() <= end(); }
  auto operator<=>(const ByteRange&) const = default;
};

// The version of an object. GCS generations are positive int64; a local file's
// generation is derived from its mtime and inode. Reads are pinned to one, so a
// replaced object is never mixed with the old one.
struct Generation {
  int64_t value = 0;
  auto operator<=>(const Generation&) const = default;
  std::string ToString() const { return std::to_string(value); }
};

// One version of one object: the cache key for its bytes.
struct ObjectId {
  std::string name;  // full object name within the store (no leading '/')
  Generation generation;
  auto operator<=>(const ObjectId&) const = default;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_TYPES_H_
