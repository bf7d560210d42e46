// ChunkCache: the chunks in memory, bounded by bytes, with the bookkeeping for
// single-flight fetches and for eviction order.
//
// An entry is either loading (a fetch is under way; readers queue as waiters,
// so concurrent requests for one chunk share one fetch) or ready (its bytes are
// published as shared_ptr<const Chunk>: eviction only drops the cache's
// reference, never bytes a reply still uses). Ready chunks whose every page has
// been delivered to the kernel (which now caches them itself) are consumed:
// they are evicted first, least recently used first, and at most
// `consumed_limit` bytes of them are kept at all (past it the oldest go at
// once, so that a reader streaming through a checkpoint holds a window of it,
// not a second copy of what the page cache has, and fetches reuse the buffers
// of the chunks it is done with instead of mapping fresh memory); then other
// ready chunks, LRU. Loading chunks are never evicted. Keys include the object
// generation.
//
// Thread-safety: none of its own; ReadEngine calls it with its mutex held.
#ifndef TENSORFS_CORE_ENGINE_CHUNK_CACHE_H_
#define TENSORFS_CORE_ENGINE_CHUNK_CACHE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "core/engine/chunk.h"
#include "core/metrics/metrics.h"
#include "core/util/status.h"
#include "core/util/types.h"

namespace tensorfs {

struct ChunkKey {
  ObjectId object;
  size_t index = 0;
  auto operator<=>(const ChunkKey&) const = default;
};

// Called once when a loading chunk is ready or failed.
using ChunkWaiter = std::function<void(const StatusOr<std::shared_ptr<const Chunk>>&)>;

class ChunkCache {
 public:
  struct Entry {
    ByteRange range;
    std::shared_ptr<const Chunk> chunk;  // null while loading
    std::vector<ChunkWaiter> waiters;    // while loading
    bool prefetched = false;             // started by prefetch rather than a read
    std::vector<uint64_t> delivered;     // bitmap of 4 KiB pages given to the kernel
    uint64_t delivered_pages = 0;
    enum class List { kNone, kReady, kConsumed } list = List::kNone;
    std::list<ChunkKey>::iterator position;
  };

  ChunkCache(uint64_t capacity, uint64_t consumed_limit, Metrics& metrics)
      : capacity_(capacity), consumed_limit_(consumed_limit), metrics_(metrics) {}

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }

  Entry* Find(const ChunkKey& key);
  // Makes room for `bytes` more: evicts consumed chunks, then (if
  // `evict_unconsumed`) any ready chunk, LRU first. False if it cannot.
  bool Reserve(uint64_t bytes, bool evict_unconsumed);
  // A new loading entry, charged to the budget (call Reserve first). Null if
  // `key` has an entry already: the caller's state is inconsistent (a bug),
  // which it reports; the cache is left as it was.
  Entry* InsertLoading(const ChunkKey& key, ByteRange range, bool prefetched);
  // The fetch succeeded: the entry becomes ready. Returns its waiters; nullopt
  // (and `chunk` dropped) if `key` names no loading entry, a bug the caller
  // reports.
  std::optional<std::vector<ChunkWaiter>> Publish(const ChunkKey& key, std::shared_ptr<const Chunk> chunk);
  // The fetch failed: the entry is dropped so a later read tries again.
  // Returns its waiters; nullopt if `key` names no loading entry (a bug).
  std::optional<std::vector<ChunkWaiter>> Fail(const ChunkKey& key);
  // A read used the chunk: most recently used.
  void Touch(const ChunkKey& key);
  // Bytes `part` (file offsets, within the chunk) of `chunk`, the entry's
  // bytes when the read took them, went to the kernel. When that made the
  // entry consumed, returns its range (the entry, or older consumed ones, may
  // have been evicted to stay within consumed_limit). An entry now holding
  // other bytes under the key (the read's chunk was evicted and the key
  // reused for another range) is left alone.
  std::optional<ByteRange> MarkDelivered(const ChunkKey& key, const Chunk* chunk, ByteRange part);
  // The chunks evicted since the last call: the caller drops them once it has
  // released its lock, so that unmapping their buffers (when no reply holds
  // them) happens outside it.
  std::vector<std::shared_ptr<const Chunk>> TakeEvicted() { return std::move(evicted_); }

 private:
  void Evict(const ChunkKey& key);
  void Charge(int64_t bytes);

  const uint64_t capacity_;
  const uint64_t consumed_limit_;
  Metrics& metrics_;
  uint64_t used_ = 0;
  uint64_t consumed_bytes_ = 0;  // of the chunks in consumed_
  std::map<ChunkKey, Entry> entries_;
  std::list<ChunkKey> ready_;     // LRU order: front is least recent
  std::list<ChunkKey> consumed_;  // LRU order: front is least recent
  std::vector<std::shared_ptr<const Chunk>> evicted_;  // see TakeEvicted
};

// Moves the chunks `cache` evicted into `out` when it goes out of scope.
// Declare `out` before the lock and this after it: the chunks are then
// released after the lock is.
class EvictedChunks {
 public:
  EvictedChunks(ChunkCache& cache, std::vector<std::shared_ptr<const Chunk>>& out) : cache_(cache), out_(out) {}
  ~EvictedChunks() {
    for (auto& chunk : cache_.TakeEvicted()) out_.push_back(std::move(chunk));
  }
  EvictedChunks(const EvictedChunks&) = delete;
  EvictedChunks& operator=(const EvictedChunks&) = delete;

 private:
  ChunkCache& cache_;
  std::vector<std::shared_ptr<const Chunk>>& out_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_CHUNK_CACHE_H_
