// Chunk: the bytes of one planned range of one object version, as fetched.
// Buffers are mapped directly (not from malloc's heap), so an evicted chunk's
// memory goes back to the system as soon as the last reader lets go of it, or,
// for a chunk made with a BufferPool, back to that pool for the next chunk.
//
// Thread-safety: written by the one fetch that fills it, then published as
// shared_ptr<const Chunk> and never written again.
#ifndef TENSORFS_CORE_ENGINE_CHUNK_H_
#define TENSORFS_CORE_ENGINE_CHUNK_H_

#include <cstddef>
#include <memory>
#include <span>

#include "core/engine/buffer_pool.h"
#include "core/util/types.h"

namespace tensorfs {

class Chunk {
 public:
  // Maps its own buffer, unmapped on destruction. Aborts if the memory cannot
  // be mapped (the cache budget keeps this rare).
  explicit Chunk(ByteRange range);
  // Takes its buffer from `pool` (null: as above) and gives it back on
  // destruction, which happens when the last shared_ptr to the chunk goes: no
  // other chunk can get the buffer while anyone still reads this one.
  Chunk(ByteRange range, std::shared_ptr<BufferPool> pool);
  ~Chunk();
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  const ByteRange& range() const { return range_; }
  std::span<std::byte> writable() { return {buffer_.data, range_.length}; }
  std::span<const std::byte> bytes() const { return {buffer_.data, range_.length}; }
  // The bytes of `part`, which must lie within range().
  std::span<const std::byte> Slice(ByteRange part) const;

 private:
  ByteRange range_;
  BufferPool::Buffer buffer_;
  std::shared_ptr<BufferPool> pool_;  // keeps the pool alive until the buffer is back
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_CHUNK_H_
