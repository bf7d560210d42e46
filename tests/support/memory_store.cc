#include "tests/support/memory_store.h"

#include <cstring>

#include "core/store/list_util.h"

namespace tensorfs::testing {

Generation MemoryStore::Put(std::string name, std::string bytes) {
  MutexLock lock(mu_);
  Generation g{next_generation_++};
  objects_[std::move(name)] = Object{std::move(bytes), g};
  return g;
}

void MemoryStore::Remove(const std::string& name) {
  MutexLock lock(mu_);
  objects_.erase(name);
}

int MemoryStore::read_count() const {
  MutexLock lock(mu_);
  return read_count_;
}

int MemoryStore::list_count() const {
  MutexLock lock(mu_);
  return list_count_;
}

StatusOr<ObjectInfo> MemoryStore::Stat(std::string_view name) {
  MutexLock lock(mu_);
  auto it = objects_.find(name);
  if (it == objects_.end()) return NotFoundError("no object named " + std::string(name));
  return ObjectInfo{.name = it->first, .size = it->second.bytes.size(), .generation = it->second.generation};
}

StatusOr<Listing> MemoryStore::List(std::string_view prefix, std::string_view delimiter) {
  MutexLock lock(mu_);
  ++list_count_;
  Listing listing;
  for (auto it = objects_.lower_bound(prefix); it != objects_.end() && it->first.starts_with(prefix); ++it) {
    AddToListing(ObjectInfo{.name = it->first, .size = it->second.bytes.size(),
                            .generation = it->second.generation},
                 prefix, delimiter, listing);
  }
  return listing;
}

Status MemoryStore::Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) {
  MutexLock lock(mu_);
  ++read_count_;
  auto it = objects_.find(object.name);
  if (it == objects_.end()) return NotFoundError("no object named " + object.name);
  if (it->second.generation != object.generation) {
    return StaleError(object.name + " generation " + object.generation.ToString() +
                      " was replaced by generation " + it->second.generation.ToString());
  }
  RETURN_IF_ERROR(CheckRangeWithin(object, offset, out.size(), it->second.bytes.size()));
  std::memcpy(out.data(), it->second.bytes.data() + offset, out.size());
  return OkStatus();
}

}  // namespace tensorfs::testing
