// ReadTrace: the reads a ReadEngine is asked for, recorded one a line, so that
// a workload's kernel reads (a loader through a mount) can be replayed through
// the engine in a test and the range requests it makes compared (see
// tests/core/engine/trace_replay_test.cc). Enabled by EngineOptions::trace_reads
// (the mount sets it from TENSORFS_TRACE_READS); off, it costs one branch a read.
// A "%p" in the path becomes the process id, so that several mounts on one
// machine (the hosts of a sharded job) each write their own trace.
//
// Format, text:
//   # tensorfs read trace 4
//   <reader>[/<process>[/<thread>]] <offset> <length> <flags> [<within offset>+<within length>] <object name>
// reader: ReaderId (0: none named), its process where known, and the thread
// that made the read where known (ReaderId::thread); flags: "k" a kernel read of the file
// (ReadHints::prefetch), "v" a read made for a view file, "p" a Prefetch call
// (a view file's reader asking ahead for source bytes), then "d" when the
// bytes count as delivered, "w" when the read or prefetch names a `within`
// range, which follows as its own field. The object name runs to the end of
// the line. (Version 1 traces had no "p" lines and no `within` field,
// versions 1 and 2 no process, versions 1 to 3 no thread: each open file's
// reads replay as one reader's.)
//
// Thread-safety: Record may be called concurrently; lines are whole.
#ifndef TENSORFS_CORE_ENGINE_READ_TRACE_H_
#define TENSORFS_CORE_ENGINE_READ_TRACE_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"
#include "core/util/thread_annotations.h"
#include "core/util/types.h"

namespace tensorfs {

struct TracedRead {
  uint64_t reader = 0;
  uint64_t process = 0;  // ReaderId::process
  uint64_t thread = 0;   // ReaderId::thread
  uint64_t offset = 0;
  uint64_t length = 0;
  bool kernel = true;     // "k": ReadHints::prefetch
  bool prefetch_call = false;  // "p": a ReadEngine::Prefetch call, not a read
  bool delivered = true;  // "d"
  std::optional<ByteRange> within;  // "w"
  std::string object;
};

class ReadTrace {
 public:
  // Opens (truncates) `path`, its "%p" replaced by the process id; the
  // message names the path when it cannot.
  static StatusOr<std::unique_ptr<ReadTrace>> Open(const std::string& path);
  ~ReadTrace();
  ReadTrace(const ReadTrace&) = delete;
  ReadTrace& operator=(const ReadTrace&) = delete;

  void Record(const TracedRead& read) EXCLUDES(mu_);

 private:
  explicit ReadTrace(std::FILE* file) : file_(file) {}
  Mutex mu_;
  std::FILE* const file_;
};

std::string FormatTracedRead(const TracedRead& read);
// Parses a whole trace; the message names the line that is malformed.
StatusOr<std::vector<TracedRead>> ParseReadTrace(std::string_view text);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_READ_TRACE_H_
