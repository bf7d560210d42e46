// ChunkCache: the chunks in memory, bounded by bytes, with the bookkeeping for
// single-flight fetches and for eviction order.
//
// Each entry is one extent of an object version (see extent_map.h: a planned
// chunk or a part of one, as one range request fetched it), or a derived chunk
// (a view's computed bytes, under a ChunkKey). Entries are named by ExtentId,
// never reused, so a read names the very bytes it took.
//
// An entry is either loading (a fetch is under way; readers queue as waiters,
// so concurrent requests for one extent share one fetch) or ready (its bytes
// are published as shared_ptr<const Chunk>: eviction only drops the cache's
// reference, never bytes a reply still uses). Ready chunks whose every page has
// been delivered to the kernel (which now caches them itself) are consumed:
// they are evicted first, least recently used first, and at most
// `consumed_limit` bytes of them are kept at all (past it the oldest go at
// once, so that a reader streaming through a checkpoint holds a window of it,
// not a second copy of what the page cache has, and fetches reuse the buffers
// of the chunks it is done with instead of mapping fresh memory); then other
// ready chunks, LRU. Loading chunks are never evicted.
//
// A ready chunk a read took bytes of, and not all of them yet, is in use: its
// reader is on its way through it (a loader's thread copying its tensor, one
// rank's rows of it among others'). A read's request may evict only chunks
// not in use (Eviction::kNotInUse), so that no chunk is fetched again because it
// was evicted before the kernel took it; where that leaves no room, the read
// asks for its own bytes only (FetchPlanner::Cover) and the cache goes over
// its budget by them until they are delivered. A chunk is no longer in use
// once a cache's worth of bytes (capacity) has been delivered since a read
// last took bytes of it: its reader has moved on, or will not come back.
// Likewise a chunk no read has taken bytes of yet (prefetched, or fetched
// whole for a read of part of it) is waited for until a cache's worth of
// bytes has been delivered since it was requested.
// A read's request evicts, after consumed chunks, chunks no longer in use or
// waited for, LRU first, never others. Prefetches hold at most half the
// capacity in chunks no read has taken bytes of (speculative bytes, loading
// ones included): the other half is for the chunks readers are using, and
// what is fetched ahead of them is not evicted by their reads before they
// come to it.
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
#include <unordered_map>
#include <vector>

#include "core/engine/chunk.h"
#include "core/engine/extent_map.h"
#include "core/metrics/metrics.h"
#include "core/util/status.h"
#include "core/util/types.h"

namespace tensorfs {

// The key of a derived chunk (ReadEngine::ReadDerived): `object` names what it
// is computed from and how, `index` which part.
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
    bool read = false;                   // a read took bytes of it
    uint64_t read_at = 0;                // delivered_bytes_ when a read last did, or (none yet) it was made
    enum class List { kNone, kReady, kConsumed } list = List::kNone;
    std::list<ExtentId>::iterator position;
    // Where the entry is listed: its object version's extent map, or (a
    // derived chunk) its key. Neither: an extent replaced or dropped while
    // loading, kept only until its fetch hands its bytes to the reads waiting.
    ExtentMap* map = nullptr;
    const ChunkKey* derived = nullptr;
  };

  ChunkCache(uint64_t capacity, uint64_t consumed_limit, Metrics& metrics)
      : capacity_(capacity), consumed_limit_(consumed_limit), metrics_(metrics) {}

  uint64_t capacity() const { return capacity_; }
  uint64_t used() const { return used_; }
  uint64_t speculative() const { return speculative_bytes_; }
  size_t entries() const { return entries_.size(); }

  // The extents of `object` (one version: the generation is part of the id),
  // empty at first. The reference stays valid until DropExtents(object).
  ExtentMap& Extents(const ObjectId& object);
  // The engine forgot `object`: its ready extents are evicted, its loading
  // ones are kept only for the reads waiting on them.
  void DropExtents(const ObjectId& object);

  Entry* Find(ExtentId id);
  // Which ready chunks Reserve may evict: consumed ones only (a prefetch,
  // which also keeps within the speculative bytes' half of the capacity),
  // and then those not in use (a read's request), or any (a derived chunk).
  enum class Eviction { kConsumed, kNotInUse, kAny };
  // Makes room for `bytes` more: evicts consumed chunks, then (as `evict`
  // allows) other ready chunks, LRU first. False if it cannot.
  bool Reserve(uint64_t bytes, Eviction evict);
  // Whether a read took bytes of ready entry `e`, not all of them, lately,
  // or it was prefetched lately and no read took bytes of it yet (see "in
  // use" above): a read's request does not evict it.
  bool InUse(const Entry& e) const;
  // A new loading extent of `map` over `range`, charged to the budget (call
  // Reserve first). The extents of `map` it overlaps are replaced: ready ones
  // are evicted, loading ones finish only for the reads waiting on them.
  ExtentId InsertLoading(ExtentMap& map, ByteRange range, bool prefetched);
  // A derived chunk: the entry under `key`, if any; a new loading one of
  // `size` bytes (call Reserve first).
  std::optional<ExtentId> FindDerived(const ChunkKey& key) const;
  ExtentId InsertDerived(const ChunkKey& key, uint64_t size);
  // The fetch succeeded: the entry becomes ready (or, replaced meanwhile, is
  // dropped). Returns its waiters; nullopt (and `chunk` dropped) if `id` names
  // no loading entry, a bug the caller reports.
  std::optional<std::vector<ChunkWaiter>> Publish(ExtentId id, std::shared_ptr<const Chunk> chunk);
  // The fetch failed: the entry is dropped so a later read tries again.
  // Returns its waiters; nullopt if `id` names no loading entry (a bug).
  std::optional<std::vector<ChunkWaiter>> Fail(ExtentId id);
  // A read used the entry: most recently used.
  void Touch(ExtentId id);
  // Bytes `part` (file offsets, within the entry) of entry `id` went to the
  // kernel. When that made the entry consumed, returns its range (the entry,
  // or older consumed ones, may have been evicted to stay within
  // consumed_limit). An entry evicted since the read took its bytes is gone:
  // nothing happens.
  std::optional<ByteRange> MarkDelivered(ExtentId id, ByteRange part);
  // The chunks evicted since the last call: the caller drops them once it has
  // released its lock, so that unmapping their buffers (when no reply holds
  // them) happens outside it.
  std::vector<std::shared_ptr<const Chunk>> TakeEvicted() { return std::move(evicted_); }

 private:
  Entry& NewEntry(ByteRange range, bool prefetched, ExtentId* id);
  // A read took bytes of `e`.
  void MarkRead(Entry& e);
  // `e` leaves the cache.
  void Forget(const Entry& e);
  // Takes the entry out of its extent map or the derived keys.
  void Unlist(ExtentId id, Entry& e);
  void Evict(ExtentId id);
  void Charge(int64_t bytes);

  const uint64_t capacity_;
  const uint64_t consumed_limit_;
  Metrics& metrics_;
  uint64_t used_ = 0;
  uint64_t consumed_bytes_ = 0;  // of the chunks in consumed_
  uint64_t delivered_bytes_ = 0;  // pages delivered to the kernel, ever (bytes): the clock of InUse
  uint64_t speculative_bytes_ = 0;  // of entries prefetched that no read took bytes of yet
  ExtentId next_id_ = 1;
  std::unordered_map<ExtentId, Entry> entries_;
  std::map<ObjectId, ExtentMap> maps_;
  std::map<ChunkKey, ExtentId> derived_;
  std::list<ExtentId> ready_;     // LRU order: front is least recent
  std::list<ExtentId> consumed_;  // LRU order: front is least recent
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
