// LocalStore: an ObjectStore over a local directory tree.
//
// Object names are paths relative to the root, '/'-separated. Only regular
// files (symlinks followed) are objects; directories appear as common prefixes.
// A file's generation is derived from its inode, size and mtime, so a file
// replaced or rewritten under a mount reads as kStale rather than mixed bytes.
//
// Thread-safety: stateless after construction; all methods may run concurrently.
#ifndef TENSORFS_CORE_STORE_LOCAL_STORE_H_
#define TENSORFS_CORE_STORE_LOCAL_STORE_H_

#include <memory>
#include <string>

#include "core/store/object_store.h"

namespace tensorfs {

class LocalStore : public ObjectStore {
 public:
  // `root` must name an existing, readable directory.
  static StatusOr<std::unique_ptr<LocalStore>> Create(std::string root);

  StatusOr<ObjectInfo> Stat(std::string_view name) override;
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override;
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override;
  std::string Describe() const override { return root_; }

 private:
  explicit LocalStore(std::string root) : root_(std::move(root)) {}
  std::string PathOf(std::string_view name) const;
  // Appends every object under directory `dir` (a name prefix ending in '/' or
  // empty) whose name starts with `prefix`, in name order.
  Status ListDir(const std::string& dir, std::string_view prefix, std::string_view delimiter,
                 Listing& listing);

  const std::string root_;  // no trailing '/'
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_LOCAL_STORE_H_
