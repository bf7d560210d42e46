#include "core/engine/read_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "core/safetensors/header.h"
#include "core/util/log_limiter.h"

namespace tensorfs {
namespace {

// The engine's tuning constants are in Tuning (tuning.h); what is left here
// are facts of the file format.

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

// One read in progress: the chunks it needs, filled as they arrive.
struct ReadEngine::ReadOp {
  ObjectId object;
  ByteRange range;
  // The cache entries that tile `range`, in order: chunks, edge pieces, pieces.
  std::vector<std::shared_ptr<const Chunk>> chunks;
  std::vector<ChunkKey> keys;
  std::atomic<int> pending{0};
  std::atomic<bool> failed{false};
  Status error;  // written once, by the waiter that sets `failed`
  ReadDone done;
  ReadHints hints;
};

ReadEngine::ReadEngine(ObjectStore& store, const EngineOptions& options, Metrics& metrics,
                       std::shared_ptr<BufferPool> pool)
    : store_(store),
      options_(options),
      tuning_(Tuning::For(options.chunk_size, options.readahead.unknown, options.readahead.slice)),
      metrics_(metrics),
      pool_(pool != nullptr ? std::move(pool)
                            : std::make_shared<BufferPool>(BufferPool::Options::ForCache(options.cache_size))),
      cache_(options.cache_size, options.consumed_keep, metrics),
      learner_(tuning_),
      readahead_(options.readahead),
      readahead_wanted_(readahead_.Wanted()) {
  if (options_.shard_world > 0) {
    patterns_.push_back(ActivePattern{next_pattern_id_++, SlicePattern::Shard(options_.shard_rank, options_.shard_world, tuning_)});
  }
  if (!options_.trace_reads.empty()) {
    StatusOr<std::unique_ptr<ReadTrace>> trace = ReadTrace::Open(options_.trace_reads);
    if (trace.ok()) {
      trace_ = std::move(*trace);
    } else {
      spdlog::warn("{}; reads are not traced", trace.status().message());
    }
  }
  for (int i = 0; i < options_.max_fetches; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ReadEngine::~ReadEngine() {
  std::vector<ChunkWaiter> waiters;
  std::vector<std::function<void(const Status&)>> plan_waiters;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    for (std::deque<Job>* queue : {&demand_queue_, &prefetch_queue_}) {
      for (const Job& job : *queue) {
        if (job.head) {
          auto& w = objects_.at(job.object).plan_waiters;
          std::move(w.begin(), w.end(), std::back_inserter(plan_waiters));
          w.clear();
        } else {
          if (auto w = cache_.Fail(job.key)) std::move(w->begin(), w->end(), std::back_inserter(waiters));
        }
      }
      queue->clear();
    }
  }
  work_cv_.NotifyAll();
  Status unmounting = UnavailableError("tensorfs is unmounting");
  for (auto& w : waiters) w(unmounting);
  for (auto& w : plan_waiters) w(unmounting);
  for (std::thread& t : workers_) t.join();
}

ReadEngine::ObjectState& ReadEngine::StateOf(const ObjectInfo& object) {
  auto [it, inserted] = objects_.try_emplace(object.id());
  if (inserted) {
    it->second.info = object;
    auto next = read_order_.find(it->first);
    if (next != read_order_.end()) it->second.successor = next->second;
  }
  it->second.last_used = ++engine_clock_;
  return it->second;
}

ReadEngine::ReaderState& ReadEngine::ReaderOf(ReaderId reader, ObjectState& state) {
  auto [it, inserted] = readers_.try_emplace(reader);
  ReaderState& r = it->second;
  if (inserted) {
    r.learner = SliceLearner(tuning_);
    r.clock.presumed_whole = !options_.readahead.fixed && options_.readahead.whole != options_.readahead.unknown &&
                       readahead_wanted_ == options_.readahead.whole;
  }
  if (inserted || r.object != state.info.id()) {
    r.object = state.info.id();
    r.access = AccessState{};
    for (const Stream& st : state.access.streams) {
      if (st.continuation) r.access.streams.push_back(st);
    }
  }
  r.last_used = ++engine_clock_;
  if (inserted && readers_.size() > tuning_.max_readers) {
    auto oldest = readers_.end();
    for (auto i = readers_.begin(); i != readers_.end(); ++i) {
      if (i != it && (oldest == readers_.end() || i->second.last_used < oldest->second.last_used)) oldest = i;
    }
    SetKind(oldest->second, ReadaheadPolicy::Kind::kUnknown);
    readers_.erase(oldest);
  }
  return r;
}

void ReadEngine::ReleaseReader(ReaderId reader) {
  {
    MutexLock lock(mu_);
    auto it = readers_.find(reader);
    if (it == readers_.end()) return;
    SetKind(it->second, ReadaheadPolicy::Kind::kUnknown);
    readers_.erase(it);
  }
  if (readahead_changed_.load(std::memory_order_relaxed)) ApplyReadahead();
}

void ReadEngine::SetKind(ReaderState& r, ReadaheadPolicy::Kind kind) {
  if (r.kind == kind) return;
  readahead_.Change(r.kind, kind);
  r.kind = kind;
  const uint64_t wanted = readahead_.Wanted();
  if (wanted == readahead_wanted_) return;
  if (readahead_wanted_ != 0) {
    spdlog::info("files opened from now on get a readahead of {} KiB ({} readers)", wanted >> 10,
                 kind == ReadaheadPolicy::Kind::kSlice ? "slice" : "whole-tensor");
  }
  readahead_wanted_ = wanted;
  readahead_changed_.store(true, std::memory_order_relaxed);
}

void ReadEngine::SetReadaheadSink(std::function<void(uint64_t)> sink) {
  {
    MutexLock lock(readahead_mu_);
    readahead_sink_ = std::move(sink);
    readahead_applied_ = UINT64_MAX;
  }
  ApplyReadahead();
}

uint64_t ReadEngine::WantedReadahead() {
  MutexLock lock(mu_);
  return readahead_wanted_;
}

void ReadEngine::ApplyReadahead() {
  MutexLock sink_lock(readahead_mu_);
  if (!readahead_sink_) return;
  uint64_t wanted = 0;
  {
    MutexLock lock(mu_);
    wanted = readahead_wanted_;
    readahead_changed_.store(false, std::memory_order_relaxed);
  }
  if (wanted == readahead_applied_) return;
  readahead_applied_ = wanted;
  if (wanted != 0) readahead_sink_(wanted);
}

void ReadEngine::PruneObjects() {
  if (objects_.size() <= tuning_.max_objects) return;
  std::vector<std::pair<uint64_t, std::map<ObjectId, ObjectState>::iterator>> idle;
  for (auto it = objects_.begin(); it != objects_.end(); ++it) {
    const ObjectState& st = it->second;
    if (st.jobs == 0 && st.plan_waiters.empty() && st.pending_prefetch.empty() && st.pending_sweeps.empty() &&
        st.continue_bytes == 0) {
      idle.emplace_back(st.last_used, it);
    }
  }
  std::sort(idle.begin(), idle.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < idle.size() && objects_.size() > tuning_.max_objects * 3 / 4; ++i) objects_.erase(idle[i].second);
}

void ReadEngine::DropPattern(size_t index) {
  const int id = patterns_[index].id;
  patterns_.erase(patterns_.begin() + static_cast<std::ptrdiff_t>(index));
  for (auto& [object, st] : objects_) {
    st.slice_sweeps.erase(id);
    std::erase(st.pending_sweeps, id);
  }
}

ReadEngine::StateSizes ReadEngine::Sizes() {
  MutexLock lock(mu_);
  StateSizes sizes{.objects = objects_.size(), .readers = readers_.size()};
  for (const auto& [object, st] : objects_) {
    sizes.pieces += st.pieces.size();
    sizes.slice_sweeps += st.slice_sweeps.size();
    sizes.touches += st.access.touches.size();
  }
  for (const auto& [reader, r] : readers_) sizes.touches += r.access.touches.size();
  return sizes;
}

bool ReadEngine::Idle() {
  MutexLock lock(mu_);
  return demand_queue_.empty() && prefetch_queue_.empty() && running_jobs_ == 0;
}

std::shared_ptr<const ChunkPlan> ReadEngine::PlanOf(const ObjectId& object) {
  MutexLock lock(mu_);
  auto it = objects_.find(object);
  return it == objects_.end() ? nullptr : it->second.plan;
}

void ReadEngine::Enqueue(ObjectState& state, Job job, bool prefetch) {
  ++state.jobs;
  (prefetch ? prefetch_queue_ : demand_queue_).push_back(std::move(job));
  work_cv_.NotifyOne();
}

void ReadEngine::StartHead(ObjectState& state, bool prefetch) {
  if (state.head_requested) {
    if (!prefetch) {  // a reader waits: move a queued head prefetch to the front
      auto it = std::find_if(prefetch_queue_.begin(), prefetch_queue_.end(),
                             [&](const Job& j) { return j.head && j.key.object == state.info.id(); });
      if (it != prefetch_queue_.end()) {
        demand_queue_.push_back(std::move(*it));
        prefetch_queue_.erase(it);
      }
    }
    return;
  }
  state.head_requested = true;
  Enqueue(state, Job{.object = state.info.id(), .key = {state.info.id(), 0}, .range = {0, state.info.size}, .head = true},
          prefetch);
}

void ReadEngine::PrefetchHead(const ObjectInfo& object) {
  if (object.size == 0) return;
  MutexLock lock(mu_);
  PruneObjects();
  ObjectState& state = StateOf(object);
  if (state.plan == nullptr) StartHead(state, /*prefetch=*/true);
}

bool ReadEngine::Request(ObjectState& state, size_t index, bool prefetch, bool sweep) {
  const ChunkKey key{state.info.id(), index};
  const ByteRange range = state.plan->Chunk(index);
  if (prefetch && Given(state, range)) return true;
  if (cache_.Find(key) == nullptr) {
    uint64_t in_pieces = 0;
    for (const auto& [piece, piece_key] : PiecesIn(state, range)) in_pieces += piece.length;
    // Part of it came as pieces: fetch only the rest (not counted as a
    // sweep's). Unless that part is small (a reader's first reads, before it
    // was known to read whole tensors): the whole chunk then comes in one
    // request rather than in two or three around the pieces, a few of its
    // bytes twice.
    if (in_pieces > 0 && in_pieces * tuning_.small_pieces > range.length) {
      return RequestGaps(state, range, prefetch, range.length) >= 0;
    }
  }
  return RequestPiece(state, key, range, prefetch, sweep);
}

bool ReadEngine::RequestPiece(ObjectState& state, const ChunkKey& key, ByteRange range, bool prefetch, bool sweep) {
  if (cache_.Find(key) != nullptr) return true;
  if (!cache_.Reserve(range.length, /*evict_unconsumed=*/!prefetch) && prefetch) return false;
  if (cache_.InsertLoading(key, range, prefetch) == nullptr) {
    Inconsistent(state.info.name + ": a cache entry appeared between Find and InsertLoading");
    return true;
  }
  if (prefetch) metrics_.prefetches.fetch_add(1, std::memory_order_relaxed);
  if (sweep) ++state.sweep_in_flight;
  Enqueue(state, Job{.object = state.info.id(), .key = key, .range = range, .sweep = sweep}, prefetch);
  return true;
}

ChunkKey ReadEngine::PieceKey(const ObjectState& state, uint64_t offset) const {
  ChunkKey key{state.info.id(), static_cast<size_t>(offset)};
  // No stored object's name starts with a NUL byte.
  key.object.name = std::string(1, '\0') + "piece " + key.object.name;
  return key;
}

std::vector<std::pair<ByteRange, ChunkKey>> ReadEngine::PiecesIn(ObjectState& state, ByteRange range) {
  std::vector<std::pair<ByteRange, ChunkKey>> found;
  auto it = state.pieces.upper_bound(range.offset);
  if (it != state.pieces.begin() && std::prev(it)->second.end > range.offset) --it;
  while (it != state.pieces.end() && it->first < range.end()) {
    if (cache_.Find(it->second.key) == nullptr) {  // evicted
      it = state.pieces.erase(it);
      continue;
    }
    found.emplace_back(ByteRange{it->first, it->second.end - it->first}, it->second.key);
    ++it;
  }
  return found;
}

int64_t ReadEngine::RequestGaps(ObjectState& state, ByteRange range, bool prefetch, uint64_t max_piece, int slice,
                                std::vector<std::pair<ByteRange, ChunkKey>>* created) {
  int64_t requested = 0;
  uint64_t cursor = range.offset;
  auto request = [&](uint64_t begin, uint64_t end) REQUIRES(mu_) {
    for (uint64_t at = begin; at < end;) {
      const uint64_t length = std::min(end - at, std::max<uint64_t>(max_piece, tuning_.page));
      if (!cache_.Reserve(length, /*evict_unconsumed=*/!prefetch) && prefetch) return false;
      const ChunkKey key = PieceKey(state, at);
      if (cache_.InsertLoading(key, ByteRange{at, length}, prefetch) == nullptr) {
        Inconsistent(state.info.name + ": a piece at " + std::to_string(at) +
                     " is cached though no piece covers it");
        at += length;  // left to the entry there; a read of it finds it
        continue;
      }
      state.pieces[at] = Piece{at + length, key};
      if (created != nullptr) created->emplace_back(ByteRange{at, length}, key);
      if (prefetch) metrics_.prefetches.fetch_add(1, std::memory_order_relaxed);
      if (slice >= 0) state.slice_sweeps[slice].in_flight += length;
      Enqueue(state, Job{.object = state.info.id(), .key = key, .range = {at, length}, .slice = slice}, prefetch);
      requested += static_cast<int64_t>(length);
      at += length;
    }
    return true;
  };
  for (const auto& [piece, key] : PiecesIn(state, range)) {
    if (piece.offset > cursor && !request(cursor, piece.offset)) return -1;
    cursor = std::max(cursor, piece.end());
  }
  if (cursor < range.end() && !request(cursor, range.end())) return -1;
  if (state.pieces.size() >= state.pieces_check_at) {  // forget evicted pieces nobody looked up since
    std::erase_if(state.pieces, [&](const auto& p) REQUIRES(mu_) { return cache_.Find(p.second.key) == nullptr; });
    state.pieces_check_at = std::max<size_t>(64, 2 * state.pieces.size());
  }
  return requested;
}

ReadEngine::Mode ReadEngine::Classify(ObjectState& state, AccessState& access, ReaderClock& reader,
                                      SliceLearner& learner, ByteRange range, const ActivePattern** pattern,
                                      uint64_t* copy_end) {
  const ChunkPlan& plan = *state.plan;
  const std::vector<TensorSpan>& tensors = plan.tensors();
  int first = plan.TensorAt(range.offset);
  if (first < 0) {  // in the header or padding: the tensor after it, if any
    auto it = std::upper_bound(tensors.begin(), tensors.end(), range.offset,
                               [](uint64_t off, const TensorSpan& t) { return off < t.begin; });
    if (it == tensors.end() || it->begin >= range.end()) return Mode::kWhole;
    first = static_cast<int>(it - tensors.begin());
  }
  const uint64_t now = ++reader.reads;
  ++access.clock;

  // Record the touch of every tensor the read overlaps.
  bool last_page = false;
  bool whole_end = false;
  const bool crossing = tensors[static_cast<size_t>(first)].end < range.end();
  // The tensors a read covers between its first and last tell nothing of the
  // reader's slice or copies (they are read whole, by one read): only the
  // first and the last are recorded, so a read across many small tensors
  // records two touches, not one per tensor.
  size_t last_tensor = static_cast<size_t>(first);
  while (last_tensor + 1 < tensors.size() && tensors[last_tensor + 1].begin < range.end()) ++last_tensor;
  for (size_t k = static_cast<size_t>(first); k <= last_tensor;
       k = k == last_tensor ? k + 1 : std::max(k + 1, last_tensor)) {
    const TensorSpan& t = tensors[k];
    const uint64_t begin = std::max(range.offset, t.begin);
    const uint64_t end = std::min(range.end(), t.end);
    auto it = std::find_if(access.touches.begin(), access.touches.end(), [&](const Touch& touch) {
      return touch.tensor == static_cast<int>(k) && begin <= touch.range.end() + tuning_.touch_gap &&
             end + tuning_.touch_gap >= touch.range.offset;
    });
    if (it == access.touches.end()) {
      // A read of a tensor past where the reader is in it: likely a copy's
      // last page, read before the rest (see below).
      uint64_t read_before = 0;
      for (const Touch& x : access.touches) {
        if (x.tensor == static_cast<int>(k) && x.range.end() <= begin) {
          read_before = std::max(read_before, x.range.length);
        }
      }
      if (k == static_cast<size_t>(first)) last_page = read_before > 0;
      access.touches.push_back(
          Touch{static_cast<int>(k), ByteRange{begin, end - begin}, access.clock, access.clock, crossing, access.clock});
      it = std::prev(access.touches.end());
      it->read_before = read_before;
    } else {
      const uint64_t b = std::min(begin, it->range.offset);
      const uint64_t e = std::max(end, it->range.end());
      if (b < it->range.offset || e > it->range.end()) it->grown_at = access.clock;
      it->range = ByteRange{b, e - b};
    }
    // A copy (memcpy touches the first page of what it copies, then its last
    // page, then the rest from the start): the touch this read grew began
    // before the next touch of the tensor, a small one, appeared, and has
    // grown since (maybe into it), and was no more than the read-around of
    // a first page when it did (else the later touch is the kernel reading
    // around the start of the next tensor, and the growth its readahead
    // arriving late). The copy runs to the end of that touch.
    // A copy of the whole tensor makes a whole-tensor reader. Of a part (one
    // host's slice, before its pattern is known) the bytes in between are
    // fetched now and nothing past the copy is read ahead, so that learning
    // the pattern costs little more than the slices read meanwhile.
    // The last page of a tensor read right after its first, nothing of it
    // read in between: likely the start of a copy of the whole tensor (told
    // for sure once the first touch grows; a reader of the first slice of the
    // next tensor makes the same read), so this read's chunk comes whole.
    if (k == static_cast<size_t>(first) && t.size() >= tuning_.copy_min && it->first_read == access.clock &&
        it->range.end() == t.end) {
      int others = 0;
      const Touch* head = nullptr;
      for (const Touch& x : access.touches) {
        if (x.tensor != static_cast<int>(k) || &x == &*it) continue;
        ++others;
        head = &x;
      }
      whole_end = others == 1 && head->range.offset == t.begin && head->first_read + 2 >= access.clock &&
                  head->range.length <= tuning_.copy_tail_max;
    }
    if (t.size() >= tuning_.copy_min && reader.whole_until <= now && it->grown_at == access.clock) {
      const Touch* tail = nullptr;
      for (const Touch& x : access.touches) {
        if (x.tensor == static_cast<int>(k) && &x != &*it && x.range.offset > it->range.offset &&
            x.range.end() > it->range.end() && (tail == nullptr || x.range.offset < tail->range.offset)) {
          tail = &x;
        }
      }
      // A later touch at a known slice reader's window is that reader's first
      // page, not a copy's last (the first touch was then the kernel reading
      // around the header, its readahead arriving late).
      if (tail != nullptr && tail->first_read > it->first_read && tail->read_before <= tuning_.copy_tail_max &&
          tail->range.length <= std::max<uint64_t>(2 * range.length, tuning_.copy_tail_max) &&
          !NearKnownWindow(state, k, tail->range)) {
        if (it->range.offset == t.begin && tail->range.end() == t.end) {
          spdlog::debug("{}: tensor {} copied from its start after its end: a whole-tensor reader", state.info.name, k);
          reader.whole_until = now + tuning_.whole_memory;
          ContinueTensor(state, k);
        } else if (it->copy_end == 0) {
          it->copy_end = tail->range.end();
          if (tail->range.offset > it->range.end()) {
            PrefetchPieces(state, ByteRange{it->range.end(), tail->range.offset - it->range.end()});
          }
        }
      }
    }
    // Touches that have grown into each other are one (a memcpy reads a
    // slice's first page, its last, then the rest in between).
    size_t grown = static_cast<size_t>(it - access.touches.begin());
    for (size_t j = 0; j < access.touches.size();) {
      Touch& t1 = access.touches[grown];
      const Touch& t2 = access.touches[j];
      if (j != grown && t2.tensor == t1.tensor && t2.range.offset <= t1.range.end() + tuning_.touch_gap &&
          t1.range.offset <= t2.range.end() + tuning_.touch_gap) {
        const uint64_t b = std::min(t1.range.offset, t2.range.offset);
        const uint64_t e = std::max(t1.range.end(), t2.range.end());
        t1.range = ByteRange{b, e - b};
        t1.crossing = t1.crossing || t2.crossing;
        t1.first_read = std::min(t1.first_read, t2.first_read);
        t1.grown_at = std::max(t1.grown_at, t2.grown_at);
        t1.copy_end = std::max(t1.copy_end, t2.copy_end);
        access.touches.erase(access.touches.begin() + static_cast<std::ptrdiff_t>(j));
        if (j < grown) --grown;
        continue;
      }
      ++j;
    }
    it = access.touches.begin() + static_cast<std::ptrdiff_t>(grown);
    // A touch settles once its tensor is left, not just the touch.
    for (Touch& other : access.touches) {
      if (other.tensor == static_cast<int>(k)) other.last_read = access.clock;
    }
    // Nearly all of a tensor several reads long: a whole-tensor reader.
    if (t.size() >= 4 * std::max<uint64_t>(range.length, tuning_.read_around_half) && it->range.length >= t.size() - t.size() / 10) {
      if (reader.whole_until <= now) {
        spdlog::debug("{}: tensor {} read nearly whole: a whole-tensor reader", state.info.name, k);
      }
      reader.whole_until = now + tuning_.whole_memory;
    }
  }

  // Touches the reader has left teach the learner.
  for (size_t i = 0; i < access.touches.size();) {
    Touch& touch = access.touches[i];
    if (access.clock - touch.last_read < tuning_.settle_reads && access.touches.size() <= tuning_.max_touches) {
      ++i;
      continue;
    }
    const SliceObservation o{tensors[static_cast<size_t>(touch.tensor)], touch.range.offset, touch.range.end()};
    // The kernel reading on past the end of one tensor (or around the start
    // of the next) into a neighbour tells nothing about the reader's slice.
    const bool spill = touch.crossing && touch.range.length < tuning_.spill_max &&
                       (o.begin == o.tensor.begin || o.end == o.tensor.end);
    // A reader of a known pattern: its reads lie mostly inside the window.
    const bool known = spill || std::any_of(patterns_.begin(), patterns_.end(), [&](const ActivePattern& p) {
      const ByteRange w = WindowOf(state, p.pattern, static_cast<size_t>(touch.tensor));
      const uint64_t b = std::max(o.begin, w.offset), e = std::min(o.end, w.end());
      return e > b && 2 * (e - b) >= o.end - o.begin;
    });
    // A whole-tensor reader's touches are the kernel reading around its
    // copies' first and last pages, at its readahead: nothing to learn.
    const bool whole_reader = now < reader.whole_until || reader.presumed_whole;
    if (!known && !whole_reader) {
      spdlog::debug("{}: a reader left tensor {} ({} bytes, rows of {}) having read {}..{} of it", state.info.name,
                    touch.tensor, o.tensor.size(), o.tensor.row_bytes, o.begin - o.tensor.begin,
                    o.end - o.tensor.begin);
      if (std::optional<SlicePattern> learned = learner.Observe(o)) {
        const bool dup = std::any_of(patterns_.begin(), patterns_.end(),
                                     [&](const ActivePattern& p) { return p.pattern.SameSlice(*learned); });
        if (!dup) {
          spdlog::info("{}: a reader takes {}: prefetching only those", state.info.name, learned->ToString());
          patterns_.push_back(ActivePattern{next_pattern_id_++, *learned});
          if (patterns_.size() > 8) DropPattern(options_.shard_world > 0 ? 1 : 0);
        }
      }
    }
    access.touches.erase(access.touches.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // A read inside a known pattern's window of its tensor is that pattern's.
  const size_t k = static_cast<size_t>(first);
  const uint64_t begin = std::max(range.offset, tensors[k].begin);
  const uint64_t end = std::min(range.end(), tensors[k].end);
  for (const ActivePattern& p : patterns_) {
    const ByteRange w = WindowOf(state, p.pattern, k);
    if (begin < w.end() && end > w.offset) {
      *pattern = &p;
      return Mode::kSlice;
    }
  }
  if (now < reader.whole_until) return Mode::kWhole;
  // At a copy's likely last page, or past the end of a copy whose extent is
  // known: the kernel reading around it.
  if (whole_end) return Mode::kWholeEnd;
  if (last_page) return Mode::kAround;
  for (const Touch& x : access.touches) {
    if (x.tensor != first || x.copy_end == 0 || begin > x.range.end() + tuning_.touch_gap || end < x.range.offset) continue;
    if (begin >= x.copy_end) return Mode::kAround;
    *copy_end = x.copy_end;
  }
  // Near a window of this tensor or of its neighbours: a slice reader's kernel
  // reading around its slice.
  for (const ActivePattern& p : patterns_) {
    for (size_t j = k > 0 ? k - 1 : 0; j <= k + 1 && j < tensors.size(); ++j) {
      if (IsNear(WindowOf(state, p.pattern, j), range)) {
        *pattern = &p;
        return Mode::kNearSlice;
      }
    }
  }
  return Mode::kUnknown;
}

bool ReadEngine::Given(const ObjectState& state, ByteRange range) {
  auto it = state.given.upper_bound(range.offset);
  return it != state.given.begin() && std::prev(it)->second >= range.end();
}

void ReadEngine::AddGiven(ObjectState& state, ByteRange range) {
  uint64_t begin = range.offset;
  uint64_t end = range.end();
  auto it = state.given.upper_bound(begin);
  if (it != state.given.begin() && std::prev(it)->second >= begin) --it;
  while (it != state.given.end() && it->first <= end) {
    begin = std::min(begin, it->first);
    end = std::max(end, it->second);
    it = state.given.erase(it);
  }
  state.given.emplace(begin, end);
}

void ReadEngine::RemoveGiven(ObjectState& state, ByteRange range) {
  auto it = state.given.upper_bound(range.offset);
  if (it != state.given.begin() && std::prev(it)->second > range.offset) --it;
  while (it != state.given.end() && it->first < range.end()) {
    const uint64_t begin = it->first;
    const uint64_t end = it->second;
    it = state.given.erase(it);
    if (begin < range.offset) state.given.emplace(begin, range.offset);
    if (end > range.end()) it = state.given.emplace(range.end(), end).first;
  }
}

bool ReadEngine::IsNear(ByteRange window, ByteRange range) const {
  return range.offset < window.end() + tuning_.near_window && range.end() + tuning_.near_window > window.offset;
}

bool ReadEngine::NearKnownWindow(const ObjectState& state, size_t index, ByteRange range) const {
  return std::any_of(patterns_.begin(), patterns_.end(),
                     [&](const ActivePattern& p) { return IsNear(WindowOf(state, p.pattern, index), range); });
}

ByteRange ReadEngine::WindowOf(const ObjectState& state, const SlicePattern& pattern, size_t index) const {
  const ChunkPlan& plan = *state.plan;
  if (readahead_wanted_ != 0 && readahead_wanted_ < tuning_.readahead && readahead_wanted_ == options_.readahead.slice) {
    // Files are opened at the slice readahead: the kernel reads no further
    // around a slice than that, whatever margins were learned at the larger one.
    SlicePattern narrow = pattern;
    narrow.before = std::min(narrow.before, tuning_.slice_read_around_half);
    narrow.after = std::min(narrow.after, 2 * tuning_.slice_read_around_half);
    return narrow.Window(plan.tensors()[index], plan.data_start(), plan.data_end());
  }
  return pattern.Window(plan.tensors()[index], plan.data_start(), plan.data_end());
}

void ReadEngine::StartSliceSweep(ObjectState& state, int id, size_t from) {
  if (state.slice_sweeps.contains(id)) return;
  state.slice_sweeps[id] = SliceSweep{.start = from};
  TopUpSliceSweep(state, id, from);
}

void ReadEngine::TopUpSliceSweep(ObjectState& state, int id, size_t from) {
  auto pattern_it = std::find_if(patterns_.begin(), patterns_.end(), [&](const ActivePattern& p) { return p.id == id; });
  if (pattern_it == patterns_.end()) state.slice_sweeps.erase(id);
  if (pattern_it == patterns_.end() || stopping_) return;
  auto [sweep_it, fresh] = state.slice_sweeps.try_emplace(id, SliceSweep{.start = from});
  SliceSweep& sweep = sweep_it->second;
  const ChunkPlan& plan = *state.plan;
  const size_t n = plan.tensors().size();
  while (sweep.visited < n && sweep.in_flight < options_.prefetch_window) {
    // One run of windows close together, cut at chunk boundaries.
    size_t k = (sweep.start + sweep.visited) % n;
    ByteRange run = WindowOf(state, pattern_it->pattern, k);
    size_t count = 1;
    while (sweep.visited + count < n && (k + 1) % n != sweep.start % n && k + 1 < n) {
      const ByteRange next = WindowOf(state, pattern_it->pattern, k + 1);
      if (next.offset > run.end() + tuning_.coalesce_gap || next.end() - run.offset > options_.chunk_size) break;
      run = ByteRange{run.offset, std::max(run.end(), next.end()) - run.offset};
      ++k;
      ++count;
    }
    bool room = true;
    for (size_t c = plan.ChunkAt(run.offset), last = plan.ChunkAt(run.end() - 1); c <= last && room; ++c) {
      if (cache_.Find(ChunkKey{state.info.id(), c}) != nullptr) continue;
      const ByteRange chunk = plan.Chunk(c);
      const uint64_t b = std::max(chunk.offset, run.offset);
      const uint64_t e = std::min(chunk.end(), run.end());
      if (Given(state, ByteRange{b, e - b})) continue;
      room = RequestGaps(state, ByteRange{b, e - b}, /*prefetch=*/true, options_.chunk_size, id) >= 0;
    }
    if (!room) return;  // the cache is full: the next read tops up again
    sweep.visited += count;
  }
  // Every window of this object is on its way: go on into the next shard.
  if (sweep.visited >= n && state.successor) {
    ObjectState& next = StateOf(*state.successor);
    if (next.plan != nullptr) {
      if (!next.plan->tensors().empty()) StartSliceSweep(next, id, 0);
    } else if (std::find(next.pending_sweeps.begin(), next.pending_sweeps.end(), id) == next.pending_sweeps.end()) {
      next.pending_sweeps.push_back(id);
      StartHead(next, /*prefetch=*/true);
    }
  }
}

void ReadEngine::ContinueTensor(ObjectState& state, size_t index) {
  const ChunkPlan& plan = *state.plan;
  const TensorSpan& t = plan.tensors()[index];
  for (size_t c = plan.ChunkAt(t.begin), last = plan.ChunkAt(t.end - 1); c <= last; ++c) {
    if (!Request(state, c, /*prefetch=*/true)) return;
  }
}

void ReadEngine::RampWithinTensor(ObjectState& state, const AccessState& access, ByteRange range) {
  const ChunkPlan& plan = *state.plan;
  const int index = plan.TensorAt(range.end() - 1);
  // A read within the head chunk is most likely the kernel reading around a
  // header parsed through mmap: it calls for nothing more yet.
  if (index < 0 || plan.ChunkAt(range.end() - 1) == 0) return;
  const TensorSpan& t = plan.tensors()[static_cast<size_t>(index)];
  auto touch = std::find_if(access.touches.begin(), access.touches.end(), [&](const Touch& x) {
    return x.tensor == index && x.range.offset <= range.end() - 1 && range.end() <= x.range.end();
  });
  const uint64_t run = touch == access.touches.end() ? range.length : range.end() - touch->range.offset;
  // A copy whose end is known is read ahead no further (see Classify).
  const uint64_t limit = touch != access.touches.end() && touch->copy_end > 0 ? touch->copy_end : t.end;
  // How far the bytes after the read are cached or coming already.
  uint64_t frontier = range.end();
  while (frontier < limit) {
    const size_t c = plan.ChunkAt(frontier);
    if (cache_.Find(ChunkKey{state.info.id(), c}) != nullptr) {
      frontier = plan.Chunk(c).end();
      continue;
    }
    std::vector<std::pair<ByteRange, ChunkKey>> pieces = PiecesIn(state, ByteRange{frontier, 1});
    if (pieces.empty()) break;
    frontier = pieces.front().first.end();
  }
  // Ahead by as much as the reader has read of the tensor, topped up in steps
  // that double, so that each request is larger than the one before: a slice
  // reader's rows end somewhere, and what was fetched past them is no more
  // than what it read.
  const uint64_t ahead = std::max(run, tuning_.first_piece);
  if (frontier >= limit || frontier >= range.end() + ahead / 2) return;
  PrefetchPieces(state, ByteRange{frontier, std::min(limit, range.end() + 2 * ahead) - frontier});
}

void ReadEngine::PrefetchPieces(ObjectState& state, ByteRange range) {
  const ChunkPlan& plan = *state.plan;
  // Requests of up to 4 MiB, so the link's connections each carry a share.
  const uint64_t piece = tuning_.max_piece;
  for (uint64_t at = range.offset; at < range.end();) {
    const size_t c = plan.ChunkAt(at);
    const uint64_t e = std::min(range.end(), plan.Chunk(c).end());
    if (cache_.Find(ChunkKey{state.info.id(), c}) == nullptr && !Given(state, ByteRange{at, e - at}) &&
        RequestGaps(state, ByteRange{at, e - at}, /*prefetch=*/true, piece) < 0) {
      return;
    }
    at = e;
  }
}

std::vector<SlicePattern> ReadEngine::SlicePatterns() {
  MutexLock lock(mu_);
  std::vector<SlicePattern> out;
  for (const ActivePattern& p : patterns_) out.push_back(p.pattern);
  return out;
}

ChunkKey ReadEngine::KeyWithin(ObjectState& state, size_t index, const std::optional<ByteRange>& within,
                               ByteRange* range) {
  ChunkKey key{state.info.id(), index};
  *range = state.plan->Chunk(index);
  // A chunk outside `within` altogether (a caller reading past the range it
  // named) is read as a chunk of its own: there is no edge of `within` in it.
  if (!within || (range->offset >= within->offset && range->end() <= within->end()) ||
      range->end() <= within->offset || range->offset >= within->end() || cache_.Find(key) != nullptr) {
    return key;
  }
  const uint64_t begin = std::max(range->offset, within->offset);
  const uint64_t end = std::min(range->end(), within->end());
  *range = ByteRange{begin, end - begin};
  // No stored object's name starts with a NUL byte.
  key.object.name = std::string(1, '\0') + "edge " + std::to_string(within->offset) + "+" +
                    std::to_string(within->length) + " " + key.object.name;
  return key;
}

size_t ReadEngine::WindowChunks(const ChunkPlan& plan, size_t from, uint64_t bytes) {
  size_t n = 0;
  for (uint64_t sum = 0; from + n < plan.size() && sum < bytes; ++n) sum += plan.Chunk(from + n).length;
  return n;
}

void ReadEngine::NoteStreamRead(uint64_t id) {
  recent_streams_.push_back(id);
  ++streams_read_[id];
  if (recent_streams_.size() > tuning_.active_reads) {
    auto it = streams_read_.find(recent_streams_.front());
    if (--it->second == 0) streams_read_.erase(it);
    recent_streams_.pop_front();
  }
}

uint64_t ReadEngine::StreamWindow() const {
  const uint64_t share = options_.prefetch_window / std::max<size_t>(1, streams_read_.size());
  return std::max(share, std::min(options_.prefetch_window, tuning_.min_stream_window_chunks * options_.chunk_size));
}

void ReadEngine::UpdateStreams(ObjectState& state, AccessState& access, size_t first, size_t last, uint64_t read_end,
                               bool waited) {
  const ChunkPlan& plan = *state.plan;
  // Reading the header (to list tensors, say) calls for no tensor data.
  if (read_end <= plan.data_start()) return;
  ++access.clock;
  Stream* s = nullptr;
  for (Stream& st : access.streams) {
    if (first + tuning_.back_tolerance >= st.start && first <= st.frontier + 1) {
      s = &st;
      break;
    }
  }
  const uint64_t least = std::min(options_.prefetch_window, tuning_.min_stream_window_chunks * options_.chunk_size);
  if (s != nullptr) {
    s->last = std::max(s->last, last);
    s->frontier = std::max(s->frontier, last);
    ++s->reads;
    if (waited) s->window = std::min(options_.prefetch_window, 2 * std::max(s->window, least));
  } else {
    if (!access.streams.empty()) ++access.far_jumps;
    Stream fresh{.start = first, .last = last, .frontier = last, .reads = 1, .id = next_stream_id_++};
    if (access.streams.size() < tuning_.max_streams) {
      access.streams.push_back(fresh);
      s = &access.streams.back();
    } else {
      s = &*std::min_element(access.streams.begin(), access.streams.end(),
                             [](const Stream& a, const Stream& b) { return a.age < b.age; });
      *s = fresh;
    }
    // The reader of the file before this one, come here to read it out of
    // order, is known at its first jump (waiting for three left the link to
    // one chunk at a time at each new shard).
    if (access.far_jumps >= (state.continued ? 1 : tuning_.sweep_after_jumps) && !state.sweep) {
      state.sweep = true;
      spdlog::debug("{}: read out of order; prefetching it whole in storage order", state.info.name);
    }
  }
  s->age = access.clock;
  NoteStreamRead(s->id);

  // The rest of the tensor being read, and for a reader moving on (not one that
  // just jumped here), the window ahead in storage order. A first read that
  // stays in the head chunk is most likely the kernel reading ahead of a header
  // read: it calls for nothing more yet.
  const bool head_only = last == 0 && access.streams.size() == 1 && s->reads == 1;
  size_t target = head_only ? s->frontier : std::max(s->frontier, plan.TensorEnd(last));
  if (s->reads >= 2) {
    const uint64_t window = std::min(StreamWindow(), std::max(s->window, least));
    target = std::max(target, last + WindowChunks(plan, last + 1, window));
  }
  target = std::min(target, plan.size() - 1);
  for (size_t i = std::max(last + 1, s->frontier + 1); i <= target; ++i) {
    if (!Request(state, i, /*prefetch=*/true)) break;
    s->frontier = i;
  }
  // A sequential reader within a window of the end: keep the link busy with the
  // start of the next file of the checkpoint, as much as the window has left.
  if (s->reads >= 2 && s->frontier + 1 >= plan.size()) {
    uint64_t left = 0;
    for (size_t i = last + 1; i < plan.size(); ++i) left += plan.Chunk(i).length;
    ContinueIntoSuccessor(state, left);
  }
  // Streams that ran into this one are part of it now.
  Stream merged = *s;
  std::erase_if(access.streams, [&](const Stream& st) {
    return &st != s && st.start + tuning_.back_tolerance >= merged.start && st.start <= merged.frontier + 1 &&
           st.frontier <= std::max(merged.frontier, st.frontier);
  });
  if (state.sweep) TopUpSweep(state);
}

void ReadEngine::SetReadOrder(const std::vector<ObjectInfo>& objects) {
  MutexLock lock(mu_);
  for (size_t i = 0; i + 1 < objects.size(); ++i) {
    read_order_[objects[i].id()] = objects[i + 1];
    auto it = objects_.find(objects[i].id());
    if (it != objects_.end()) it->second.successor = objects[i + 1];
  }
}

void ReadEngine::ContinueIntoSuccessor(ObjectState& state, uint64_t left) {
  if (!state.successor || left >= options_.prefetch_window) return;
  const uint64_t want = options_.prefetch_window - left;
  ObjectState& next = StateOf(*state.successor);
  if (next.plan != nullptr) {
    ContinueInto(next, want);
  } else {
    next.continue_bytes = std::max(next.continue_bytes, want);
    StartHead(next, /*prefetch=*/true);
  }
}

void ReadEngine::ContinueInto(ObjectState& state, uint64_t bytes) {
  const ChunkPlan& plan = *state.plan;
  state.continued = true;
  // The stream the predecessor's reader will continue in.
  auto it = std::find_if(state.access.streams.begin(), state.access.streams.end(), [](const Stream& st) { return st.start == 0; });
  if (it == state.access.streams.end()) {
    if (state.access.streams.size() >= tuning_.max_streams) return;
    state.access.streams.push_back(Stream{.start = 0, .last = 0, .frontier = 0, .reads = 2, .id = next_stream_id_++, .continuation = true});
    it = std::prev(state.access.streams.end());
  }
  it->age = ++state.access.clock;
  uint64_t covered = 0;
  for (size_t i = 1; i < plan.size() && covered < bytes; ++i) {
    covered += plan.Chunk(i).length;
    if (i <= it->frontier) continue;
    if (!Request(state, i, /*prefetch=*/true)) break;
    it->frontier = i;
  }
}

void ReadEngine::TopUpSweep(ObjectState& state) {
  const ChunkPlan& plan = *state.plan;
  const int limit = static_cast<int>(std::max<uint64_t>(1, options_.prefetch_window / options_.chunk_size));
  while (state.sweep_in_flight < limit && state.sweep_next < plan.size()) {
    ChunkKey key{state.info.id(), state.sweep_next};
    if (cache_.Find(key) == nullptr) {
      if (!Request(state, state.sweep_next, /*prefetch=*/true, /*sweep=*/true)) return;
    }
    ++state.sweep_next;
  }
  // All of this object is on its way: the next file of the checkpoint can start.
  if (state.sweep_next >= plan.size()) {
    ContinueIntoSuccessor(state, static_cast<uint64_t>(state.sweep_in_flight) * options_.chunk_size);
  }
}

void ReadEngine::Read(const ObjectInfo& object, uint64_t offset, size_t size, ReadDone done, ReadHints hints) {
  if (trace_ != nullptr) {
    trace_->Record(TracedRead{.reader = hints.reader.value, .offset = offset, .length = size, .kernel = hints.prefetch,
                              .delivered = hints.delivered, .within = hints.within.has_value(), .object = object.name});
  }
  if (offset >= object.size || size == 0) return done(ReadResult{});
  // What this read teaches of its reader may change the readahead of the
  // mount's next files: handed to the sink once mu_ is released.
  struct ApplyAfter {
    ReadEngine* engine;
    ~ApplyAfter() {
      if (engine->readahead_changed_.load(std::memory_order_relaxed)) engine->ApplyReadahead();
    }
  } apply_readahead{this};
  auto op = std::make_shared<ReadOp>();
  op->object = object.id();
  op->range = ByteRange{offset, std::min<uint64_t>(size, object.size - offset)};
  op->done = std::move(done);
  op->hints = hints;
  std::vector<std::shared_ptr<const Chunk>> evicted;  // released after mu_
  {
    MutexLock lock(mu_);
    EvictedChunks keep_evicted(cache_, evicted);
    PruneObjects();
    ObjectState& state = StateOf(object);
    if (state.plan == nullptr) {
      metrics_.cache_misses.fetch_add(1, std::memory_order_relaxed);
      state.plan_waiters.push_back([this, object, op](const Status& status) {
        if (!status.ok()) return op->done(status);
        metrics_.cache_misses.fetch_sub(1, std::memory_order_relaxed);  // counted once, as a miss, above
        Read(object, op->range.offset, op->range.length, std::move(op->done), op->hints);
      });
      StartHead(state, /*prefetch=*/false);
      return;
    }
    const ChunkPlan& plan = *state.plan;
    const size_t first = plan.ChunkAt(op->range.offset);
    const size_t last = plan.ChunkAt(op->range.end() - 1);
    // Which kind of reader this is decides how much of a missing chunk to
    // fetch and what to prefetch (see "Readers" in the header).
    Mode mode = Mode::kWhole;
    const ActivePattern* pattern = nullptr;
    uint64_t copy_end = UINT64_MAX;  // where the copy this read is part of ends, if known
    // The kernel reading bytes it was given has dropped them.
    if (op->hints.prefetch && !op->hints.within) RemoveGiven(state, op->range);
    const bool kernel_read = op->hints.prefetch && !op->hints.within && !plan.tensors().empty();
    AccessState* access = &state.access;
    ReaderClock* reader = &anonymous_;
    SliceLearner* learner = &learner_;
    if (op->hints.reader.value != 0) {
      ReaderState& r = ReaderOf(op->hints.reader, state);
      access = &r.access;
      reader = &r.clock;
      learner = &r.learner;
    }
    if (kernel_read) mode = Classify(state, *access, *reader, *learner, op->range, &pattern, &copy_end);
    if (kernel_read && op->hints.reader.value != 0) {
      ReaderState& r = readers_.at(op->hints.reader);
      if (mode == Mode::kSlice || mode == Mode::kNearSlice) {
        r.clock.presumed_whole = false;
      } else if (r.clock.presumed_whole && mode != Mode::kWhole) {
        mode = Mode::kWhole;
      }
      if (reader->reads < reader->whole_until) {
        SetKind(r, ReadaheadPolicy::Kind::kWhole);
      } else if (mode == Mode::kSlice) {
        SetKind(r, ReadaheadPolicy::Kind::kSlice);
      }
    }
    const bool spans_tensors = plan.TensorAt(op->range.offset) != plan.TensorAt(op->range.end() - 1);
    if (kernel_read && options_.shard_world > 0 && !state.slice_sweeps.contains(patterns_.front().id)) {
      StartSliceSweep(state, patterns_.front().id, 0);  // -o shard: from the first read on
    }
    bool waited_on_prefetch = false;  // the read needs a prefetched chunk still coming
    // Adds the entry `key` covering `piece` to the read: cached, or joined.
    auto add = [&](const ChunkKey& key, bool fetch_whole_chunk, ByteRange piece,
                   std::shared_ptr<const Chunk> held = nullptr) REQUIRES(mu_) {
      const size_t slot = op->chunks.size();
      op->chunks.emplace_back();
      op->keys.push_back(key);
      ChunkCache::Entry* entry = cache_.Find(key);
      if (held != nullptr || (entry != nullptr && entry->chunk != nullptr)) {
        op->chunks[slot] = held != nullptr ? std::move(held) : entry->chunk;
        if (entry != nullptr) cache_.Touch(key);
        metrics_.cache_hits.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      metrics_.cache_misses.fetch_add(1, std::memory_order_relaxed);
      if (entry != nullptr && entry->prefetched) waited_on_prefetch = true;
      if (entry == nullptr) {
        if (fetch_whole_chunk) RequestPiece(state, key, piece, /*prefetch=*/false);
        entry = cache_.Find(key);
      } else if (entry->prefetched && entry->waiters.empty()) {
        // A reader waits for a queued prefetch: give it demand priority.
        auto it = std::find_if(prefetch_queue_.begin(), prefetch_queue_.end(),
                               [&](const Job& j) { return !j.head && j.key == key; });
        if (it != prefetch_queue_.end()) {
          demand_queue_.push_back(std::move(*it));
          prefetch_queue_.erase(it);
        }
      }
      op->pending.fetch_add(1);
      entry->waiters.push_back([this, op, slot](const StatusOr<std::shared_ptr<const Chunk>>& chunk) {
        if (!chunk.ok()) {
          if (!op->failed.exchange(true)) op->error = chunk.status();
        } else {
          op->chunks[slot] = *chunk;
        }
        if (op->pending.fetch_sub(1) == 1) FinishRead(op);
      });
    };
    op->pending.store(1);  // held until every entry is added
    for (size_t i = first; i <= last; ++i) {
      const ChunkKey key{state.info.id(), i};
      const ByteRange chunk = plan.Chunk(i);
      const uint64_t b = std::max(op->range.offset, chunk.offset);
      const uint64_t e = std::min(op->range.end(), chunk.end());
      const ByteRange part{b, e - b};
      if (op->hints.within) {
        ByteRange piece;
        ChunkKey edge = KeyWithin(state, i, op->hints.within, &piece);
        add(edge, true, piece);
        continue;
      }
      std::vector<std::pair<ByteRange, ChunkKey>> pieces;
      if (cache_.Find(key) == nullptr) pieces = PiecesIn(state, chunk);
      const bool whole = mode == Mode::kWhole || mode == Mode::kWholeEnd;
      if (pieces.empty() && (whole || cache_.Find(key) != nullptr)) {
        add(key, true, chunk);
        continue;
      }
      // Missing bytes of the part come as pieces: a whole reader's fill the
      // chunk's gaps, a slice reader's its window, an unknown reader's start
      // at the read and run on a little, unless the read spans tensors (the
      // kernel reading around a page near a tensor's edge: what the reader
      // needs of the tensors beyond that edge is not known yet).
      ByteRange want = part;
      if (whole) {
        want = chunk;
      } else if (mode == Mode::kSlice) {
        // The windows the part falls in, within the chunk.
        for (int k = plan.TensorAt(b); k >= 0 && static_cast<size_t>(k) < plan.tensors().size() &&
                                       plan.tensors()[static_cast<size_t>(k)].begin < e;
             ++k) {
          const ByteRange w = WindowOf(state, pattern->pattern, static_cast<size_t>(k));
          if (w.end() <= b || w.offset >= e) continue;
          const uint64_t wb = std::max(std::min(want.offset, w.offset), chunk.offset);
          const uint64_t we = std::min(std::max(want.end(), w.end()), chunk.end());
          want = ByteRange{wb, we - wb};
        }
      } else if (mode == Mode::kNearSlice || mode == Mode::kAround || spans_tensors) {
        want = ByteRange{b & ~(tuning_.page - 1), 0};
        want.offset = std::max(want.offset, chunk.offset);
        want.length = std::min(chunk.end(), (e + tuning_.page - 1) & ~(tuning_.page - 1)) - want.offset;
      } else {
        const uint64_t wb = b & ~(tuning_.page - 1);
        const uint64_t run_on = std::min(copy_end, std::max(wb, chunk.offset) + tuning_.first_piece);
        const uint64_t we = std::min(chunk.end(), std::max(e, run_on));
        want = ByteRange{std::max(wb, chunk.offset), 0};
        want.length = we - want.offset;
      }
      // Requesting the gaps may evict ready pieces this read needs: hold them first.
      std::vector<std::pair<ByteRange, ChunkKey>> tiles = PiecesIn(state, want);
      std::map<uint64_t, std::shared_ptr<const Chunk>> held;
      for (const auto& [range, piece_key] : tiles) held[range.offset] = cache_.Find(piece_key)->chunk;
      RequestGaps(state, want, /*prefetch=*/false, options_.chunk_size, -1, &tiles);
      std::sort(tiles.begin(), tiles.end(),
                [](const auto& x, const auto& y) { return x.first.offset < y.first.offset; });
      for (const auto& [range, piece_key] : tiles) {
        if (range.end() <= part.offset || range.offset >= part.end()) continue;
        auto h = held.find(range.offset);
        add(piece_key, false, range, h != held.end() ? h->second : nullptr);
      }
    }
    if (kernel_read && (mode == Mode::kSlice || mode == Mode::kNearSlice)) {
      TopUpSliceSweep(state, pattern->id, static_cast<size_t>(std::max(0, plan.TensorAt(op->range.offset))));
    } else if (kernel_read && mode == Mode::kUnknown) {
      if (!spans_tensors) RampWithinTensor(state, *access, op->range);
    } else if (op->hints.prefetch && mode != Mode::kAround && mode != Mode::kWholeEnd) {
      UpdateStreams(state, *access, first, last, op->range.end(), waited_on_prefetch);
    }
    if (op->pending.fetch_sub(1) != 1) return;  // the last arriving entry finishes it
  }
  FinishRead(op);
}

void ReadEngine::Prefetch(const ObjectInfo& object, ByteRange range, std::optional<ByteRange> within) {
  if (range.length == 0 || range.offset >= object.size) return;
  std::vector<std::shared_ptr<const Chunk>> evicted;  // released after mu_
  MutexLock lock(mu_);
  EvictedChunks keep_evicted(cache_, evicted);
  if (stopping_) return;
  PruneObjects();
  ObjectState& state = StateOf(object);
  if (state.plan == nullptr) {
    state.pending_prefetch.emplace_back(range, within);
    StartHead(state, /*prefetch=*/true);
    return;
  }
  PrefetchRange(state, range, within);
}

void ReadEngine::PrefetchRange(ObjectState& state, ByteRange range, const std::optional<ByteRange>& within) {
  const ChunkPlan& plan = *state.plan;
  const uint64_t end = std::min(range.end(), state.info.size);
  if (range.offset >= end) return;
  for (size_t i = plan.ChunkAt(range.offset), last = plan.ChunkAt(end - 1); i <= last; ++i) {
    const ByteRange chunk = plan.Chunk(i);
    if (within && (chunk.end() <= within->offset || chunk.offset >= within->end())) continue;
    ByteRange piece;
    ChunkKey key = KeyWithin(state, i, within, &piece);
    if (!RequestPiece(state, key, piece, /*prefetch=*/true)) return;
  }
}

void ReadEngine::ReadDerived(const ChunkKey& key, uint64_t size, const DeriveFn& derive, ChunkWaiter done) {
  std::shared_ptr<const Chunk> cached;
  bool unmounting = false;
  std::vector<std::shared_ptr<const Chunk>> evicted;  // released after mu_
  {
    MutexLock lock(mu_);
    EvictedChunks keep_evicted(cache_, evicted);
    unmounting = stopping_;
    ChunkCache::Entry* entry = unmounting ? nullptr : cache_.Find(key);
    if (unmounting) {
      // `done` is called below, without mu_ (callbacks never run under it).
    } else if (entry != nullptr && entry->chunk != nullptr) {
      cache_.Touch(key);
      metrics_.cache_hits.fetch_add(1, std::memory_order_relaxed);
      cached = entry->chunk;
    } else {
      metrics_.cache_misses.fetch_add(1, std::memory_order_relaxed);
      if (entry != nullptr) {  // being computed: wait for it
        entry->waiters.push_back(std::move(done));
        return;
      }
      cache_.Reserve(size, /*evict_unconsumed=*/true);
      cache_.InsertLoading(key, ByteRange{0, size}, /*prefetched=*/false)->waiters.push_back(std::move(done));
    }
  }
  if (unmounting) return done(UnavailableError("tensorfs is unmounting"));
  if (cached != nullptr) return done(cached);
  derive([this, key](StatusOr<std::shared_ptr<Chunk>> chunk) {
    std::vector<ChunkWaiter> waiters;
    {
      MutexLock lock(mu_);
      std::optional<std::vector<ChunkWaiter>> taken = chunk.ok() ? cache_.Publish(key, *chunk) : cache_.Fail(key);
      if (taken) {
        waiters = std::move(*taken);
      } else {
        Inconsistent(key.object.name + ": a derived chunk finished with no entry waiting for it");
      }
    }
    const StatusOr<std::shared_ptr<const Chunk>> result =
        chunk.ok() ? StatusOr<std::shared_ptr<const Chunk>>(std::shared_ptr<const Chunk>(*chunk))
                   : StatusOr<std::shared_ptr<const Chunk>>(chunk.status());
    for (auto& w : waiters) w(result);
  });
}

void ReadEngine::Inconsistent(const std::string& what) {
  metrics_.engine_inconsistencies.fetch_add(1, std::memory_order_relaxed);
  if (std::optional<uint64_t> suppressed = inconsistency_log_.Allow()) {
    spdlog::error("INTERNAL ERROR (read answered with EIO, the mount goes on): {}{}", what,
                  SuppressedSuffix(*suppressed));
  }
}

void ReadEngine::FinishRead(const std::shared_ptr<ReadOp>& op) {
  if (op->failed.load()) return op->done(op->error);
  ReadResult result;
  std::vector<ByteRange> parts;
  uint64_t cursor = op->range.offset;
  for (const auto& chunk : op->chunks) {
    const uint64_t begin = std::max(cursor, chunk == nullptr ? cursor : chunk->range().offset);
    const uint64_t end = chunk == nullptr ? begin : std::min(op->range.end(), chunk->range().end());
    // The entries tile the range, in order.
    if (chunk == nullptr || begin != cursor || end < begin) {
      Inconsistent("the cache entries for " + std::to_string(op->range.length) + " bytes at " +
                   std::to_string(op->range.offset) + " of " + op->object.name + " do not tile it: an entry " +
                   (chunk == nullptr ? std::string("is missing")
                                     : "covers " + std::to_string(chunk->range().offset) + "+" +
                                           std::to_string(chunk->range().length)) +
                   " where byte " + std::to_string(cursor) + " was due");
      return op->done(InternalError("tensorfs read engine: inconsistent cache entries for " + op->object.name +
                                    " (logged; please report)"));
    }
    parts.push_back(ByteRange{begin, end - begin});
    result.pieces.push_back(chunk->Slice(parts.back()));
    cursor = end;
  }
  if (cursor != op->range.end()) {
    Inconsistent("the cache entries for " + std::to_string(op->range.length) + " bytes at " +
                 std::to_string(op->range.offset) + " of " + op->object.name + " end at byte " +
                 std::to_string(cursor));
    return op->done(InternalError("tensorfs read engine: inconsistent cache entries for " + op->object.name +
                                  " (logged; please report)"));
  }
  std::vector<std::shared_ptr<const Chunk>> evicted;  // released after mu_
  if (op->hints.delivered) {
    MutexLock lock(mu_);
    EvictedChunks keep_evicted(cache_, evicted);
    // The kernel's own reads of the file record what it was given.
    auto state = op->hints.prefetch && !op->hints.within ? objects_.find(op->object) : objects_.end();
    for (size_t i = 0; i < parts.size(); ++i) {
      const std::optional<ByteRange> consumed = cache_.MarkDelivered(op->keys[i], op->chunks[i].get(), parts[i]);
      if (consumed && state != objects_.end()) AddGiven(state->second, *consumed);
    }
  }
  if (op->hints.prefetch) {  // a kernel read; views count their own reads
    metrics_.read_requests.fetch_add(1, std::memory_order_relaxed);
    metrics_.bytes_served.fetch_add(op->range.length, std::memory_order_relaxed);
  }
  result.owner = std::make_shared<std::vector<std::shared_ptr<const Chunk>>>(std::move(op->chunks));
  op->done(std::move(result));
}

void ReadEngine::WorkerLoop() {
  for (;;) {
    Job job;
    {
      MutexLock lock(mu_);
      work_cv_.Wait(mu_, [&]() REQUIRES(mu_) {
        return stopping_ || !demand_queue_.empty() || !prefetch_queue_.empty();
      });
      if (stopping_) return;
      std::deque<Job>& queue = demand_queue_.empty() ? prefetch_queue_ : demand_queue_;
      job = std::move(queue.front());
      queue.pop_front();
      ++running_jobs_;
    }
    RunJob(job);
  }
}

StatusOr<std::shared_ptr<Chunk>> ReadEngine::FetchHead(const ObjectInfo& object,
                                                        std::shared_ptr<const ChunkPlan>* plan) {
  const bool safetensors = object.name.ends_with(".safetensors");
  uint64_t head = std::min(object.size, safetensors ? options_.head_size : options_.chunk_size);
  auto chunk = std::make_shared<Chunk>(ByteRange{0, head}, pool_);
  RETURN_IF_ERROR(store_.Read(object.id(), 0, chunk->writable()));
  metrics_.bytes_fetched.fetch_add(head, std::memory_order_relaxed);
  *plan = std::make_shared<const ChunkPlan>(ChunkPlan::Aligned(object.size, head, options_.chunk_size));
  if (!safetensors) return chunk;

  // A malformed header leaves the aligned plan: the file stays readable as is.
  StatusOr<uint64_t> n = ParseHeaderLength(object.name, chunk->bytes(), object.size);
  if (!n.ok()) return chunk;
  const uint64_t header_end = kHeaderLengthBytes + *n;
  if (header_end > head) {  // a header longer than the first request: fetch the rest
    auto whole = std::make_shared<Chunk>(ByteRange{0, header_end}, pool_);
    std::memcpy(whole->writable().data(), chunk->bytes().data(), head);
    RETURN_IF_ERROR(store_.Read(object.id(), head, whole->writable().subspan(head)));
    metrics_.fetches.fetch_add(1, std::memory_order_relaxed);
    metrics_.bytes_fetched.fetch_add(header_end - head, std::memory_order_relaxed);
    chunk = std::move(whole);
    head = header_end;
    *plan = std::make_shared<const ChunkPlan>(ChunkPlan::Aligned(object.size, head, options_.chunk_size));
  }
  StatusOr<SafetensorsHeader> header =
      ParseHeader(object.name, chunk->bytes().subspan(kHeaderLengthBytes, *n), object.size);
  if (!header.ok()) {
    spdlog::debug("{}: {}; reading it as a plain file", object.name, header.status().message());
    return chunk;
  }
  *plan = std::make_shared<const ChunkPlan>(ChunkPlan::ForSafetensors(*header, object.size, head, options_.chunk_size));
  return chunk;
}

void ReadEngine::RunJob(const Job& job) {
  metrics_.fetches_in_flight.fetch_add(1, std::memory_order_relaxed);
  metrics_.fetches.fetch_add(1, std::memory_order_relaxed);
  const auto started = std::chrono::steady_clock::now();
  std::shared_ptr<Chunk> chunk;
  std::shared_ptr<const ChunkPlan> plan;
  Status status;
  ObjectInfo info;
  if (job.head) {
    {
      MutexLock lock(mu_);
      info = objects_.at(job.object).info;
    }
    StatusOr<std::shared_ptr<Chunk>> head = FetchHead(info, &plan);
    status = head.status();
    if (head.ok()) chunk = std::move(*head);
  } else {
    chunk = std::make_shared<Chunk>(job.range, pool_);
    status = store_.Read(job.object, job.range.offset, chunk->writable());
    if (status.ok()) metrics_.bytes_fetched.fetch_add(job.range.length, std::memory_order_relaxed);
  }
  metrics_.fetch_latency.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  metrics_.fetches_in_flight.fetch_sub(1, std::memory_order_relaxed);
  if (!status.ok()) {
    metrics_.CountError(status.code());
    status = status.WithContext("fetch of " + std::to_string(job.range.length) + " bytes at " +
                                std::to_string(job.range.offset) + " of " + job.object.name);
  }

  std::vector<ChunkWaiter> waiters;
  std::vector<std::function<void(const Status&)>> plan_waiters;
  const StatusOr<std::shared_ptr<const Chunk>> result =
      status.ok() ? StatusOr<std::shared_ptr<const Chunk>>(std::shared_ptr<const Chunk>(chunk))
                  : StatusOr<std::shared_ptr<const Chunk>>(status);
  std::vector<std::shared_ptr<const Chunk>> evicted;  // released after mu_
  {
    MutexLock lock(mu_);
    EvictedChunks keep_evicted(cache_, evicted);
    ObjectState& state = objects_.at(job.object);
    --state.jobs;
    --running_jobs_;
    if (job.head) {
      plan_waiters = std::move(state.plan_waiters);
      state.plan_waiters.clear();
      if (status.ok()) {
        state.plan = std::move(plan);
        ChunkKey key{job.key.object, 0};
        if (cache_.Find(key) == nullptr) {
          cache_.Reserve(chunk->range().length, /*evict_unconsumed=*/true);
          cache_.InsertLoading(key, chunk->range(), /*prefetched=*/true);
          cache_.Publish(key, std::move(chunk));
        }
        if (state.continue_bytes > 0 && !stopping_) ContinueInto(state, state.continue_bytes);
        state.continue_bytes = 0;
        if (!stopping_) {
          for (const auto& [range, within] : state.pending_prefetch) PrefetchRange(state, range, within);
          if (!state.plan->tensors().empty()) {
            for (int id : state.pending_sweeps) StartSliceSweep(state, id, 0);
          }
        }
        state.pending_prefetch.clear();
        state.pending_sweeps.clear();
      } else {
        state.head_requested = false;  // the next read tries again
      }
    } else {
      std::optional<std::vector<ChunkWaiter>> taken =
          status.ok() ? cache_.Publish(job.key, std::move(chunk)) : cache_.Fail(job.key);
      if (taken) {
        waiters = std::move(*taken);
      } else {
        Inconsistent(job.key.object.name + ": a fetch of " + std::to_string(job.range.offset) + "+" +
                     std::to_string(job.range.length) + " finished with no loading entry for it");
      }
      if (job.sweep) --state.sweep_in_flight;
      if (state.sweep && !stopping_) TopUpSweep(state);
      if (job.slice >= 0) {
        auto it = state.slice_sweeps.find(job.slice);
        if (it != state.slice_sweeps.end()) {
          it->second.in_flight -= std::min(it->second.in_flight, job.range.length);
          if (!stopping_) TopUpSliceSweep(state, job.slice, it->second.start);
        }
      }
      if (!status.ok() && job.key.object.name != job.object.name) {
        auto piece = state.pieces.find(job.range.offset);
        if (piece != state.pieces.end() && piece->second.key == job.key) state.pieces.erase(piece);
      }
    }
  }
  for (auto& w : waiters) w(result);
  for (auto& w : plan_waiters) w(status);
}

}  // namespace tensorfs
