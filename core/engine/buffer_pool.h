// BufferPool: chunk buffers kept for reuse, so that fetching a chunk does not
// map fresh memory and take a page fault on every 4 KiB of it (about 2,000
// faults and a TLB shootdown at munmap per 8 MiB chunk, a large part of the CPU
// a read costs at datacenter link speeds).
//
// A buffer comes back to the pool only from ~Chunk, that is when the last
// shared_ptr<const Chunk> lets go: the cache's and those of replies still in
// flight (ReadResult::owner). A buffer is therefore never handed to a new chunk
// while anyone can still read the old one.
//
// Memory: the bytes in use are the cache's business (its budget counts every
// live chunk). Idle buffers may fill what the buffers out leave free of the
// cache's budget, and Options::max_idle_bytes besides (the oldest are unmapped first when over), so
// the chunks and the idle buffers together stay within the cache's budget plus
// max_idle_bytes. A stream's prefetch window comes back all at once when its
// reader reaches the end of a file, and the next file's fetches take it up
// again; a fixed bound below the window unmapped those buffers and mapped (and
// zeroed) fresh ones. A buffer idle for longer than Options::idle_ttl is
// unmapped by a background thread, so an idle mount holds no pooled memory.
//
// Sizes: a buffer is page-rounded. Acquire(n) takes the smallest idle buffer of
// at least n bytes and less than twice n, giving the pages past n back to the
// system, else maps a new one with its pages populated in one call. A buffer of
// 2 MiB or more starts on a 2 MiB boundary and asks for transparent huge pages
// (MADV_HUGEPAGE): copying a response into fresh 4 KiB pages was TLB-bound.
// Only whole 2 MiB pieces inside the buffer become huge pages, so a buffer
// holds no more memory than its page-rounded size.
//
// Thread-safety: all methods may be called concurrently. mu_ is a leaf lock:
// Release runs from ~Chunk, which may happen under the read engine's mu_.
#ifndef TENSORFS_CORE_ENGINE_BUFFER_POOL_H_
#define TENSORFS_CORE_ENGINE_BUFFER_POOL_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <thread>

#include "core/metrics/metrics.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

class BufferPool {
 public:
  struct Options {
    uint64_t max_idle_bytes = 64ull << 20;
    std::chrono::milliseconds idle_ttl{2000};
    // Idle buffers may also take the part of `budget` that the buffers out
    // (acquired, not yet released) leave free. 0: no budget.
    uint64_t budget = 0;
    // When set, each Acquire is counted in its buffers_reused or
    // buffers_mapped (it must outlive the pool's users that acquire).
    Metrics* metrics = nullptr;

    // The pool for a cache of `cache_size` bytes: the cache's budget, and a
    // quarter of it, at most 64 MiB, besides, so the mount stays within
    // cache_size plus its fixed overhead.
    static Options ForCache(uint64_t cache_size);
  };

  struct Buffer {
    std::byte* data = nullptr;
    size_t capacity = 0;  // page-rounded; 0 for an empty buffer
  };

  struct Counters {
    uint64_t reused = 0;       // Acquire served from an idle buffer
    uint64_t mapped = 0;       // Acquire that mapped a new buffer
    uint64_t unmapped = 0;     // buffers given back to the system
    uint64_t idle_bytes = 0;   // now
    uint64_t idle_buffers = 0; // now
    uint64_t out_bytes = 0;    // now: acquired, not yet released
  };

  explicit BufferPool(Options options);
  // Unmaps the idle buffers. Buffers still out must not come back afterwards:
  // chunks keep their pool alive (shared_ptr), so they cannot.
  ~BufferPool();
  BufferPool(const BufferPool&) = delete;
  BufferPool& operator=(const BufferPool&) = delete;

  // A buffer of at least `length` bytes, contents unspecified. Aborts if memory
  // cannot be mapped. Length 0 gives an empty buffer.
  Buffer Acquire(size_t length) EXCLUDES(mu_);
  // Takes `buffer` back; nobody may use it afterwards.
  void Release(Buffer buffer) EXCLUDES(mu_);
  // Unmaps the buffers idle for at least `age` (the background thread's job;
  // public for tests).
  void Trim(std::chrono::milliseconds age) EXCLUDES(mu_);

  Counters counters() const EXCLUDES(mu_);

  // Mapping without a pool: for chunks made outside the read engine.
  static Buffer Map(size_t length);
  static void Unmap(Buffer buffer);

 private:
  struct Idle {
    std::byte* data;
    std::chrono::steady_clock::time_point since;
  };
  using IdleMap = std::multimap<size_t, Idle>;  // by capacity

  // The most bytes idle buffers may hold now.
  uint64_t IdleLimit() const REQUIRES(mu_);
  // Unmaps the longest-idle buffer.
  void DropOldest() REQUIRES(mu_);
  void TrimLoop() EXCLUDES(mu_);

  const Options options_;
  mutable Mutex mu_;
  CondVar cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  IdleMap idle_ GUARDED_BY(mu_);
  uint64_t idle_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t out_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t reused_ GUARDED_BY(mu_) = 0;
  uint64_t mapped_ GUARDED_BY(mu_) = 0;
  uint64_t unmapped_ GUARDED_BY(mu_) = 0;
  std::thread trimmer_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_BUFFER_POOL_H_
