// The process a thread belongs to, as the kernel names it to a FUSE server:
// a request carries the id of the thread that made it (a loader opening a
// shard from a worker thread names that thread), while what a process does
// is the process's. And how the daemon ends.
//
// Thread-safety: ThreadGroupOf may be called from any thread; ExitNow ends
// the process whatever its other threads are doing.
#ifndef TENSORFS_CORE_UTIL_PROCESS_H_
#define TENSORFS_CORE_UTIL_PROCESS_H_

#include <cstdint>

namespace tensorfs {

// The process id (thread group) of thread `tid`, from /proc/<tid>/status;
// `tid` itself where that cannot be read (a thread gone, or in a pid
// namespace this process does not see); 0 for 0 (no thread named).
uint64_t ThreadGroupOf(uint64_t tid);

// Ends the process with `status` at once, as std::_Exit does (no destructors,
// no waiting for threads: a fetch retrying against a slow server holds
// nothing worth waiting for), after the leak check that a LeakSanitizer build
// runs at a normal exit: memory still held by live objects is reachable and
// not reported; memory nothing points to any more is a leak, reported, and
// the exit status is then the sanitizer's.
[[noreturn]] void ExitNow(int status);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_PROCESS_H_
