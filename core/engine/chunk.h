// Chunk: the bytes of one planned range of one object version, as fetched.
// Buffers are mapped directly (not from malloc's heap), so an evicted chunk's
// memory goes back to the system as soon as the last reader lets go of it.
//
// Thread-safety: written by the one fetch that fills it, then published as
// shared_ptr<const Chunk> and never written again.
#ifndef TENSORFS_CORE_ENGINE_CHUNK_H_
#define TENSORFS_CORE_ENGINE_CHUNK_H_

#include <cstddef>
#include <memory>
#include <span>

#include "core/util/types.h"

namespace tensorfs {

class Chunk {
 public:
  // Aborts if the memory cannot be mapped (the cache budget keeps this rare).
  explicit Chunk(ByteRange range);
  ~Chunk();
  Chunk(const Chunk&) = delete;
  Chunk& operator=(const Chunk&) = delete;

  const ByteRange& range() const { return range_; }
  std::span<std::byte> writable() { return {data_, range_.length}; }
  std::span<const std::byte> bytes() const { return {data_, range_.length}; }
  // The bytes of `part`, which must lie within range().
  std::span<const std::byte> Slice(ByteRange part) const;

 private:
  ByteRange range_;
  std::byte* data_ = nullptr;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_CHUNK_H_
