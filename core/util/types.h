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

// The version of an object. Reads are pinned to one, so a replaced object is
// never mixed with the old one. A store gives either a number or a token:
//  - value: GCS generations (positive int64); a local file's, derived from its
//    mtime and inode; 0 when the store gave none.
//  - token: an opaque version string, S3's ETag (without its quotes); "" when
//    the store gave none.
// Both are compared (and ordered) together, so two versions are equal only
// when the store said the same of both; ToString() is what messages print.
struct Generation {
  int64_t value = 0;
  std::string token;
  auto operator<=>(const Generation&) const = default;
  std::string ToString() const { return token.empty() ? std::to_string(value) : token; }
};

// One version of one object: the cache key for its bytes.
struct ObjectId {
  std::string name;  // full object name within the store (no leading '/')
  Generation generation;
  auto operator<=>(const ObjectId&) const = default;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_TYPES_H_
