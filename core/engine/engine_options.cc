#include "core/engine/engine_options.h"

#include <algorithm>

namespace tensorfs {
namespace {

std::string Mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

Status EngineOptions::Validate() const {
  if (shard_world > 1024 || (shard_world > 0 && shard_rank >= shard_world)) {
    return InvalidArgumentError("shard=" + std::to_string(shard_rank) + "/" + std::to_string(shard_world) +
                                ": write shard=R/N with 0 <= R < N <= 1024 (this process reads dim-0 slice R of N)");
  }
  if (chunk_size < (64u << 10) || chunk_size > (1u << 30)) {
    return InvalidArgumentError("chunk_size must lie between 64 KiB and 1 GiB");
  }
  if (std::max({readahead.unknown, readahead.whole, readahead.slice}) > (1ull << 30)) {
    return InvalidArgumentError("readahead " + Mib(std::max({readahead.unknown, readahead.whole, readahead.slice})) +
                                " is over 1 GiB: the kernel's readahead is at most that");
  }
  if (max_fetches < 1 || max_fetches > 1024) {
    return InvalidArgumentError("max_fetches must lie between 1 and 1024");
  }
  if (cache_size < 2 * static_cast<uint64_t>(max_fetches) * chunk_size) {
    return InvalidArgumentError("cache_size " + Mib(cache_size) + " cannot hold 2 x max_fetches (" +
                                std::to_string(max_fetches) + ") chunks of " + Mib(chunk_size) +
                                ": raise cache_size, or lower max_fetches or chunk_size");
  }
  if (prefetch_window > cache_size / 2) {
    return InvalidArgumentError("prefetch_window " + Mib(prefetch_window) + " must be at most half of cache_size (" +
                                Mib(cache_size) + ")");
  }
  return OkStatus();
}

}  // namespace tensorfs
