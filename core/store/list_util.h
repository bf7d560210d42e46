// Shared helpers for ObjectStore implementations.
#ifndef TENSORFS_CORE_STORE_LIST_UTIL_H_
#define TENSORFS_CORE_STORE_LIST_UTIL_H_

#include <string_view>

#include "core/store/object_store.h"

namespace tensorfs {

// Adds `info` to `listing` as GCS would for (prefix, delimiter): either as an
// object, or rolled up into a common prefix when the delimiter occurs in the
// name after the prefix. The caller has checked that the name starts with prefix.
// Prefixes are deduplicated only if added in sorted order (as listings are).
void AddToListing(ObjectInfo info, std::string_view prefix, std::string_view delimiter,
                  Listing& listing);

// Checks that [offset, offset+length) lies within an object of `size` bytes.
Status CheckRangeWithin(const ObjectId& object, uint64_t offset, uint64_t length, uint64_t size);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_LIST_UTIL_H_
