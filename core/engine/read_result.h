// ReadResult: the bytes of one read, handed up without copying.
#ifndef TENSORFS_CORE_ENGINE_READ_RESULT_H_
#define TENSORFS_CORE_ENGINE_READ_RESULT_H_

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "core/util/status.h"

namespace tensorfs {

// `pieces` point into memory that `owner` keeps alive (cached chunks), so the
// adapter can hand them to the kernel as an iovec.
struct ReadResult {
  std::shared_ptr<const void> owner;
  std::vector<std::span<const std::byte>> pieces;

  size_t size() const {
    size_t n = 0;
    for (const auto& piece : pieces) n += piece.size();
    return n;
  }
};

// Called exactly once per read, on any thread.
using ReadDone = std::function<void(StatusOr<ReadResult>)>;

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_READ_RESULT_H_
