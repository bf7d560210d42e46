// What the read engine keeps of each object version it serves, and of each
// reader's moves through it: the state the facade (ReadEngine), the fetch
// planner (fetch_planner.h) and the fetch workers (fetch_scheduler.cc) share.
//
// ReadEngine owns every ObjectState (one per object version, dropped past
// Tuning::max_objects idle ones) and every reader's AccessState; the planner
// reads and changes them only when the engine calls it.
//
// Thread-safety: none of its own; every field is read and written under
// ReadEngine's mutex.
#ifndef TENSORFS_CORE_ENGINE_OBJECT_STATE_H_
#define TENSORFS_CORE_ENGINE_OBJECT_STATE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/engine/access_model.h"
#include "core/engine/chunk_plan.h"
#include "core/engine/extent_map.h"
#include "core/engine/read_together.h"
#include "core/store/object_store.h"
#include "core/util/status.h"
#include "core/util/types.h"

namespace tensorfs {

// A run of chunks one reader is moving through (see FetchPlanner::UpdateStreams).
struct Stream {
  size_t start = 0;     // first chunk of the run
  size_t last = 0;      // highest chunk read
  size_t frontier = 0;  // highest chunk requested
  uint64_t reads = 0;
  uint64_t age = 0;     // for replacing the least recently used stream
  uint64_t id = 0;      // engine-wide, for counting the streams being read
  bool continuation = false;  // made for the reader coming from the file before (ContinueInto)
  uint64_t process = 0;       // a continuation's: the process of that reader (0: not known)
  // How far ahead of itself it is prefetched (bytes; 0: not grown yet, the
  // least): doubled, up to its share of prefetch_window, each time a read of
  // it waits for a prefetch that has not arrived. A store that keeps up (a
  // local directory) is read ahead no further than it needs, in fewer fresh
  // buffers; a link with a long first byte grows it in a few reads.
  uint64_t window = 0;
};

// What one reader is doing in one object: what the access model keeps of it,
// and the runs of chunks it moves through.
struct AccessState {
  AccessModel::Trail trail;
  std::vector<Stream> streams;
  int far_jumps = 0;
  // The process of the reader (ReaderId::process; 0: not known, or the reads
  // that name no reader).
  uint64_t process = 0;
  // It took over the stream prefetched for the reader of the file before
  // (ContinueInto): the reader of that file, come to read this one.
  bool continued = false;
};


// Prefetching one slice pattern's windows of one object, in storage order from
// the tensor first read, wrapping round to the ones before it.
struct SliceSweep {
  size_t start = 0;
  size_t visited = 0;      // tensors whose windows are requested
  uint64_t in_flight = 0;  // bytes requested and not yet arrived
  // The readahead the pattern's reader has the object open with (or will:
  // a sweep into the next shard), whose margins its windows take; 0: the
  // mount's now.
  uint64_t file_readahead = 0;
};

// Byte ranges of a file the kernel received in full, as whole cache entries
// (merged): the kernel caches them itself, so prefetches made for the file's
// own readers skip them, cached or not. A kernel read of given bytes shows
// that it dropped them, and most likely others it was given with them (the
// page cache drops a file's pages by age; drop_caches, or memory wanted
// elsewhere, drops many at once): what it holds is then not known, and
// nothing is taken to be given until it is given again.
class GivenRanges {
 public:
  bool Holds(ByteRange range) const;
  // The parts of `range` not given, in order.
  std::vector<ByteRange> NotGiven(ByteRange range) const;
  void Add(ByteRange range);
  // A kernel read of `range`: if a whole page of it was given, forgets every
  // range (see above) and returns true.
  bool Dropped(ByteRange range);

 private:
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end
};

struct ObjectState {
  ObjectInfo info;
  std::shared_ptr<const ChunkPlan> plan;
  bool head_requested = false;
  std::vector<std::function<void(const Status&)>> plan_waiters;
  // Reads that name no reader, and the stream ContinueInto makes ready for
  // the next reader to come (a reader new to the object of the same process
  // starts from it).
  AccessState access;
  uint64_t last_used = 0;  // the engine's clock at its last use
  int jobs = 0;            // fetches queued or running for it
  bool sweep = false;      // prefetching the whole object in storage order
  uint64_t sweep_process = 0;  // the process of the reader it is for (AccessState::process)
  size_t sweep_next = 0;
  int sweep_in_flight = 0;
  std::optional<ObjectInfo> successor;  // the file read after it (ReadEngine::SetReadOrder)
  uint64_t continue_bytes = 0;  // prefetch this much from the start once the plan is known
  uint64_t continue_process = 0;  // for a reader of this process (Stream::process)
  // Prefetch() calls made before the plan was known: range, within.
  std::vector<std::pair<ByteRange, std::optional<ByteRange>>> pending_prefetch;
  ExtentMap* extents = nullptr;            // what the cache holds of it (ChunkCache::Extents)
  std::map<int, SliceSweep> slice_sweeps;  // by pattern id
  std::vector<int> pending_sweeps;         // pattern ids to sweep once the plan is known
  GivenRanges given;
  // Whether its readers, each reading a part, together read it whole: then it
  // is served as a whole-tensor loader's (ReadEngine::Read).
  ReadTogether together;
};

// One range request, queued for a fetch worker.
struct FetchJob {
  ObjectId object;
  ExtentId extent = 0;  // the loading extent it fills (none for the head)
  ByteRange range;
  bool head = false;  // the head fetch, which also builds the plan
  bool sweep = false;
  int slice = -1;  // the pattern whose sweep requested it
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_OBJECT_STATE_H_
