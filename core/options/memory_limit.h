// The memory limit of the container tensorfs runs in, and the cache size that
// follows from it when the user set none.
//
// In a pod (or any container, or a systemd unit with MemoryMax=) the kernel
// kills a process whose cgroup goes over its memory limit. The default
// cache_size (2G) knows nothing of that limit, so without cache_size the
// default is lowered to fit it: kCgroupCacheFraction of what is left of the
// limit once kMountOverhead (the mount's memory besides cached chunks: buffers
// of fetches in flight, the catalog, threads' stacks, libcurl) is set aside.
//
// The limit is read from cgroup v2 (memory.max) and, where the memory
// controller is still on cgroup v1, from memory.limit_in_bytes; the smallest
// limit of the process's cgroup and its ancestors up to the hierarchy's root
// applies. Nothing is read from the environment: the files are found through
// /proc/self/cgroup and /proc/self/mountinfo, whose paths tests replace.
//
// Thread-safety: plain functions over files; safe to call from any thread.
#ifndef TENSORFS_CORE_OPTIONS_MEMORY_LIMIT_H_
#define TENSORFS_CORE_OPTIONS_MEMORY_LIMIT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "core/util/status.h"

namespace tensorfs {

struct MountOptions;

// Memory of a mount beyond its cached chunks, per cache_size's own help.
inline constexpr uint64_t kMountOverhead = 128ull << 20;
// The share of (limit - kMountOverhead) that the default cache takes: the rest
// is headroom for the page cache charged to the cgroup and for bursts.
inline constexpr double kCgroupCacheFraction = 0.75;
// Below this a derived cache cannot hold even one 64 KiB fetch per worker.
inline constexpr uint64_t kMinDerivedCache = 16ull << 20;

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string file;  // where it was read, for messages
};

// Where the process's cgroup files are looked up.
struct CgroupPaths {
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string proc_self_mountinfo = "/proc/self/mountinfo";
};

// The memory limit of this process's cgroup, nullopt when none is set ("max",
// or cgroup files that cannot be read: tensorfs then keeps its own default).
std::optional<MemoryLimit> FindCgroupMemoryLimit(const CgroupPaths& paths = {});

// Without a cache_size given by the user, lowers options.engine.cache_size to
// kCgroupCacheFraction x (limit - kMountOverhead) when that is less. Returns
// an info line saying what was chosen and why ("" when nothing changed), or an
// error when the limit leaves too little for a cache (the message says to
// raise the limit or set cache_size). A cache_size the user gave is kept if it
// fits beside kMountOverhead under the limit, and refused otherwise (the
// message says what fits): the kernel would kill the mount on a later read.
StatusOr<std::string> FitCacheToMemoryLimit(MountOptions& options, const std::optional<MemoryLimit>& limit);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_OPTIONS_MEMORY_LIMIT_H_
