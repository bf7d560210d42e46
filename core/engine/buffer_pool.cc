#include "core/engine/buffer_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/util/status.h"

namespace tensorfs {
namespace {

size_t PageSize() {
  static const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return page;
}

size_t RoundToPages(size_t length) { return (length + PageSize() - 1) / PageSize() * PageSize(); }

constexpr size_t kHugePage = size_t{2} << 20;
#ifdef MADV_POPULATE_WRITE
constexpr int kMadvPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kMadvPopulateWrite = 23;  // Linux 5.14
#endif

}  // namespace

BufferPool::Options BufferPool::Options::ForCache(uint64_t cache_size) {
  Options options;
  options.max_idle_bytes = std::min<uint64_t>(64ull << 20, cache_size / 4);
  options.budget = cache_size;
  return options;
}

uint64_t BufferPool::IdleLimit() const {
  return options_.max_idle_bytes + (options_.budget > out_bytes_ ? options_.budget - out_bytes_ : 0);
}

BufferPool::Buffer BufferPool::Map(size_t length) {
  if (length == 0) return {};
  const size_t capacity = RoundToPages(length);
  if (capacity >= kHugePage) {
    // Reserve a huge page more, keep the aligned part: the kernel can then back
    // every whole 2 MiB of it with one huge page (fewer faults, TLB misses).
    void* p = ::mmap(nullptr, capacity + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) InternalFatal("cannot map " + std::to_string(capacity) + " bytes for a chunk");
    auto* raw = static_cast<std::byte*>(p);
    auto* start = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(raw) + kHugePage - 1) & ~(kHugePage - 1));
    if (start > raw) ::munmap(raw, static_cast<size_t>(start - raw));
    std::byte* end = raw + capacity + kHugePage;
    if (end > start + capacity) ::munmap(start + capacity, static_cast<size_t>(end - (start + capacity)));
    ::madvise(start, capacity, MADV_HUGEPAGE);
    ::madvise(start, capacity, kMadvPopulateWrite);  // pages in one call; older kernels fault them in later
    return {start, capacity};
  }
  // Populated in one call: one kernel entry instead of a fault per page.
  void* p = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) InternalFatal("cannot map " + std::to_string(capacity) + " bytes for a chunk");
  return {static_cast<std::byte*>(p), capacity};
}

void BufferPool::Unmap(Buffer buffer) {
  if (buffer.data != nullptr) ::munmap(buffer.data, buffer.capacity);
}

BufferPool::BufferPool(Options options) : options_(options) {
  trimmer_ = std::thread([this] { TrimLoop(); });
}

BufferPool::~BufferPool() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.NotifyAll();
  trimmer_.join();
  MutexLock lock(mu_);
  for (auto& [capacity, idle] : idle_) Unmap({idle.data, capacity});
  idle_.clear();
  idle_bytes_ = 0;
}

BufferPool::Buffer BufferPool::Acquire(size_t length) {
  if (length == 0) return {};
  const size_t want = RoundToPages(length);
  Buffer reused;
  {
    MutexLock lock(mu_);
    out_bytes_ += want;
    auto it = idle_.lower_bound(want);
    if (it != idle_.end() && it->first / 2 < want) {
      reused = {it->second.data, it->first};
      idle_bytes_ -= it->first;
      idle_.erase(it);
      ++reused_;
    } else {
      ++mapped_;
    }
  }
  if (options_.metrics != nullptr) {
    (reused.data != nullptr ? options_.metrics->buffers_reused : options_.metrics->buffers_mapped)
        .fetch_add(1, std::memory_order_relaxed);
  }
  if (reused.data == nullptr) return Map(length);
  if (reused.capacity > want) {  // give the pages past `want` back
    ::munmap(reused.data + want, reused.capacity - want);
    reused.capacity = want;
  }
  return reused;
}

void BufferPool::Release(Buffer buffer) {
  if (buffer.data == nullptr) return;
  bool unmap = false;
  bool was_empty = false;
  {
    MutexLock lock(mu_);
    out_bytes_ -= std::min<uint64_t>(out_bytes_, buffer.capacity);
    const uint64_t limit = IdleLimit();
    if (buffer.capacity > limit) {
      unmap = true;
      ++unmapped_;
    } else {
      was_empty = idle_.empty();
      while (idle_bytes_ + buffer.capacity > limit) DropOldest();
      idle_.emplace(buffer.capacity, Idle{buffer.data, std::chrono::steady_clock::now()});
      idle_bytes_ += buffer.capacity;
    }
  }
  if (unmap) Unmap(buffer);
  if (was_empty) cv_.NotifyAll();  // wakes the trimmer
}

void BufferPool::DropOldest() {
  auto oldest = idle_.begin();
  for (auto it = idle_.begin(); it != idle_.end(); ++it) {
    if (it->second.since < oldest->second.since) oldest = it;
  }
  Unmap({oldest->second.data, oldest->first});
  idle_bytes_ -= oldest->first;
  ++unmapped_;
  idle_.erase(oldest);
}

void BufferPool::Trim(std::chrono::milliseconds age) {
  std::vector<Buffer> drop;
  {
    MutexLock lock(mu_);
    const auto cutoff = std::chrono::steady_clock::now() - age;
    for (auto it = idle_.begin(); it != idle_.end();) {
      if (it->second.since <= cutoff) {
        drop.push_back({it->second.data, it->first});
        idle_bytes_ -= it->first;
        ++unmapped_;
        it = idle_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const Buffer& b : drop) Unmap(b);
}

void BufferPool::TrimLoop() {
  for (;;) {
    {
      MutexLock lock(mu_);
      cv_.Wait(mu_, [&]() REQUIRES(mu_) { return stopping_ || !idle_.empty(); });
      if (stopping_) return;
      // Wake at half the lifetime, so no buffer stays idle much past it.
      if (cv_.WaitFor(mu_, options_.idle_ttl / 2, [&]() REQUIRES(mu_) { return stopping_; })) return;
    }
    Trim(options_.idle_ttl);
  }
}

BufferPool::Counters BufferPool::counters() const {
  MutexLock lock(mu_);
  return Counters{reused_, mapped_, unmapped_, idle_bytes_, idle_.size(), out_bytes_};
}

}  // namespace tensorfs
