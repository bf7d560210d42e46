// HandleTable: owns the objects whose addresses the kernel holds as file
// handles (fuse_file_info::fh: an open file's reader, an open directory's
// listing), from the open that makes each to its release. A session that ends
// with files still open (a signal, the daemon stopped with readers at work)
// gets no release for them: the table frees them with the server.
//
// Thread-safety: Add and Remove may be called from any thread (they take a
// leaf lock); Get takes none: the kernel uses a handle only between the reply
// to its open and its release, and the object lives that long.
#ifndef TENSORFS_FS_HANDLE_TABLE_H_
#define TENSORFS_FS_HANDLE_TABLE_H_

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "core/util/thread_annotations.h"

namespace tensorfs {

class HandleTable {
 public:
  // Takes `object` and returns its handle. Called before the open is
  // answered, so that its release cannot come first.
  template <typename T>
  uint64_t Add(std::unique_ptr<T> object) EXCLUDES(mu_) {
    const uint64_t handle = reinterpret_cast<uint64_t>(object.get());
    MutexLock lock(mu_);
    owned_.emplace(handle, Owned(object.release(), [](void* p) { delete static_cast<T*>(p); }));
    return handle;
  }
  // The object of a handle Add returned and Remove has not freed yet.
  template <typename T>
  static T& Get(uint64_t handle) {
    return *reinterpret_cast<T*>(handle);
  }
  // Frees the object of `handle` (its release, or an open that was not answered).
  void Remove(uint64_t handle) EXCLUDES(mu_) {
    Owned freed(nullptr, [](void*) {});
    MutexLock lock(mu_);
    auto it = owned_.find(handle);
    if (it == owned_.end()) return;
    freed = std::move(it->second);  // destroyed after the lock is released
    owned_.erase(it);
  }

 private:
  using Owned = std::unique_ptr<void, void (*)(void*)>;
  Mutex mu_;
  std::unordered_map<uint64_t, Owned> owned_ GUARDED_BY(mu_);
};

}  // namespace tensorfs

#endif  // TENSORFS_FS_HANDLE_TABLE_H_
