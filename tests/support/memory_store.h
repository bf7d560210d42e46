// MemoryStore: an ObjectStore over a map held in memory, for tests.
//
// Put() creates or replaces an object and gives it a new, larger generation, as
// GCS does, so tests can check that reads pinned to the old generation get kStale.
//
// Thread-safety: all methods may be called concurrently.
#ifndef TENSORFS_TESTS_SUPPORT_MEMORY_STORE_H_
#define TENSORFS_TESTS_SUPPORT_MEMORY_STORE_H_

#include <map>
#include <string>

#include "core/store/object_store.h"
#include "core/util/thread_annotations.h"

namespace tensorfs::testing {

class MemoryStore : public ObjectStore {
 public:
  // Creates or replaces `name`; returns its new generation.
  Generation Put(std::string name, std::string bytes) EXCLUDES(mu_);
  void Remove(const std::string& name) EXCLUDES(mu_);
  // Number of Read() calls so far.
  int read_count() const EXCLUDES(mu_);
  // Number of List() calls so far.
  int list_count() const EXCLUDES(mu_);

  StatusOr<ObjectInfo> Stat(std::string_view name) override EXCLUDES(mu_);
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override EXCLUDES(mu_);
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override EXCLUDES(mu_);
  std::string Describe() const override { return "memory"; }

 private:
  struct Object {
    std::string bytes;
    Generation generation;
  };
  mutable Mutex mu_;
  std::map<std::string, Object, std::less<>> objects_ GUARDED_BY(mu_);
  int64_t next_generation_ GUARDED_BY(mu_) = 1000;
  int read_count_ GUARDED_BY(mu_) = 0;
  int list_count_ GUARDED_BY(mu_) = 0;
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_MEMORY_STORE_H_
