#include "core/engine/chunk_cache.h"

#include <bit>

namespace tensorfs {
namespace {
constexpr uint64_t kPage = 4096;
}

void ChunkCache::Charge(int64_t bytes) {
  used_ = static_cast<uint64_t>(static_cast<int64_t>(used_) + bytes);
  metrics_.cache_bytes.store(used_, std::memory_order_relaxed);
}

ExtentMap& ChunkCache::Extents(const ObjectId& object) { return maps_[object]; }

void ChunkCache::DropExtents(const ObjectId& object) {
  auto it = maps_.find(object);
  if (it == maps_.end()) return;
  for (const auto& [begin, extent] : std::map<uint64_t, ExtentMap::Extent>(it->second.by_begin_)) {
    Entry* e = Find(extent.id);
    if (e == nullptr) continue;
    if (e->chunk != nullptr) {
      Evict(extent.id);
    } else {
      e->map = nullptr;  // loading: finishes for its waiters only
    }
  }
  maps_.erase(it);
}

ChunkCache::Entry* ChunkCache::Find(ExtentId id) {
  auto it = entries_.find(id);
  return it == entries_.end() ? nullptr : &it->second;
}

bool ChunkCache::Reserve(uint64_t bytes, Eviction evict) {
  if (evict == Eviction::kConsumed && speculative_bytes_ + bytes > capacity_ / 2) return false;
  while (used_ + bytes > capacity_ && !consumed_.empty()) Evict(consumed_.front());
  if (evict == Eviction::kConsumed) return used_ + bytes <= capacity_;
  // Chunks no longer in use (kNotInUse), or any (kAny), LRU first.
  for (auto it = ready_.begin(); used_ + bytes > capacity_ && it != ready_.end();) {
    const ExtentId id = *it++;  // Evict erases it from ready_
    if (evict == Eviction::kAny || !InUse(entries_.at(id))) Evict(id);
  }
  return used_ + bytes <= capacity_;
}

void ChunkCache::MarkRead(Entry& e) {
  if (!e.read && e.prefetched) speculative_bytes_ -= e.range.length;
  e.read = true;
  e.read_at = delivered_bytes_;
}

void ChunkCache::Forget(const Entry& e) {
  if (!e.read && e.prefetched) speculative_bytes_ -= e.range.length;
}

bool ChunkCache::InUse(const Entry& e) const {
  return e.list == Entry::List::kReady && delivered_bytes_ - e.read_at < capacity_;
}

ChunkCache::Entry& ChunkCache::NewEntry(ByteRange range, bool prefetched, ExtentId* id) {
  *id = next_id_++;
  Entry& e = entries_[*id];
  e.range = range;
  e.prefetched = prefetched;
  e.read_at = delivered_bytes_;
  if (prefetched) speculative_bytes_ += range.length;
  Charge(static_cast<int64_t>(range.length));
  return e;
}

ExtentId ChunkCache::InsertLoading(ExtentMap& map, ByteRange range, bool prefetched) {
  for (const ExtentMap::Extent& old : map.Overlapping(range)) {
    Entry* e = Find(old.id);
    if (e != nullptr && e->chunk != nullptr) {
      Evict(old.id);
    } else {
      map.Erase(old);
      if (e != nullptr) e->map = nullptr;  // loading: finishes for its waiters only
    }
  }
  ExtentId id = 0;
  NewEntry(range, prefetched, &id).map = &map;
  map.Insert(ExtentMap::Extent{range, id});
  return id;
}

std::optional<ExtentId> ChunkCache::FindDerived(const ChunkKey& key) const {
  auto it = derived_.find(key);
  if (it == derived_.end()) return std::nullopt;
  return it->second;
}

ExtentId ChunkCache::InsertDerived(const ChunkKey& key, uint64_t size) {
  ExtentId id = 0;
  Entry& e = NewEntry(ByteRange{0, size}, /*prefetched=*/false, &id);
  auto [it, inserted] = derived_.insert_or_assign(key, id);
  e.derived = &it->first;
  return id;
}

void ChunkCache::Unlist(ExtentId id, Entry& e) {
  if (e.map != nullptr) e.map->Erase(ExtentMap::Extent{e.range, id});
  if (e.derived != nullptr) {
    auto it = derived_.find(*e.derived);
    if (it != derived_.end() && it->second == id) derived_.erase(it);
  }
  e.map = nullptr;
  e.derived = nullptr;
}

std::optional<std::vector<ChunkWaiter>> ChunkCache::Publish(ExtentId id, std::shared_ptr<const Chunk> chunk) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.chunk != nullptr || it->second.list != Entry::List::kNone) {
    evicted_.push_back(std::move(chunk));  // released after the caller's lock, as evicted chunks are
    return std::nullopt;
  }
  Entry& e = it->second;
  std::vector<ChunkWaiter> waiters = std::move(e.waiters);
  if (e.map == nullptr && e.derived == nullptr) {  // replaced while loading
    Forget(e);
    Charge(-static_cast<int64_t>(e.range.length));
    evicted_.push_back(std::move(chunk));
    entries_.erase(it);
    return waiters;
  }
  e.chunk = std::move(chunk);
  e.delivered.assign((e.range.length + kPage * 64 - 1) / (kPage * 64), 0);
  e.list = Entry::List::kReady;
  e.position = ready_.insert(ready_.end(), id);
  return waiters;
}

std::optional<std::vector<ChunkWaiter>> ChunkCache::Fail(ExtentId id) {
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.chunk != nullptr) return std::nullopt;
  std::vector<ChunkWaiter> waiters = std::move(it->second.waiters);
  Unlist(id, it->second);
  Forget(it->second);
  Charge(-static_cast<int64_t>(it->second.range.length));
  entries_.erase(it);
  return waiters;
}

void ChunkCache::Touch(ExtentId id) {
  Entry* e = Find(id);
  if (e == nullptr || e->list == Entry::List::kNone) return;
  MarkRead(*e);
  std::list<ExtentId>& list = e->list == Entry::List::kReady ? ready_ : consumed_;
  list.splice(list.end(), list, e->position);
}

std::optional<ByteRange> ChunkCache::MarkDelivered(ExtentId id, ByteRange part) {
  Entry* e = Find(id);
  if (e == nullptr || e->list != Entry::List::kReady || part.empty()) return std::nullopt;
  if (part.offset < e->range.offset || part.end() > e->range.end()) return std::nullopt;
  uint64_t first = (part.offset - e->range.offset) / kPage;
  uint64_t last = (part.end() - 1 - e->range.offset) / kPage;
  for (uint64_t p = first; p <= last; ++p) {
    uint64_t bit = uint64_t{1} << (p % 64);
    if ((e->delivered[p / 64] & bit) == 0) {
      e->delivered[p / 64] |= bit;
      ++e->delivered_pages;
      delivered_bytes_ += kPage;
    }
  }
  MarkRead(*e);
  if (e->delivered_pages < (e->range.length + kPage - 1) / kPage) return std::nullopt;
  ready_.erase(e->position);
  e->list = Entry::List::kConsumed;
  e->position = consumed_.insert(consumed_.end(), id);
  consumed_bytes_ += e->range.length;
  const ByteRange range = e->range;
  while (consumed_bytes_ > consumed_limit_) Evict(consumed_.front());
  return range;
}

void ChunkCache::Evict(ExtentId id) {
  // Called with ids of ready entries only (from ready_, consumed_ or a map).
  auto it = entries_.find(id);
  if (it == entries_.end() || it->second.list == Entry::List::kNone) return;
  Entry& e = it->second;
  if (e.list == Entry::List::kConsumed) {
    consumed_.erase(e.position);
    consumed_bytes_ -= e.range.length;
  } else {
    ready_.erase(e.position);
  }
  Unlist(id, e);
  Forget(e);
  Charge(-static_cast<int64_t>(e.range.length));
  evicted_.push_back(std::move(e.chunk));
  entries_.erase(it);
  metrics_.cache_evictions.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tensorfs
