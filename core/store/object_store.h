// ObjectStore: the one backend interface. Everything above it (the catalog, the
// namespace, the read engine) talks to storage only through these three calls.
//
// Implementations: LocalStore (a directory), GcsStore (JSON API over libcurl), and
// test doubles in tests/support (a fake whose completion the test controls, and a
// fault-injecting wrapper).
//
// Object names are '/'-separated, relative to the store's root (a GCS bucket plus
// optional prefix, or a local directory); they never start with '/'.
//
// Thread-safety: every implementation is safe to call from many threads at once;
// calls block the calling thread until they complete. Concurrency comes from the
// callers (the read engine runs many reads in parallel).
#ifndef TENSORFS_CORE_STORE_OBJECT_STORE_H_
#define TENSORFS_CORE_STORE_OBJECT_STORE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"
#include "core/util/types.h"

namespace tensorfs {

struct ObjectInfo {
  std::string name;  // relative to the store root
  uint64_t size = 0;
  Generation generation;
  int64_t mtime_ns = 0;           // last modification, for st_mtime
  std::optional<uint32_t> crc32c;  // when the store reports one
  std::string md5_base64;          // empty when absent

  ObjectId id() const { return ObjectId{name, generation}; }
};

struct Listing {
  std::vector<ObjectInfo> objects;    // objects directly under the prefix (sorted by name)
  std::vector<std::string> prefixes;  // "sub/dir/" common prefixes when a delimiter is given (sorted)
};

class ObjectStore {
 public:
  virtual ~ObjectStore() = default;

  // Metadata of one object. kNotFound if absent.
  virtual StatusOr<ObjectInfo> Stat(std::string_view name) = 0;

  // Objects whose names start with `prefix`. With delimiter "/", names containing
  // the delimiter after the prefix are rolled up into `prefixes` (as GCS does);
  // with an empty delimiter every object under the prefix is returned. All pages.
  virtual StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) = 0;

  // Reads exactly out.size() bytes at `offset` of the given object version into
  // `out`. The range must lie within the object (callers know its size).
  // kStale if that generation no longer exists; kNotFound if the object is gone.
  virtual Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) = 0;

  // A one-line description for logs and messages ("gs://bucket/prefix", "/data/ckpt").
  virtual std::string Describe() const = 0;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_OBJECT_STORE_H_
