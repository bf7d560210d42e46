// ReadEngine: turns the kernel's reads (4 KiB to 1 MiB, in any order, from any
// number of readers) into few, large, parallel range requests, and serves the
// reads from one shared in-memory chunk cache.
//
//   Read(object, offset, size, done)
//     -> the object's ChunkPlan (from its header, fetched with the first read)
//     -> the chunks the range needs: cached, being fetched (join that fetch), or
//        fetched now at demand priority
//     -> prefetch, by what the reads show (see "Readers" below)
//     -> done(bytes) once every chunk is in, called on the thread that
//        completed the last fetch: a read never blocks the caller's thread.
//
// Readers. The kernel's reads of safetensors files are sorted into three kinds:
//   - whole-tensor readers (a tensor read from end to end, or nearly): the rest
//     of each tensor touched, the next chunks in storage order for a reader
//     moving forward (its share of prefetch_window among the readers moving
//     forward at once), the whole object in storage order once readers jump
//     around in it (three jumps, or one in a shard whose start was prefetched
//     for the reader of the shard before), the start of the next shard near
//     the end of one;
//   - slice readers (one host of a sharded job: the same fraction of rows of
//     every tensor, see slice_pattern.h): once a few tensors show the fraction,
//     reads inside a tensor's window of it fetch that window only, and the
//     windows of the following tensors, then of the next shards, are
//     prefetched in storage order, close windows coalesced into requests of up
//     to chunk_size; no whole-tensor or whole-object prefetch for them;
//   - readers not known yet (the first reads of a mount, strided column
//     readers): the chunk they need and, ahead of a reader moving on within a
//     tensor, as many bytes as it has read there in a row, within the tensor;
//     for a copy whose extent its first reads show (memcpy reads the first
//     page, the last, then the rest), the bytes in between at once and
//     nothing past it.
// What a reader is doing is kept per reader (ReaderId: one open file), so
// two processes reading one file, one a whole-tensor loader and one a slice
// reader, each keep their own pattern; the slice patterns learned are shared
// by all readers (a host's next file is read by a new reader).
// The mode is decided per read by the access model; a read spanning two tensors (the
// kernel reading around a page near a tensor's edge) fetches only its pages
// for a reader not known yet.
// What the cache holds of an object version is its extent map
// (extent_map.h): whole chunks, and pieces of chunks a slice reader or a view
// needed only part of, never overlapping; a later read or prefetch of such a
// chunk fetches only the gaps between its pieces (or, when they are few, the
// whole chunk, which replaces them).
//
// Reads are pinned to the object's generation (each version has its own
// extent map): a replaced object fails with kStale, never returns a mix of
// versions.
//
// Memory: the cache holds at most cache_size bytes of chunks, loading ones
// included. A read that finds the cache full of chunks still loading may
// exceed it by the chunks it needs; prefetch never does.
//
// Every tuning constant is in Tuning (tuning.h), derived from chunk_size and
// the kernel's readahead in force (EngineOptions::readahead).
//
// Readahead: what the engine learns of its readers (whole-tensor, slice) sets
// the readahead the mount's next files are opened with (readahead_policy.h),
// through the sink the FUSE adapter gives (SetReadaheadSink). While slice
// readers set it, their windows' margins are what the kernel reads around a
// fault at the slice readahead.
//
// State is bounded: objects' state (and their cached extents) past
// Tuning::max_objects idle ones, readers' past Tuning::max_readers (and at
// ReleaseReader), extents by the cache's budget, slice sweeps with the
// patterns they belong to.
//
// A broken invariant on the read path (cache entries that do not tile a read)
// answers that read with kInternal (EIO), is logged (rate-limited) and counted
// in Metrics::engine_inconsistencies; the daemon goes on serving.
//
// Where each concern lives (classes of their own, and ReadEngine's
// definitions by concern):
//   read_engine.cc      the facade: Read, Prefetch, ReadDerived, FinishRead,
//                       per-object and per-reader state and its bounds, the
//                       bytes the kernel holds, the readahead sink;
//   access_model.h      what a reader is doing (AccessModel::Classify:
//                       touches, whole-tensor and slice readers, copies; the
//                       slice patterns learned): pure logic, it requests
//                       nothing, but returns what a read calls for at once
//                       (PlannerCall);
//   fetch_planner.cc    which ranges to request: chunks, the gaps between
//                       extents, streams and their windows, sweeps, slice
//                       windows, the next shard;
//   fetch_scheduler.h   the queues, promotion and workers (FetchScheduler);
//   fetch_scheduler.cc  what a worker runs: a fetch, the head fetch that
//                       builds an object's plan, publishing them;
//   chunk_cache.h       the byte-budgeted cache of extents (extent_map.h, one
//                       map per object version); buffer_pool.h its buffers;
//   slice_pattern.h     the slice learner; readahead_policy.h the mount's
//                       readahead by kind of reader; tuning.h every constant.
//
// Thread-safety: all public methods may be called concurrently. mu_ guards the
// cache and the per-object and per-reader state; it is never held across store
// I/O, while calling a ReadDone or ChunkWaiter, or while unmapping an evicted
// chunk's buffer (EvictedChunks). Lock order: mu_, then BufferPool's lock
// (taken when a fetch maps a buffer) or the scheduler's (a job pushed or
// promoted); ReadTrace's lock is taken alone; readahead_mu_ (the readahead
// sink's calls) before mu_.
#ifndef TENSORFS_CORE_ENGINE_READ_ENGINE_H_
#define TENSORFS_CORE_ENGINE_READ_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "core/engine/access_model.h"
#include "core/engine/buffer_pool.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/chunk_plan.h"
#include "core/engine/extent_map.h"
#include "core/engine/fetch_scheduler.h"
#include "core/engine/read_result.h"
#include "core/engine/read_trace.h"
#include "core/engine/readahead_policy.h"
#include "core/engine/tuning.h"
#include "core/metrics/metrics.h"
#include "core/store/object_store.h"
#include "core/util/log_limiter.h"
#include "core/util/thread_annotations.h"

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
  // windows are prefetched from the first read on. world 0: learn from reads.
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

// How a read takes part in prefetching. The kernel's reads of a plain file use
// the defaults: they drive the stream prefetch, count as served, and mark the
// bytes delivered (a chunk whose bytes all went out is the first to evict).
// Reads made on behalf of a view file set `prefetch` false: the view reader
// prefetches the ranges it needs itself and counts its own reads. Reads whose
// bytes will be needed again (the catalog's header reads, which loaders repeat)
// set `delivered` false.
//
// `within`, when set, is the part of the object the caller reads (a view file's
// run of tensors in it): a chunk the read needs that is neither cached nor
// being fetched and reaches outside `within` is fetched only as far as it lies
// inside (an extent of its own), so that reading one layer does not pull in
// the neighbouring layers' bytes.
// The reader a kernel read is for: one open file (FUSE gives each open its own
// handle; two processes reading one file, or one process opening it twice, are
// two readers). Each reader's reads are told apart from the others': what one
// of them does (read whole tensors, a slice, in order) says nothing about the
// next. 0: the reader of every read that names none (one per object).
struct ReaderId {
  uint64_t value = 0;
  auto operator<=>(const ReaderId&) const = default;
};

struct ReadHints {
  ReaderId reader;
  bool prefetch = true;
  bool delivered = true;
  std::optional<ByteRange> within;
};

// Computes a derived chunk (see ReadDerived) and hands it to `publish`, on any
// thread, exactly once.
using DeriveFn = std::function<void(std::function<void(StatusOr<std::shared_ptr<Chunk>>)> publish)>;

class ReadEngine {
 public:
  // `store` and `metrics` must outlive the engine. Fetched chunks take their
  // buffers from `pool`; null: a pool of BufferPool::Options::ForCache(cache_size).
  ReadEngine(ObjectStore& store, const EngineOptions& options, Metrics& metrics,
             std::shared_ptr<BufferPool> pool = nullptr);
  // Fails queued fetches, then waits for the running ones to finish.
  ~ReadEngine();

  // Reads up to `size` bytes at `offset` of `object` (fewer at its end, none past
  // it) and calls `done` exactly once, on any thread, maybe before returning.
  void Read(const ObjectInfo& object, uint64_t offset, size_t size, ReadDone done,
            ReadHints hints = {}) EXCLUDES(mu_);

  // Starts fetching, at prefetch priority, the chunks of `object` that cover
  // `range` and are not cached yet (as far as the cache has room); with
  // `within`, only the parts inside it, as ReadHints describes.
  void Prefetch(const ObjectInfo& object, ByteRange range, std::optional<ByteRange> within = std::nullopt)
      EXCLUDES(mu_);

  // A chunk computed from other bytes (a view's quantized tensor, say), kept in
  // the same cache and budget as fetched chunks, with the same single-flight
  // rule: the first caller's `derive` computes it, later callers wait for that.
  // Derived chunks are found by `key` alone, apart from stored objects'
  // extents. `done` is called exactly once, on any thread.
  void ReadDerived(const ChunkKey& key, uint64_t size, const DeriveFn& derive, ChunkWaiter done) EXCLUDES(mu_);

  // Starts fetching the head (header and start of data) of `object`, so that a
  // loader opening many shards finds their headers in memory.
  void PrefetchHead(const ObjectInfo& object) EXCLUDES(mu_);

  // The slice patterns in use (learned or given by shard_rank/shard_world),
  // for stats and tests.
  std::vector<SlicePattern> SlicePatterns() EXCLUDES(mu_);

  Metrics& metrics() { return metrics_; }

  // Hints that `objects` (the shards of one checkpoint, in order) tend to be
  // read one after another: a reader reaching the end of one has the start of
  // the next prefetched, so the link does not idle between files.
  void SetReadOrder(const std::vector<ObjectInfo>& objects) EXCLUDES(mu_);

  // The plan of an object whose head has been fetched; null before.
  std::shared_ptr<const ChunkPlan> PlanOf(const ObjectId& object) EXCLUDES(mu_);

  // The file `reader` was opened on is closed: what was learned of it goes.
  void ReleaseReader(ReaderId reader) EXCLUDES(mu_);

  // Where the readahead policy's value goes (the FUSE adapter writes the
  // mount's bdi): called at once with the value wanted now, then each time
  // what the engine learns of its readers changes it; never under mu_, one
  // call at a time, the last call with the value wanted last.
  void SetReadaheadSink(std::function<void(uint64_t bytes)> sink) EXCLUDES(readahead_mu_, mu_);
  // The readahead the policy wants for files opened now (0: the kernel's).
  uint64_t WantedReadahead() EXCLUDES(mu_);

  // How much bookkeeping the engine holds (for stats and tests): each is
  // bounded, whatever the number of objects, generations and readers seen.
  struct StateSizes {
    size_t objects = 0;       // objects with per-object state (plan, streams, extents)
    size_t readers = 0;       // readers with state of their own
    size_t extents = 0;       // extents cached or loading, all objects
    size_t slice_sweeps = 0;  // slice prefetches tracked, all objects
    size_t touches = 0;       // recent tensor reads tracked, all readers
  };
  StateSizes Sizes() EXCLUDES(mu_);

  // Whether no fetch is queued or running: for tests that replay reads one at
  // a time and let the engine settle between them.
  bool Idle() EXCLUDES(mu_);

 private:
  friend class ReadEngineTestPeer;  // breaks the engine's state on purpose, to test its reporting
  struct ReadOp;
  // Prefetching one pattern's windows of one object, in storage order from
  // the tensor first read, wrapping round to the ones before it.
  struct SliceSweep {
    size_t start = 0;
    size_t visited = 0;       // tensors whose windows are requested
    uint64_t in_flight = 0;   // bytes requested and not yet arrived
  };
  // A run of chunks one reader is moving through (see UpdateStreams).
  struct Stream {
    size_t start = 0;     // first chunk of the run
    size_t last = 0;      // highest chunk read
    size_t frontier = 0;  // highest chunk requested
    uint64_t reads = 0;
    uint64_t age = 0;     // for replacing the least recently used stream
    uint64_t id = 0;      // engine-wide, for counting the streams being read
    bool continuation = false;  // made for the reader coming from the file before (ContinueInto)
    // How far ahead of itself it is prefetched (bytes; 0: not grown yet, the
    // least): doubled, up to its share of prefetch_window, each time a read
    // of it waits for a prefetch that has not arrived. A store that keeps up
    // (a local directory) is read ahead no further than it needs, in fewer
    // fresh buffers; a link with a long first byte grows it in a few reads.
    uint64_t window = 0;
  };
  using Mode = AccessModel::Mode;
  // What one reader is doing in one object: what the access model keeps of
  // it, and the runs of chunks it moves through.
  struct AccessState {
    AccessModel::Trail trail;
    std::vector<Stream> streams;
    int far_jumps = 0;
  };
  struct ReaderState {
    ObjectId object;  // the object `access` is of (an open file reads one)
    AccessState access;
    AccessModel::ReaderClock clock;
    // Learns this reader's slice from its own tensors only (readers of other
    // ranks interleaved with it would crowd each other out of one learner).
    SliceLearner learner;
    uint64_t last_used = 0;
    ReadaheadPolicy::Kind kind = ReadaheadPolicy::Kind::kUnknown;  // as told to readahead_
  };
  struct ObjectState {
    ObjectInfo info;
    std::shared_ptr<const ChunkPlan> plan;
    bool head_requested = false;
    std::vector<std::function<void(const Status&)>> plan_waiters;
    // Reads that name no reader, and the stream ContinueInto makes ready for
    // the next reader to come (a reader new to the object starts from it).
    AccessState access;
    uint64_t last_used = 0;  // engine_clock_ at its last use
    int jobs = 0;            // fetches queued or running for it
    bool sweep = false;  // prefetching the whole object in storage order
    size_t sweep_next = 0;
    int sweep_in_flight = 0;
    std::optional<ObjectInfo> successor;  // see SetReadOrder
    uint64_t continue_bytes = 0;  // prefetch this much from the start once the plan is known
    bool continued = false;       // its start was prefetched for the reader of the file before it
    // Prefetch() calls made before the plan was known: range, within.
    std::vector<std::pair<ByteRange, std::optional<ByteRange>>> pending_prefetch;
    ExtentMap* extents = nullptr;              // what the cache holds of it (cache_.Extents)
    std::map<int, SliceSweep> slice_sweeps;    // by pattern id
    std::vector<int> pending_sweeps;           // pattern ids to sweep once the plan is known
    // Bytes of this file the kernel received in full, as whole cache entries
    // (begin -> end, merged): prefetches made for its own readers skip them,
    // cached or not. A kernel read of given bytes (it dropped them) takes
    // them out again.
    std::map<uint64_t, uint64_t> given;
  };
  struct Job {
    ObjectId object;
    ExtentId extent = 0;  // the loading extent it fills (none for the head)
    ByteRange range;
    bool head = false;  // the head fetch, which also builds the plan
    bool sweep = false;
    int slice = -1;  // the pattern whose sweep requested it
  };

  ObjectState& StateOf(const ObjectInfo& object) REQUIRES(mu_);
  // The state of `reader`, on `state`'s object; a reader new to it starts from
  // the object's continuation stream.
  ReaderState& ReaderOf(ReaderId reader, ObjectState& state) REQUIRES(mu_);
  // Drops the state of objects nothing is pending on, least recently used
  // first, past kMaxObjects; no ObjectState reference may be held across it.
  void PruneObjects() REQUIRES(mu_);
  // Stops the sweeps of a pattern the access model gave up.
  void DropSweeps(int pattern_id) REQUIRES(mu_);
  void StartHead(ObjectState& state, bool prefetch) REQUIRES(mu_);
  // Requests chunk `index` (if not cached or loading, nor given to the kernel
  // for a prefetch): its gaps if pieces of it hold much of it, else the whole
  // chunk. Prefetches give up when the cache has no room; returns whether the
  // chunk is cached, coming or given.
  bool Request(ObjectState& state, size_t index, bool prefetch, bool sweep = false) REQUIRES(mu_);
  // How a read is to be served, from what the access model said of it.
  struct ReadKind {
    Mode mode = Mode::kWhole;
    const AccessModel::ActivePattern* pattern = nullptr;  // kSlice, kNearSlice
    uint64_t copy_end = UINT64_MAX;  // where the copy the read is part of ends, if known
    bool spans_tensors = false;
    std::optional<ByteRange> within;  // see ReadHints
  };
  // The range of a chunk a read needs cached or coming, and the largest
  // request for its gaps.
  struct Want {
    ByteRange range;
    uint64_t max_piece = 0;
  };
  // What of `chunk` (not cached whole) a read of `part` of it, of `kind`,
  // wants (see "Readers").
  Want WantOf(const ObjectState& state, ByteRange chunk, ByteRange part, const ReadKind& kind) const REQUIRES(mu_);
  // Requests the gaps of `want` and returns the extents that cover `part`, in
  // order, each with its bytes when they are in (held, so that requesting
  // the gaps cannot evict them from under the read).
  std::vector<std::pair<ExtentId, std::shared_ptr<const Chunk>>> Cover(ObjectState& state, const Want& want,
                                                                       ByteRange part) REQUIRES(mu_);
  // The part of `chunk` a reader confined to `within` reads: the chunk unless
  // it reaches across an edge of `within` (see ReadHints).
  static ByteRange PartWithin(ByteRange chunk, const std::optional<ByteRange>& within);
  // Requests `range` (within one chunk) as one new extent, replacing the
  // extents it overlaps (see ChunkCache::InsertLoading). `slice`: the pattern
  // whose sweep requests it. Returns its id; 0 when the cache had no room for
  // a prefetch.
  ExtentId RequestExtent(ObjectState& state, ByteRange range, bool prefetch, bool sweep = false, int slice = -1)
      REQUIRES(mu_);
  void Enqueue(ObjectState& state, Job job, bool prefetch) REQUIRES(mu_);
  // Requests the parts of `range` (within one chunk) that no extent covers,
  // each at most `max_piece` bytes. Returns bytes requested, or -1 when the
  // cache had no room for a prefetch. `tiles`, when given, holds the extents
  // overlapping `range` (the caller looked them up); the new ones are
  // appended to it.
  int64_t RequestGaps(ObjectState& state, ByteRange range, bool prefetch, uint64_t max_piece, int slice = -1,
                      std::vector<ExtentMap::Extent>* tiles = nullptr) REQUIRES(mu_);
  // Carries out what the access model said a read calls for.
  void Plan(ObjectState& state, const std::vector<AccessModel::PlannerCall>& calls) REQUIRES(mu_);
  // Whether the kernel received all of `range` (see ObjectState::given).
  static bool Given(const ObjectState& state, ByteRange range);
  static void AddGiven(ObjectState& state, ByteRange range);
  static void RemoveGiven(ObjectState& state, ByteRange range);
  // Prefetches windows of `pattern` (id) in `state`'s object, starting at
  // tensor `from` if the sweep is new, up to prefetch_window bytes in flight.
  void TopUpSliceSweep(ObjectState& state, int id, size_t from) REQUIRES(mu_);
  void StartSliceSweep(ObjectState& state, int id, size_t from) REQUIRES(mu_);
  // Prefetch for a reader not known yet: the bytes ahead of it within the
  // tensor (or the copy it makes, once known), as many as it has read there
  // in a row.
  void RampWithinTensor(ObjectState& state, const AccessState& access, ByteRange range) REQUIRES(mu_);
  // Requests the parts of `range` not cached or coming, as pieces of up to
  // 4 MiB, at prefetch priority.
  void PrefetchPieces(ObjectState& state, ByteRange range) REQUIRES(mu_);
  // Prefetches the rest of tensor `index` (a whole-tensor reader's).
  void ContinueTensor(ObjectState& state, size_t index) REQUIRES(mu_);
  // Requests the parts of the chunks covering `range` (inside `within` when
  // given) not cached or coming, at prefetch priority.
  void PrefetchRange(ObjectState& state, ByteRange range, const std::optional<ByteRange>& within) REQUIRES(mu_);
  // Records a read of chunks [first, last] ending at byte `read_end` and starts
  // the prefetches it calls for; `waited`: the read waits for a prefetch.
  void UpdateStreams(ObjectState& state, AccessState& access, size_t first, size_t last, uint64_t read_end,
                     bool waited)
      REQUIRES(mu_);
  void TopUpSweep(ObjectState& state) REQUIRES(mu_);
  // Prefetches `bytes` from the start of `state`'s object (a predecessor's reader
  // is about to arrive), starting a stream there.
  void ContinueInto(ObjectState& state, uint64_t bytes) REQUIRES(mu_);
  // The same for the object read after `state`'s (see SetReadOrder), when only
  // `left` bytes of this one remain to be fetched.
  void ContinueIntoSuccessor(ObjectState& state, uint64_t left) REQUIRES(mu_);
  // The chunks from `from` on that make up `bytes` (at least one).
  static size_t WindowChunks(const ChunkPlan& plan, size_t from, uint64_t bytes);
  // A stream was read: it counts as being read for the next kActiveReads
  // stream reads, engine-wide.
  void NoteStreamRead(uint64_t id) REQUIRES(mu_);
  // How far ahead of itself a sequential reader is prefetched: its share of
  // prefetch_window among the streams being read, at least kMinStreamWindow.
  uint64_t StreamWindow() const REQUIRES(mu_);

  void RunJob(const Job& job) EXCLUDES(mu_);
  // Fetches the head of an object and builds its plan.
  StatusOr<std::shared_ptr<Chunk>> FetchHead(const ObjectInfo& object, std::shared_ptr<const ChunkPlan>* plan);
  void FinishRead(const std::shared_ptr<ReadOp>& op) EXCLUDES(mu_);
  // The engine's own state contradicts itself (a bug): counted in
  // metrics().engine_inconsistencies and logged (rate-limited) with `what`;
  // the caller answers just that read with an error, the mount goes on.
  void Inconsistent(const std::string& what);
  // Tells the readahead policy that `r` is now of `kind`.
  void SetKind(ReaderState& r, ReadaheadPolicy::Kind kind) REQUIRES(mu_);
  // Hands the policy's value to the sink if it changed (see SetReadaheadSink).
  void ApplyReadahead() EXCLUDES(readahead_mu_, mu_);

  ObjectStore& store_;
  const EngineOptions options_;
  const Tuning tuning_;
  Metrics& metrics_;
  const std::shared_ptr<BufferPool> pool_;  // chunk buffers; outlives the chunks it lends to

  Mutex mu_;
  bool stopping_ GUARDED_BY(mu_) = false;
  ChunkCache cache_ GUARDED_BY(mu_);
  std::map<ObjectId, ObjectState> objects_ GUARDED_BY(mu_);
  AccessModel model_ GUARDED_BY(mu_);
  SliceLearner learner_ GUARDED_BY(mu_);  // of the reads that name no reader
  AccessModel::ReaderClock anonymous_ GUARDED_BY(mu_);  // of the reads that name no reader
  std::map<ReaderId, ReaderState> readers_ GUARDED_BY(mu_);
  std::map<ObjectId, ObjectInfo> read_order_ GUARDED_BY(mu_);  // object -> the one read after it (SetReadOrder)
  uint64_t engine_clock_ GUARDED_BY(mu_) = 0;  // calls that used object or reader state
  uint64_t next_stream_id_ GUARDED_BY(mu_) = 1;
  std::deque<uint64_t> recent_streams_ GUARDED_BY(mu_);   // ids of the last kActiveReads stream reads
  std::map<uint64_t, int> streams_read_ GUARDED_BY(mu_);  // id -> its reads among them
  ReadaheadPolicy readahead_ GUARDED_BY(mu_);
  uint64_t readahead_wanted_ GUARDED_BY(mu_) = 0;  // readahead_.Wanted() when last looked at
  std::atomic<bool> readahead_changed_{false};        // readahead_wanted_ not yet handed to the sink
  // Serialises the sink's calls, so that the last one carries the last value.
  // Lock order: readahead_mu_, then mu_.
  Mutex readahead_mu_ ACQUIRED_BEFORE(mu_);
  std::function<void(uint64_t)> readahead_sink_ GUARDED_BY(readahead_mu_);
  uint64_t readahead_applied_ GUARDED_BY(readahead_mu_) = UINT64_MAX;
  std::unique_ptr<ReadTrace> trace_;  // see EngineOptions::trace_reads
  LogRateLimiter inconsistency_log_{std::chrono::seconds(10), "engine inconsistencies"};
  // Its lock is taken after mu_ (jobs are pushed and promoted under mu_); a
  // job runs (RunJob) with neither held until it publishes.
  FetchScheduler<Job> scheduler_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_READ_ENGINE_H_
