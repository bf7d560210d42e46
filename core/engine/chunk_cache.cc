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

ChunkCache::Entry* ChunkCache::Find(const ChunkKey& key) {
  auto it = entries_.find(key);
  return it == entries_.end() ? nullptr : &it->second;
}

bool ChunkCache::Reserve(uint64_t bytes, bool evict_unconsumed) {
  while (used_ + bytes > capacity_ && !consumed_.empty()) Evict(consumed_.front());
  while (evict_unconsumed && used_ + bytes > capacity_ && !ready_.empty()) Evict(ready_.front());
  return used_ + bytes <= capacity_;
}

ChunkCache::Entry* ChunkCache::InsertLoading(const ChunkKey& key, ByteRange range, bool prefetched) {
  auto [it, inserted] = entries_.try_emplace(key);
  if (!inserted) return nullptr;
  it->second.range = range;
  it->second.prefetched = prefetched;
  Charge(static_cast<int64_t>(range.length));
  return &it->second;
}

std::optional<std::vector<ChunkWaiter>> ChunkCache::Publish(const ChunkKey& key, std::shared_ptr<const Chunk> chunk) {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.chunk != nullptr || it->second.list != Entry::List::kNone) {
    evicted_.push_back(std::move(chunk));  // released after the caller's lock, as evicted chunks are
    return std::nullopt;
  }
  Entry& e = it->second;
  e.chunk = std::move(chunk);
  e.delivered.assign((e.range.length + kPage * 64 - 1) / (kPage * 64), 0);
  e.list = Entry::List::kReady;
  e.position = ready_.insert(ready_.end(), key);
  return std::move(e.waiters);
}

std::optional<std::vector<ChunkWaiter>> ChunkCache::Fail(const ChunkKey& key) {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.chunk != nullptr) return std::nullopt;
  std::vector<ChunkWaiter> waiters = std::move(it->second.waiters);
  Charge(-static_cast<int64_t>(it->second.range.length));
  entries_.erase(it);
  return waiters;
}

void ChunkCache::Touch(const ChunkKey& key) {
  Entry* e = Find(key);
  if (e == nullptr || e->list == Entry::List::kNone) return;
  std::list<ChunkKey>& list = e->list == Entry::List::kReady ? ready_ : consumed_;
  list.splice(list.end(), list, e->position);
}

std::optional<ByteRange> ChunkCache::MarkDelivered(const ChunkKey& key, const Chunk* chunk, ByteRange part) {
  Entry* e = Find(key);
  if (e == nullptr || e->list != Entry::List::kReady || part.empty() || e->chunk.get() != chunk) return std::nullopt;
  if (part.offset < e->range.offset || part.end() > e->range.end()) return std::nullopt;
  uint64_t first = (part.offset - e->range.offset) / kPage;
  uint64_t last = (part.end() - 1 - e->range.offset) / kPage;
  for (uint64_t p = first; p <= last; ++p) {
    uint64_t bit = uint64_t{1} << (p % 64);
    if ((e->delivered[p / 64] & bit) == 0) {
      e->delivered[p / 64] |= bit;
      ++e->delivered_pages;
    }
  }
  if (e->delivered_pages < (e->range.length + kPage - 1) / kPage) return std::nullopt;
  ready_.erase(e->position);
  e->list = Entry::List::kConsumed;
  e->position = consumed_.insert(consumed_.end(), key);
  consumed_bytes_ += e->range.length;
  const ByteRange range = e->range;
  while (consumed_bytes_ > consumed_limit_) Evict(consumed_.front());
  return range;
}

void ChunkCache::Evict(const ChunkKey& key) {
  // Called with keys from ready_ and consumed_ only, which name ready entries.
  auto it = entries_.find(key);
  TENSORFS_CHECK(it != entries_.end() && it->second.list != Entry::List::kNone);
  if (it->second.list == Entry::List::kConsumed) {
    consumed_.erase(it->second.position);
    consumed_bytes_ -= it->second.range.length;
  } else {
    ready_.erase(it->second.position);
  }
  Charge(-static_cast<int64_t>(it->second.range.length));
  evicted_.push_back(std::move(it->second.chunk));
  entries_.erase(it);
  metrics_.cache_evictions.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tensorfs
