#include "core/engine/chunk.h"

#include "core/util/status.h"

namespace tensorfs {

Chunk::Chunk(ByteRange range) : Chunk(range, nullptr) {}

Chunk::Chunk(ByteRange range, std::shared_ptr<BufferPool> pool) : range_(range), pool_(std::move(pool)) {
  buffer_ = pool_ != nullptr ? pool_->Acquire(range_.length) : BufferPool::Map(range_.length);
}

Chunk::~Chunk() {
  if (pool_ != nullptr) {
    pool_->Release(buffer_);
  } else {
    BufferPool::Unmap(buffer_);
  }
}

std::span<const std::byte> Chunk::Slice(ByteRange part) const {
  TENSORFS_CHECK(range_.Contains(part));
  return {buffer_.data + (part.offset - range_.offset), part.length};
}

}  // namespace tensorfs
