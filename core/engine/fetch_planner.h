// FetchPlanner: which byte ranges to request, from what the access model says
// of a reader and what the cache holds.
//
// ReadEngine calls it for each read, with the object's state (object_state.h):
//   - WantOf / Cover: what of a chunk a read needs now (the chunk, the gaps
//     between the extents cached or coming, a slice reader's window, a few
//     pages for a reader not known yet), requested at demand priority;
//   - then the prefetch the reader's kind calls for: UpdateStreams (sequential
//     readers: the window ahead, the whole-object sweep, the next shard),
//     TopUpSliceSweep (slice readers' windows in storage order),
//     RampWithinTensor (readers not known yet), ContinueTensor and
//     PrefetchPieces (the PlannerCalls of AccessModel::Classify);
//   - PrefetchRange for Prefetch() calls (views).
// It reads the extent maps to find the gaps, charges each request to the
// cache's budget (ChunkCache::Reserve, InsertLoading: a prefetch the cache
// has no room for is not made) and hands it to the engine (Host::Enqueue) for
// the fetch scheduler. It does no I/O and never waits.
//
// Requests are cut at chunk boundaries (ChunkPlan) and coalesced up to
// chunk_size; each sequential reader's stream is read ahead by its share of
// prefetch_window among the streams being read (StreamWindow), each slice
// pattern's sweep keeps up to prefetch_window requested (of which the fetch
// scheduler runs what the link delivers in a second: fetch_scheduler.h).
//
// Thread-safety: none of its own; ReadEngine calls it under its mutex, and it
// calls the Host back under that mutex.
#ifndef TENSORFS_CORE_ENGINE_FETCH_PLANNER_H_
#define TENSORFS_CORE_ENGINE_FETCH_PLANNER_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "core/engine/access_model.h"
#include "core/engine/chunk_cache.h"
#include "core/engine/engine_options.h"
#include "core/engine/object_state.h"
#include "core/engine/tuning.h"
#include "core/metrics/metrics.h"

namespace tensorfs {

class FetchPlanner {
 public:
  // What the planner asks of the engine around it.
  class Host {
   public:
    // The state of `object` (the next file of a checkpoint), made if new.
    virtual ObjectState& StateOf(const ObjectInfo& object) = 0;
    // Starts fetching the head of `state`'s object, which builds its plan;
    // what the planner wants of it meanwhile waits in `state`
    // (continue_bytes, pending_sweeps).
    virtual void StartHead(ObjectState& state, bool prefetch) = 0;
    // Queues a range request for the fetch workers.
    virtual void Enqueue(ObjectState& state, FetchJob job, bool prefetch) = 0;
    // The readahead the files of `state`'s object will be opened with by the
    // process whose reader learned `pattern` (a sweep going on into a shard
    // that reader has not opened yet); 0: the mount's now.
    virtual uint64_t FileReadaheadOf(const ObjectState& state, const AccessModel::ActivePattern& pattern) = 0;
    // `state`'s sweep is on: its readers read it in no order.
    virtual void SweepStarted(const ObjectState& state) = 0;
    // The bytes not yet requested by the sweeps of every object whose sweep
    // is on: what readers in no order will still want.
    virtual uint64_t SweepsLeft() = 0;

   protected:
    ~Host() = default;
  };

  using Mode = AccessModel::Mode;
  // How a read is to be served, from what the access model said of it.
  struct ReadKind {
    Mode mode = Mode::kWhole;
    const AccessModel::ActivePattern* pattern = nullptr;  // kSlice, kNearSlice
    // Where the reader's run in the read's tensor likely ends (RunEnd: the
    // end of the copy it makes, or of the slice it likely reads), if known:
    // a reader not known yet is read no further ahead than that.
    uint64_t run_end = UINT64_MAX;
    bool spans_tensors = false;
    std::optional<ByteRange> within;  // see ReadHints
    uint64_t file_readahead = 0;      // the reader's file was opened with (0: the mount's now)
  };
  // The range of a chunk a read needs cached or coming, and the largest
  // request for its gaps.
  struct Want {
    ByteRange range;
    uint64_t max_piece = 0;
  };

  // All references must outlive the planner.
  FetchPlanner(const EngineOptions& options, const Tuning& tuning, ChunkCache& cache, const AccessModel& model,
               Metrics& metrics, Host& host)
      : options_(options), tuning_(tuning), cache_(cache), model_(model), metrics_(metrics), host_(host) {}

  // The engine is stopping: sweeps request nothing more.
  void Stop() { stopping_ = true; }

  // What of `chunk` (not cached whole) a read of `part` of it, of `kind`,
  // wants (see "Readers" in read_engine.h).
  Want WantOf(const ObjectState& state, ByteRange chunk, ByteRange part, const ReadKind& kind) const;
  // Requests the gaps of `want` at demand priority and returns the extents
  // that cover `part`, in order, each with its bytes when they are in (held,
  // so that requesting the gaps cannot evict them from under the read).
  std::vector<std::pair<ExtentId, std::shared_ptr<const Chunk>>> Cover(ObjectState& state, const Want& want,
                                                                       ByteRange part);
  // The part of `chunk` a reader confined to `within` reads: the chunk unless
  // it reaches across an edge of `within` (see ReadHints).
  static ByteRange PartWithin(ByteRange chunk, const std::optional<ByteRange>& within);

  // Records a sequential read of chunks [first, last] ending at byte
  // `read_end` by the reader of `access` and starts the prefetches it calls
  // for; `waited`: the read waits for a prefetch. A reader that took over the
  // stream prefetched for the reader of the file before (AccessState::
  // continued) is taken to jump around in the object at its first jump.
  void UpdateStreams(ObjectState& state, AccessState& access, size_t first, size_t last, uint64_t read_end,
                     bool waited);
  // Keeps the whole-object sweep's requests in flight (a reader that jumps
  // around in the object).
  void TopUpSweep(ObjectState& state);
  // Prefetches windows of pattern `id` in `state`'s object, starting at
  // tensor `from` if the sweep is new, up to prefetch_window bytes in flight,
  // with the margins of a file opened at `file_readahead` (that of the
  // pattern's reader's file: 0 keeps the sweep's, or, for a new one, asks
  // the host which its files will get).
  void TopUpSliceSweep(ObjectState& state, int id, size_t from, uint64_t file_readahead = 0);
  void StartSliceSweep(ObjectState& state, int id, size_t from, uint64_t file_readahead = 0);
  // Where the run of a reader not known yet, whose read `range` ends in a
  // tensor, likely ends in that tensor: the end of the copy it makes, once
  // known; else, for one reader's reads (`named`, its file opened at
  // `file_readahead`; the reads of no reader may be several slice readers':
  // no likely end is known for them), the likely end of the slice it reads
  // (LikelySliceEnd); else the tensor's end. UINT64_MAX for a read that ends
  // outside any tensor. Neither the bytes a read wants (WantOf) nor its
  // prefetch (RampWithinTensor) run past it.
  uint64_t RunEnd(const ChunkPlan& plan, const AccessState& access, ByteRange range, bool named,
                  uint64_t file_readahead) const;
  // Prefetch for a reader not known yet: the bytes ahead of it within the
  // tensor, up to `run_end` (where its run likely ends: RunEnd, as the read's
  // own request was bounded), as many as it has read there in a row; all of
  // them at once where the runs of other readers of the tensor tell where its
  // own ends (`meets_next`: ReadTogether::SplitEnd).
  void RampWithinTensor(ObjectState& state, const AccessState& access, ByteRange range, uint64_t run_end,
                        bool meets_next);
  // Where a reader not known yet, reading `touch`, likely stops reading its
  // tensor: where its rows of the tensor it began before ended, at the same
  // fraction, when it began this one at the fraction it began that one (a slice reader
  // before its pattern is learned, whose rows would else be read ahead past
  // by as much as it has read of them); the tensor's end if not. The kernel's
  // margins are those of files opened at `file_readahead`.
  uint64_t LikelySliceEnd(const ChunkPlan& plan, const AccessState& access, const AccessModel::Touch& touch,
                          uint64_t file_readahead) const;
  // Prefetches the rest of tensor `index` (a whole-tensor reader's).
  void ContinueTensor(ObjectState& state, size_t index);
  // Requests the parts of `range` not cached or coming, as pieces of up to
  // Tuning::max_piece, at prefetch priority.
  void PrefetchPieces(ObjectState& state, ByteRange range);
  // Requests the parts of the chunks covering `range` (inside `within` when
  // given) not cached or coming, at prefetch priority.
  void PrefetchRange(ObjectState& state, ByteRange range, const std::optional<ByteRange>& within);
  // Prefetches `bytes` from the start of `state`'s object (a predecessor's
  // reader, of `process`, is about to arrive), starting a stream there that
  // a reader of that process takes over.
  void ContinueInto(ObjectState& state, uint64_t bytes, uint64_t process);

 private:
  // The reader's touch of the tensor `range` ends in that holds that end; null if none.
  static const AccessModel::Touch* TouchOf(const ChunkPlan& plan, const AccessState& access, ByteRange range);
  // Requests chunk `index` (if not cached or loading, nor given to the kernel
  // for a prefetch): its gaps if pieces of it hold much of it, else the whole
  // chunk. Prefetches give up when the cache has no room; returns whether the
  // chunk is cached, coming or given.
  bool Request(ObjectState& state, size_t index, bool prefetch, bool sweep = false);
  // Requests `range` (within one chunk) as one new extent, replacing the
  // extents it overlaps (see ChunkCache::InsertLoading). `slice`: the pattern
  // whose sweep requests it. Returns its id; 0 when the cache had no room for
  // a prefetch.
  ExtentId RequestExtent(ObjectState& state, ByteRange range, bool prefetch, bool sweep = false, int slice = -1);
  // Requests the parts of `range` (within one chunk) that no extent covers,
  // each at most `max_piece` bytes, but for those the kernel was given whole
  // (ObjectState::given), unless they lie in `needed` (a read's own bytes;
  // without it, a read's request takes every gap). Returns bytes requested,
  // or -1 when the cache had no room for a prefetch. `tiles`, when given,
  // holds the extents overlapping `range` (the caller looked them up); the
  // new ones are appended to it.
  int64_t RequestGaps(ObjectState& state, ByteRange range, bool prefetch, uint64_t max_piece, int slice = -1,
                      std::vector<ExtentMap::Extent>* tiles = nullptr,
                      std::optional<ByteRange> needed = std::nullopt);
  // The same for the object read after `state`'s, when only `left` bytes of
  // this one remain to be fetched for a reader of `process`.
  void ContinueIntoSuccessor(ObjectState& state, uint64_t left, uint64_t process);
  // The chunks from `from` on that make up `bytes` (at least one).
  static size_t WindowChunks(const ChunkPlan& plan, size_t from, uint64_t bytes);
  // A stream was read: it counts as being read for the next
  // Tuning::active_reads stream reads, engine-wide.
  void NoteStreamRead(uint64_t id);
  // How far ahead of itself a sequential reader is prefetched: its share of
  // prefetch_window among the streams being read, at least the least window.
  uint64_t StreamWindow() const;
  // The least window of a stream: Tuning::min_stream_window_chunks chunks.
  uint64_t LeastWindow() const;

  const EngineOptions& options_;
  const Tuning& tuning_;
  ChunkCache& cache_;
  const AccessModel& model_;
  Metrics& metrics_;
  Host& host_;
  bool stopping_ = false;
  uint64_t next_stream_id_ = 1;
  std::deque<uint64_t> recent_streams_;   // ids of the last Tuning::active_reads stream reads
  std::map<uint64_t, int> streams_read_;  // id -> its reads among them
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_FETCH_PLANNER_H_
