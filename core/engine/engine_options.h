// EngineOptions: what a mount asks of its read engine (sizes, budgets, the
// readahead its files are opened with), validated once. MountOptions
// (core/options/mount_options.h) fills it; ReadEngine and its planner read it.
// A value: safe to share between threads once built.
#ifndef TENSORFS_CORE_ENGINE_ENGINE_OPTIONS_H_
#define TENSORFS_CORE_ENGINE_ENGINE_OPTIONS_H_

#include <cstdint>
#include <string>

#include "core/engine/readahead_policy.h"
#include "core/util/status.h"

namespace tensorfs {

struct EngineOptions {
  uint64_t chunk_size = 8ull << 20;        // the largest planned range request
  uint64_t cache_size = 2ull << 30;        // bytes of chunks kept in memory
  int max_fetches = 32;                    // range requests in flight at once
  uint64_t prefetch_window = 256ull << 20;  // bytes fetched ahead of a sequential reader
  uint64_t head_size = 256ull << 10;       // first request of a .safetensors object
  // Chunks the kernel has received in full (it caches them itself) are kept up
  // to this many bytes, for re-reads through other files; older ones are
  // evicted at once, and their buffers serve the next fetches.
  uint64_t consumed_keep = 64ull << 20;
  // -o shard=R/N: this process reads dim-0 slice R of N of every tensor; its
  // windows are prefetched from the first read on. world 1 (shard=0/1): every
  // reader reads whole tensors, from its first read. world 0: learn from reads.
  uint64_t shard_rank = 0;
  uint64_t shard_world = 0;
  // The kernel readahead the mount's files are opened with, by kind of reader
  // (see readahead_policy.h; 0s: not set, the kernel's default 128 KiB).
  // The engine's margins for what the kernel reads around a reader's pages
  // follow it (see tuning.h).
  ReadaheadPolicy::Options readahead;
  // When set, every read asked of the engine is recorded in this file (see
  // read_trace.h), for replaying a workload in tests.
  std::string trace_reads;

  // The message says which option to change.
  Status Validate() const;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_ENGINE_OPTIONS_H_
