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
//     nothing past it. Those pages are the copy's own, read in that order:
//     neither the kernel reading around a fault in the tensor after (a slice
//     reader's row of a layer norm there), which touches the tensor's end,
//     nor the start of a reader's rows that it reads on from (the last
//     rank's, which end with the tensor) makes a copy.
//   With -o shard=0/1 (shard_world 1: the host reads every tensor whole) no
//   reader is unknown: each is served as a whole-tensor reader from its first
//   read; with -o shard=R/N the windows of slice R are known from the first.
// What a reader is doing is kept per reader (ReaderId: one open file), so
// two processes reading one file, one a whole-tensor loader and one a slice
// reader, each keep their own pattern. What a reader takes from others comes
// from readers of its own process only (ReaderId::process; where either
// process is not known, from any): the slice patterns its process learned (a
// host's next file is read by a new reader; a pattern found too wide is
// narrowed by its readers), the readahead its file was opened with
// (readahead_policy.h: what its process's readers were seen to do) and so
// whether it is taken for a whole-tensor reader from its first read, and the
// stream prefetched into a shard for the reader of the one before. A
// whole-tensor loader of another process, of the same checkpoint or another,
// changes none of it.
// A reader is one open file and, within it, one thread (ReaderId::thread): a
// loader's threads copying different tensors out of one mapping each read
// their own tensor whole. What the readers of one object read is also taken
// together (ReadTogether, read_together.h): where several readers each read
// on from a different place in one tensor (the ranks of a tensor-parallel job
// on one host), a reader not known yet is read ahead at once to where the
// next one began (its rows likely end there); once one tensor was read
// nearly whole by two readers or more together, the object is served as a
// whole-tensor loader's (every read's chunk whole, the object prefetched in
// storage order, its readers' slice windows withdrawn), and the cache keeps
// the chunks such readers are using (chunk_cache.h: "in use").
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
// Readahead: what the engine learns of a process's readers (whole-tensor,
// slice) sets the readahead that process's next files are opened with
// (readahead_policy.h), through the sink the FUSE adapter gives
// (SetReadaheadSink) as each is opened (Opening). A slice reader's windows'
// margins are what the kernel reads around a fault at the readahead its own
// file was opened with.
//
// State is bounded: objects' state (and their cached extents) past
// Tuning::max_objects idle ones (and a version no file shows any more at
// ForgetObject), readers' past Tuning::max_readers (and at ReleaseReader),
// processes' kinds past ReadaheadPolicy::kProcesses, extents by the cache's
// budget, slice sweeps with the patterns they belong to.
//
// A broken invariant on the read path (cache entries that do not tile a read)
// answers that read with kInternal (EIO), is logged (rate-limited) and counted
// in Metrics::engine_inconsistencies; the daemon goes on serving.
//
// Where each concern lives (classes of their own, and ReadEngine's
// definitions by concern):
//   read_engine.cc      the facade: Read, Prefetch, ReadDerived, FinishRead,
//                       per-object and per-reader state and its bounds, the
//                       readahead sink;
//   engine_options.h    what the mount asks of the engine, validated;
//   object_state.h      what is kept per object version and per reader's
//                       moves through it (streams, sweeps, the bytes the
//                       kernel holds), shared by the facade and the planner;
//   access_model.h      what a reader is doing (AccessModel::Classify:
//                       touches, whole-tensor and slice readers, copies; the
//                       slice patterns learned): pure logic, it requests
//                       nothing, but returns what a read calls for at once
//                       (PlannerCall);
//   fetch_planner.h     which ranges to request (FetchPlanner): chunks, the
//                       gaps between extents, streams and their windows,
//                       sweeps, slice windows, the next shard; it reads the
//                       extent maps and charges the cache's budget;
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
#include <set>
#include <thread>
#include <vector>

#include "core/engine/access_model.h"
#include "core/engine/buffer_pool.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/chunk_plan.h"
#include "core/engine/engine_options.h"
#include "core/engine/extent_map.h"
#include "core/engine/fetch_planner.h"
#include "core/engine/fetch_scheduler.h"
#include "core/engine/object_state.h"
#include "core/engine/read_result.h"
#include "core/engine/read_trace.h"
#include "core/engine/readahead_policy.h"
#include "core/engine/tuning.h"
#include "core/metrics/metrics.h"
#include "core/store/object_store.h"
#include "core/util/log_limiter.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

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
// `process`: the process that opened the file (0: not known). One process's
// readers of several files share what they show (the slice patterns they
// learned, which a reader may narrow; whether they read whole tensors, which
// sets the readahead its next files are opened with); readers of two
// processes share none of it.
// `thread`: the thread whose read it is (the id a kernel read request names:
// the thread that faulted or called read(); 0: not known, and for an open).
// One open file read by several threads at once is several readers, one a
// thread: a loader's threads copying different tensors out of one mapping
// each read their own tensor from end to end, which their reads interleaved
// would hide. They share what the open file has: its readahead and its
// process. A thread's reads of another open file are another reader.
struct ReaderId {
  uint64_t value = 0;
  uint64_t process = 0;
  uint64_t thread = 0;
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

class ReadEngine final : private FetchPlanner::Host {
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
  // Whether the derived chunk `key` is cached or being computed: its source
  // bytes need no prefetch (they may already have been used and dropped).
  bool HasDerived(const ChunkKey& key) EXCLUDES(mu_);

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

  // The file `reader` was opened on is closed: what was learned of it goes,
  // of every thread that read it.
  void ReleaseReader(ReaderId reader) EXCLUDES(mu_);

  // No file shows the object version `object` any more (the namespace freed
  // its node): its state, its cached extents and its place in the read order
  // go now, not when the engine's bounds reach them. State that fetches
  // queued or running still use stays until they end (PruneObjects then finds
  // it idle); chunks a read holds stay until the read is answered.
  void ForgetObject(const ObjectId& object) EXCLUDES(mu_);

  // Where the readahead policy's value goes (the FUSE adapter writes the
  // mount's bdi): called at once with the value wanted now, then each time
  // what the engine learns of its readers changes it, and when a safetensors
  // file that wants another value is opened (Opening); never under mu_, one
  // call at a time, the last call with the value wanted last.
  void SetReadaheadSink(std::function<void(uint64_t bytes)> sink) EXCLUDES(readahead_mu_, mu_);
  // The object `name` is being opened by `reader` (its process: the one
  // opening it): a safetensors file gets the readahead the policy wants for
  // it and that process (ReadaheadPolicy::WantedFor) through the sink now,
  // before the open is answered, as the kernel sets an opened file's
  // readahead from the mount's once the open returns; the reader's reads are
  // taken to be of a file at that readahead. Other files take the value in
  // force. Two safetensors files wanting different values, opened at the
  // same instant, may both get the second.
  void Opening(std::string_view name, ReaderId reader = {}) EXCLUDES(readahead_mu_, mu_);
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
  using Mode = AccessModel::Mode;
  struct ReaderState {
    ObjectId object;  // the object `access` is of (an open file reads one); none before its first read
    uint64_t process = 0;  // ReaderId::process
    AccessState access;
    AccessModel::ReaderClock clock;
    // Learns this reader's slice from its own tensors only (readers of other
    // ranks interleaved with it would crowd each other out of one learner).
    SliceLearner learner;
    uint64_t last_used = 0;
    ReadaheadPolicy::Kind kind = ReadaheadPolicy::Kind::kUnknown;  // as told to readahead_
    // The readahead its file was opened with (0: the kernel's, or not
    // known): what Opening handed the sink for it (`opened`; a thread's
    // reader takes its open file's), else, from its first read, what its
    // process's files are opened with then.
    uint64_t file_readahead = 0;
    bool opened = false;
  };

  // FetchPlanner::Host: the state of `object`, made if new.
  ObjectState& StateOf(const ObjectInfo& object) override REQUIRES(mu_);
  // FetchPlanner::Host: queues the head fetch, which builds the plan; a
  // queued one becomes demand when a reader waits for it.
  void StartHead(ObjectState& state, bool prefetch) override REQUIRES(mu_);
  // FetchPlanner::Host: queues a range request.
  void Enqueue(ObjectState& state, FetchJob job, bool prefetch) override REQUIRES(mu_);
  // FetchPlanner::Host: the readahead the files of `state`'s object will be
  // opened with by the process of `pattern`.
  uint64_t FileReadaheadOf(const ObjectState& state, const AccessModel::ActivePattern& pattern) override
      REQUIRES(mu_);
  // FetchPlanner::Host: sweeps on, and what they have left to request.
  void SweepStarted(const ObjectState& state) override REQUIRES(mu_);
  uint64_t SweepsLeft() override REQUIRES(mu_);
  // The readahead a file of `object` opened now by `process` gets.
  uint64_t FileReadaheadFor(const ObjectInfo& object, uint64_t process) REQUIRES(mu_);
  // The state of `reader`, made if new (and the least recently used past
  // Tuning::max_readers dropped).
  ReaderState& Remember(ReaderId reader) REQUIRES(mu_);
  // The state of `reader`, on `state`'s object; at its first read there, it
  // takes the readahead its file was opened with and starts from the
  // object's continuation stream, if one was made for a reader of its process.
  ReaderState& ReaderOf(ReaderId reader, ObjectState& state) REQUIRES(mu_);
  // Drops the state of objects nothing is pending on, least recently used
  // first, past Tuning::max_objects; no ObjectState reference may be held
  // across it.
  void PruneObjects() REQUIRES(mu_);
  // Stops the sweeps of a pattern the access model gave up, and withdraws
  // its queued windows no read waits for.
  void DropSweeps(int pattern_id) REQUIRES(mu_);
  // `state`'s readers together read it whole (ReadTogether): it is prefetched
  // whole in storage order, its slice windows queued and not waited for are
  // withdrawn, and the file after it is taken to be read so too.
  void ReadTogetherWhole(ObjectState& state) REQUIRES(mu_);

  // Runs a queued fetch; returns the bytes it delivered (0 if it failed).
  uint64_t RunJob(const FetchJob& job) EXCLUDES(mu_);
  // Fetches the head of an object and builds its plan.
  StatusOr<std::shared_ptr<Chunk>> FetchHead(const ObjectInfo& object, std::shared_ptr<const ChunkPlan>* plan);
  void FinishRead(const std::shared_ptr<ReadOp>& op) EXCLUDES(mu_);
  // The engine's own state contradicts itself (a bug): counted in
  // metrics().engine_inconsistencies and logged (rate-limited) with `what`;
  // the caller answers just that read with an error, the mount goes on.
  void Inconsistent(const std::string& what);
  // Tells the readahead policy that `r` is now of `kind`.
  void SetKind(ReaderState& r, ReadaheadPolicy::Kind kind) REQUIRES(mu_);
  // Takes the policy's values now (after a reader's kind or the slices' size
  // changed): logs the value of `process`'s next files where it is no longer
  // `was`, and takes the mount's (ReadaheadPolicy::Wanted) for the access
  // model's windows and the sink's next value.
  void TakeWanted(uint64_t process, uint64_t was, const char* why) REQUIRES(mu_);
  // Tells the policy the size of `pattern`'s slices in `state` (a plan
  // known), read by a reader of `process`, if not told yet.
  void LearnSliceSize(const ObjectState& state, const SlicePattern& pattern, uint64_t process) REQUIRES(mu_);
  // Hands the policy's value to the sink if it changed (see SetReadaheadSink).
  void ApplyReadahead() EXCLUDES(readahead_mu_, mu_);
  // Hands `wanted` to the sink unless it is the value handed last (0 is
  // recorded but not handed: the kernel's own, left as it is).
  void HandToSink(uint64_t wanted) REQUIRES(readahead_mu_);

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
  FetchPlanner planner_ GUARDED_BY(mu_);
  SliceLearner learner_ GUARDED_BY(mu_);  // of the reads that name no reader
  AccessModel::ReaderClock anonymous_ GUARDED_BY(mu_);  // of the reads that name no reader
  std::map<ReaderId, ReaderState> readers_ GUARDED_BY(mu_);
  std::map<ObjectId, ObjectInfo> read_order_ GUARDED_BY(mu_);  // object -> the one read after it (SetReadOrder)
  std::set<ObjectId> swept_ GUARDED_BY(mu_);  // objects whose sweep is on (SweepStarted), while their state lasts
  uint64_t engine_clock_ GUARDED_BY(mu_) = 0;  // calls that used object or reader state
  ReadaheadPolicy readahead_ GUARDED_BY(mu_);
  uint64_t readahead_wanted_ GUARDED_BY(mu_) = 0;  // readahead_.Wanted() when last looked at
  std::atomic<bool> readahead_changed_{false};        // readahead_wanted_ not yet handed to the sink
  // Serialises the sink's calls, so that the last one carries the last value.
  // Lock order: readahead_mu_, then mu_.
  Mutex readahead_mu_ ACQUIRED_BEFORE(mu_);
  std::function<void(uint64_t)> readahead_sink_ GUARDED_BY(readahead_mu_);
  uint64_t readahead_applied_ GUARDED_BY(readahead_mu_) = UINT64_MAX;
  // A sink applies each safetensors file's own value at its open (Opening);
  // without one every file is taken to be at readahead_wanted_.
  bool per_file_readahead_ GUARDED_BY(mu_) = false;
  std::unique_ptr<ReadTrace> trace_;  // see EngineOptions::trace_reads
  LogRateLimiter inconsistency_log_{std::chrono::seconds(10), "engine inconsistencies"};
  // Its lock is taken after mu_ (jobs are pushed and promoted under mu_); a
  // job runs (RunJob) with neither held until it publishes.
  FetchScheduler<FetchJob> scheduler_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_READ_ENGINE_H_
