#include "core/engine/chunk.h"

#include <sys/mman.h>

#include <string>

#include "core/util/status.h"

namespace tensorfs {

Chunk::Chunk(ByteRange range) : range_(range) {
  if (range_.length == 0) return;
  void* p = ::mmap(nullptr, range_.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) InternalFatal("cannot map " + std::to_string(range_.length) + " bytes for a chunk");
  data_ = static_cast<std::byte*>(p);
}

Chunk::~Chunk() {
  if (data_ != nullptr) ::munmap(data_, range_.length);
}

std::span<const std::byte> Chunk::Slice(ByteRange part) const {
  TENSORFS_CHECK(range_.Contains(part));
  return {data_ + (part.offset - range_.offset), part.length};
}

}  // namespace tensorfs
