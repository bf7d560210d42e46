#include "core/engine/read_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <set>

#include "core/safetensors/checkpoint.h"
#include "core/safetensors/header.h"
#include "core/util/log_limiter.h"

namespace tensorfs {
namespace {

// Nothing is pending on the object's state: it may be dropped.
bool Unused(const ObjectState& st) {
  return st.jobs == 0 && st.plan_waiters.empty() && st.pending_prefetch.empty() && st.pending_sweeps.empty() &&
         st.continue_bytes == 0;
}

}  // namespace

// One read in progress: the chunks it needs, filled as they arrive.
struct ReadEngine::ReadOp {
  ObjectId object;
  ByteRange range;
  // The extents that tile `range`, in order.
  std::vector<std::shared_ptr<const Chunk>> chunks;
  std::vector<ExtentId> extents;
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
      pool_(pool != nullptr ? std::move(pool) : std::make_shared<BufferPool>([&] {
        BufferPool::Options o = BufferPool::Options::ForCache(options.cache_size);
        o.metrics = &metrics;
        return o;
      }())),
      cache_(options.cache_size, options.consumed_keep, metrics),
      model_(tuning_,
             options.shard_world > 1
                 ? std::optional(SlicePattern::Shard(options.shard_rank, options.shard_world, tuning_))
                 : std::nullopt),
      planner_(options_, tuning_, cache_, model_, metrics_, *this),
      learner_(tuning_),
      readahead_(options.readahead),
      readahead_wanted_(readahead_.Wanted()) {
  model_.SetReadahead(readahead_wanted_);
  anonymous_.presumed_whole = options_.shard_world == 1;
  if (!options_.trace_reads.empty()) {
    StatusOr<std::unique_ptr<ReadTrace>> trace = ReadTrace::Open(options_.trace_reads);
    if (trace.ok()) {
      trace_ = std::move(*trace);
    } else {
      spdlog::warn("{}; reads are not traced", trace.status().message());
    }
  }
  scheduler_.Start(options_.max_fetches, [this](const FetchJob& job) { return RunJob(job); },
                   FetchScheduler<FetchJob>::PrefetchBound{
                       .bytes_of = [](const FetchJob& job) { return job.slice >= 0 ? job.range.length : 0; },
                       .floor = tuning_.sweep_floor,
                       .horizon = tuning_.sweep_horizon});
}

ReadEngine::~ReadEngine() {
  std::vector<ChunkWaiter> waiters;
  std::vector<std::function<void(const Status&)>> plan_waiters;
  {
    MutexLock lock(mu_);
    stopping_ = true;
    planner_.Stop();
    for (const FetchJob& job : scheduler_.Stop()) {
      if (job.head) {
        auto& w = objects_.at(job.object).plan_waiters;
        std::move(w.begin(), w.end(), std::back_inserter(plan_waiters));
        w.clear();
      } else {
        if (auto w = cache_.Fail(job.extent)) std::move(w->begin(), w->end(), std::back_inserter(waiters));
      }
    }
  }
  Status unmounting = UnavailableError("tensorfs is unmounting");
  for (auto& w : waiters) w(unmounting);
  for (auto& w : plan_waiters) w(unmounting);
  scheduler_.Join();
}

ObjectState& ReadEngine::StateOf(const ObjectInfo& object) {
  auto [it, inserted] = objects_.try_emplace(object.id());
  if (inserted) {
    it->second.info = object;
    it->second.extents = &cache_.Extents(it->first);
    auto next = read_order_.find(it->first);
    if (next != read_order_.end()) it->second.successor = next->second;
  }
  it->second.last_used = ++engine_clock_;
  return it->second;
}

ReadEngine::ReaderState& ReadEngine::Remember(ReaderId reader) {
  auto [it, inserted] = readers_.try_emplace(reader);
  ReaderState& r = it->second;
  r.last_used = ++engine_clock_;
  if (inserted) {
    r.process = reader.process;
    r.learner = SliceLearner(tuning_);
  }
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

uint64_t ReadEngine::FileReadaheadFor(const ObjectInfo& object, uint64_t process) {
  // Without a sink applying each file's own value, files are taken to be
  // opened at the mount's.
  return per_file_readahead_ ? readahead_.WantedFor(process, IsOneOfSeveralShards(object.name), object.name)
                             : readahead_wanted_;
}

uint64_t ReadEngine::FileReadaheadOf(const ObjectState& state, const AccessModel::ActivePattern& pattern) {
  return FileReadaheadFor(state.info, pattern.process);
}

ReadEngine::ReaderState& ReadEngine::ReaderOf(ReaderId reader, ObjectState& state) {
  ReaderState& r = Remember(reader);
  if (r.object != state.info.id()) {  // its first read
    r.object = state.info.id();
    // Its file was opened at the readahead its process's files got then
    // (Opening says which, for the open file a thread's reads are of; else
    // the policy's now, the sink taking each change before the next open).
    if (!r.opened && reader.thread != 0) {
      auto open = readers_.find(ReaderId{reader.value, reader.process, 0});
      if (open != readers_.end() && open->second.opened) {
        r.file_readahead = open->second.file_readahead;
        r.opened = true;
      }
    }
    if (!r.opened) r.file_readahead = FileReadaheadFor(state.info, reader.process);
    // -o shard=0/1 says so; else a reader whose file was opened at the whole
    // readers' readahead most likely is one, as is a thread of a process seen
    // reading whole tensors (a loader's threads, its file opened before that
    // was seen). Its process seen reading whole tensors, its reads teach
    // nothing; a process not known yet, its file opened at that readahead
    // because that file's readers before it read whole tensors
    // (readahead_policy.h), still teaches its slice if it has one: a slice
    // host reading a loader's checkpoint.
    const bool whole_readahead = !options_.readahead.fixed &&
                                 options_.readahead.whole != options_.readahead.unknown &&
                                 r.file_readahead == options_.readahead.whole;
    const bool whole_process = readahead_.KindOf(reader.process) == ReadaheadPolicy::Kind::kWhole;
    r.clock.presumed_whole =
        options_.shard_world == 1 || whole_readahead || (reader.thread != 0 && whole_process);
    r.clock.presumed_by_file = options_.shard_world != 1 && whole_readahead && !whole_process;
    r.access = AccessState{.process = reader.process};
    for (const Stream& st : state.access.streams) {
      if (st.continuation && MaybeOneProcess(st.process, reader.process)) {
        r.access.streams.push_back(st);
        r.access.continued = true;
      }
    }
  }
  return r;
}

void ReadEngine::ReleaseReader(ReaderId reader) {
  {
    MutexLock lock(mu_);
    // The open file's, and its threads' (ReaderId orders by value first),
    // also among its object's readers.
    for (auto it = readers_.lower_bound(ReaderId{reader.value, reader.process, 0});
         it != readers_.end() && it->first.value == reader.value && it->first.process == reader.process;) {
      if (auto object = objects_.find(it->second.object); object != objects_.end()) {
        object->second.together.Release(reader.value, reader.process);
      }
      SetKind(it->second, ReadaheadPolicy::Kind::kUnknown);
      it = readers_.erase(it);
    }
  }
  if (readahead_changed_.load(std::memory_order_relaxed)) ApplyReadahead();
}

void ReadEngine::SetKind(ReaderState& r, ReadaheadPolicy::Kind kind) {
  if (r.kind == kind) return;
  const uint64_t was = readahead_.WantedFor(r.process, /*shard=*/false);
  readahead_.Change(r.process, r.kind, kind, r.object.name);
  r.kind = kind;
  TakeWanted(r.process, was, kind == ReadaheadPolicy::Kind::kSlice ? "slice readers" : "whole-tensor readers");
}

void ReadEngine::LearnSliceSize(const ObjectState& state, const SlicePattern& pattern, uint64_t process) {
  // The first file a process's slice reader reads tells how large its slices are.
  if (readahead_.slice_size_known(process)) return;
  const uint64_t was = readahead_.WantedFor(process, /*shard=*/false);
  const uint64_t mean = pattern.MeanCore(state.plan->tensors());
  readahead_.SetSliceSize(process, mean);
  spdlog::debug("{}: the slices of {} average {} KiB", state.info.name, pattern.ToString(), mean >> 10);
  TakeWanted(process, was, "slice readers, small slices");
}

void ReadEngine::TakeWanted(uint64_t process, uint64_t was, const char* why) {
  if (const uint64_t now = readahead_.WantedFor(process, /*shard=*/false); now != was && was != 0) {
    spdlog::info("files {} opens from now on get a readahead of {} KiB ({})",
                 process != 0 ? "process " + std::to_string(process) : std::string("a process not known"),
                 now >> 10, why);
  }
  const uint64_t wanted = readahead_.Wanted();
  if (wanted == readahead_wanted_) return;
  readahead_wanted_ = wanted;
  model_.SetReadahead(wanted);
  readahead_changed_.store(true, std::memory_order_relaxed);
}

void ReadEngine::SetReadaheadSink(std::function<void(uint64_t)> sink) {
  {
    MutexLock lock(readahead_mu_);
    readahead_sink_ = std::move(sink);
    readahead_applied_ = UINT64_MAX;
    MutexLock engine_lock(mu_);
    per_file_readahead_ = readahead_sink_ != nullptr;
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
  HandToSink(wanted);
}

void ReadEngine::HandToSink(uint64_t wanted) {
  if (wanted == readahead_applied_) return;
  readahead_applied_ = wanted;
  if (wanted != 0) readahead_sink_(wanted);
}

void ReadEngine::Opening(std::string_view name, ReaderId reader) {
  if (!IsSafetensorsFileName(name)) return;
  MutexLock sink_lock(readahead_mu_);
  if (!readahead_sink_) return;
  uint64_t wanted = 0;
  {
    MutexLock lock(mu_);
    wanted = readahead_.WantedFor(reader.process, IsOneOfSeveralShards(name), name);
    if (reader.value != 0) {
      ReaderState& r = Remember(reader);
      r.file_readahead = wanted;
      r.opened = true;
    }
  }
  // 0 (the kernel's, left as it is) would leave the value in force.
  if (wanted != 0) HandToSink(wanted);
}

void ReadEngine::PruneObjects() {
  if (objects_.size() <= tuning_.max_objects) return;
  std::vector<std::pair<uint64_t, std::map<ObjectId, ObjectState>::iterator>> idle;
  for (auto it = objects_.begin(); it != objects_.end(); ++it) {
    if (Unused(it->second)) idle.emplace_back(it->second.last_used, it);
  }
  std::sort(idle.begin(), idle.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < idle.size() && objects_.size() > tuning_.max_objects * 3 / 4; ++i) {
    cache_.DropExtents(idle[i].second->first);
    objects_.erase(idle[i].second);
  }
}

void ReadEngine::ForgetObject(const ObjectId& object) {
  std::vector<std::shared_ptr<const Chunk>> evicted;  // released after mu_
  MutexLock lock(mu_);
  EvictedChunks keep_evicted(cache_, evicted);
  read_order_.erase(object);
  std::erase_if(read_order_, [&](const auto& entry) { return entry.second.id() == object; });
  for (auto& [id, st] : objects_) {
    if (st.successor && st.successor->id() == object) st.successor.reset();
  }
  auto it = objects_.find(object);
  if (it == objects_.end() || !Unused(it->second)) return;
  cache_.DropExtents(object);
  objects_.erase(it);
}

void ReadEngine::SweepStarted(const ObjectState& state) { swept_.insert(state.info.id()); }

uint64_t ReadEngine::SweepsLeft() {
  uint64_t left = 0;
  for (auto it = swept_.begin(); it != swept_.end();) {
    auto st = objects_.find(*it);
    if (st == objects_.end() || !st->second.sweep) {
      it = swept_.erase(it);
      continue;
    }
    const ObjectState& s = st->second;
    if (s.plan != nullptr && s.sweep_next < s.plan->size()) left += s.info.size - s.plan->Chunk(s.sweep_next).offset;
    ++it;
  }
  return left;
}

void ReadEngine::ReadTogetherWhole(ObjectState& state) {
  spdlog::debug("{}: its readers together read it whole: prefetching it whole in storage order", state.info.name);
  state.sweep = true;
  state.sweep_process = 0;  // for every reader of it
  SweepStarted(state);
  // The same readers read the files after it in their checkpoint as they
  // read this one; the slice windows their readers' sweeps queued for any of
  // them are not fetched on their own: the chunks that hold them come whole.
  std::set<ObjectId> files;
  for (ObjectState* st = &state; st != nullptr && files.insert(st->info.id()).second;
       st = st->successor ? &StateOf(*st->successor) : nullptr) {
    st->together.Inherit();
    st->slice_sweeps.clear();
    st->pending_sweeps.clear();
  }
  uint64_t withdrawn = 0;
  for (FetchJob& job :
       scheduler_.Withdraw([&](const FetchJob& j) { return j.slice >= 0 && files.contains(j.object); })) {
    const ChunkCache::Entry* entry = cache_.Find(job.extent);
    if (entry != nullptr && !entry->waiters.empty()) {
      scheduler_.Push(std::move(job), /*prefetch=*/false);
      continue;
    }
    --objects_.at(job.object).jobs;
    if (entry != nullptr) cache_.Fail(job.extent);
    withdrawn += job.range.length;
  }
  if (withdrawn > 0) spdlog::debug("{} KiB of queued slice windows not fetched on their own", withdrawn >> 10);
}

void ReadEngine::DropSweeps(int pattern_id) {
  for (auto& [object, st] : objects_) {
    st.slice_sweeps.erase(pattern_id);
    std::erase(st.pending_sweeps, pattern_id);
  }
  // Its windows still queued are not fetched: the pattern that replaced it
  // sweeps its own. None has a read waiting (a read coming to wait for a
  // queued prefetch promotes it to demand, which Withdraw leaves); one that
  // had would go back to the queue as demand rather than fail that read.
  uint64_t withdrawn = 0;
  for (FetchJob& job : scheduler_.Withdraw([&](const FetchJob& j) { return j.slice == pattern_id; })) {
    const ChunkCache::Entry* entry = cache_.Find(job.extent);
    if (entry != nullptr && !entry->waiters.empty()) {
      scheduler_.Push(std::move(job), /*prefetch=*/false);
      continue;
    }
    ObjectState& st = objects_.at(job.object);
    --st.jobs;
    if (job.sweep) --st.sweep_in_flight;
    if (entry != nullptr) cache_.Fail(job.extent);
    withdrawn += job.range.length;
  }
  if (withdrawn > 0) spdlog::debug("{} KiB of queued windows of a dropped pattern not fetched", withdrawn >> 10);
}

ReadEngine::StateSizes ReadEngine::Sizes() {
  MutexLock lock(mu_);
  StateSizes sizes{.objects = objects_.size(), .readers = readers_.size()};
  for (const auto& [object, st] : objects_) {
    sizes.extents += st.extents->size();
    sizes.slice_sweeps += st.slice_sweeps.size();
    sizes.touches += st.access.trail.touches.size();
  }
  for (const auto& [reader, r] : readers_) sizes.touches += r.access.trail.touches.size();
  return sizes;
}

bool ReadEngine::Idle() { return scheduler_.Idle(); }

std::shared_ptr<const ChunkPlan> ReadEngine::PlanOf(const ObjectId& object) {
  MutexLock lock(mu_);
  auto it = objects_.find(object);
  return it == objects_.end() ? nullptr : it->second.plan;
}

std::vector<SlicePattern> ReadEngine::SlicePatterns() {
  MutexLock lock(mu_);
  std::vector<SlicePattern> out;
  for (const AccessModel::ActivePattern& p : model_.patterns()) out.push_back(p.learned.pattern);
  return out;
}

void ReadEngine::SetReadOrder(const std::vector<ObjectInfo>& objects) {
  MutexLock lock(mu_);
  for (size_t i = 0; i + 1 < objects.size(); ++i) {
    read_order_[objects[i].id()] = objects[i + 1];
    auto it = objects_.find(objects[i].id());
    if (it != objects_.end()) it->second.successor = objects[i + 1];
  }
}

void ReadEngine::Read(const ObjectInfo& object, uint64_t offset, size_t size, ReadDone done, ReadHints hints) {
  if (trace_ != nullptr) {
    trace_->Record(TracedRead{.reader = hints.reader.value, .process = hints.reader.process,
                              .thread = hints.reader.thread, .offset = offset,
                              .length = size, .kernel = hints.prefetch, .delivered = hints.delivered,
                              .within = hints.within, .object = object.name});
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
    const AccessModel::ActivePattern* pattern = nullptr;
    uint64_t copy_end = UINT64_MAX;  // where the copy this read is part of ends, if known
    // The kernel reading bytes it was given has dropped them.
    if (op->hints.prefetch && !op->hints.within) state.given.Dropped(op->range);
    const bool kernel_read = op->hints.prefetch && !op->hints.within && !plan.tensors().empty();
    AccessState* access = &state.access;
    AccessModel::ReaderClock* reader = &anonymous_;
    SliceLearner* learner = &learner_;
    uint64_t file_readahead = 0;  // the reader's file's (0: the mount's now, for the reads of no reader)
    if (op->hints.reader.value != 0) {
      ReaderState& r = ReaderOf(op->hints.reader, state);
      access = &r.access;
      reader = &r.clock;
      learner = &r.learner;
      file_readahead = r.file_readahead;
    }
    if (kernel_read) {
      AccessModel::Answer answer = model_.Classify(
          plan, state.info.name,
          AccessModel::Reader{access->trail, *reader, *learner, op->hints.reader.value, file_readahead,
                              op->hints.reader.process},
          op->range);
      mode = answer.mode;
      pattern = answer.pattern;
      copy_end = answer.copy_end;
      for (const AccessModel::PlannerCall& call : answer.calls) {
        switch (call.kind) {
          case AccessModel::PlannerCall::Kind::kWholeTensor:
            planner_.ContinueTensor(state, call.tensor);
            break;
          case AccessModel::PlannerCall::Kind::kCopyGap:
            planner_.PrefetchPieces(state, call.range);
            break;
          case AccessModel::PlannerCall::Kind::kPatternDropped:
            DropSweeps(call.pattern_id);
            break;
        }
      }
    }
    if (kernel_read && op->hints.reader.value != 0) {
      ReaderState& r = readers_.at(op->hints.reader);
      if (mode == Mode::kSlice || mode == Mode::kNearSlice) {
        r.clock.presumed_whole = false;
      } else if (r.clock.presumed_whole && mode != Mode::kWhole) {
        mode = Mode::kWhole;
      } else if (mode == Mode::kUnknown && r.process != 0 &&
                 readahead_.KindOf(r.process) == ReadaheadPolicy::Kind::kWhole) {
        // Its process's readers read whole tensors now: so does this one, most
        // likely (a loader's thread, begun on its tensor before the first of
        // them was seen copying one).
        mode = Mode::kWhole;
      }
      // A read near a pattern's window is that pattern's reader too (the
      // kernel reading around its slice): its sweep starts now, and its
      // process's next files get the slice readahead.
      if (reader->reads < reader->whole_until) {
        SetKind(r, ReadaheadPolicy::Kind::kWhole);
      } else if (mode == Mode::kSlice || mode == Mode::kNearSlice) {
        if (pattern != nullptr) LearnSliceSize(state, pattern->learned.pattern, r.process);
        SetKind(r, ReadaheadPolicy::Kind::kSlice);
      }
    }
    // Readers that together read the object whole are served as one whole-
    // tensor loader is (read_together.h): each read's chunk whole, the object
    // in storage order ahead of them, no reader's slice windows on their own.
    if (kernel_read && op->hints.reader.value != 0) {
      state.together.Note(plan, op->range,
                          {op->hints.reader.value, op->hints.reader.process, op->hints.reader.thread}, tuning_);
    }
    if (kernel_read && state.together.TakeNew()) ReadTogetherWhole(state);
    if (kernel_read && state.together.whole() && mode != Mode::kWholeEnd) {
      mode = Mode::kWhole;
      pattern = nullptr;
    }
    const bool spans_tensors = plan.TensorAt(op->range.offset) != plan.TensorAt(op->range.end() - 1);
    // A reader not known yet is read no further ahead than its run likely
    // ends (a copy's end, or its likely slice's), by its read's own request
    // (WantOf) as by its prefetch (RampWithinTensor).
    // Where the runs of the tensor's other readers tell that its own most
    // likely ends (ReadTogether::SplitEnd), it is read up to there at once.
    uint64_t run_end = copy_end;
    bool run_meets_next = false;
    if (kernel_read && mode == Mode::kUnknown && !spans_tensors) {
      run_end = std::min(run_end, planner_.RunEnd(plan, *access, op->range, op->hints.reader.value != 0,
                                                  file_readahead));
      const uint64_t split_end = state.together.SplitEnd(plan, op->range);
      run_meets_next = split_end <= run_end;
      run_end = std::min(run_end, split_end);
    }
    if (kernel_read && options_.shard_world > 1 && !state.slice_sweeps.contains(model_.patterns().front().id)) {
      // Before its windows are swept: -o shard's slices are the mount's.
      LearnSliceSize(state, model_.patterns().front().learned.pattern, op->hints.reader.process);
      // -o shard: from the first read on.
      planner_.StartSliceSweep(state, model_.patterns().front().id, 0, file_readahead);
    }
    bool waited_on_prefetch = false;  // the read needs a prefetched chunk still coming
    // Adds extent `id` to the read: cached (or `held` by the read), or joined.
    auto add = [&](ExtentId id, std::shared_ptr<const Chunk> held) REQUIRES(mu_) {
      const size_t slot = op->chunks.size();
      op->chunks.emplace_back();
      op->extents.push_back(id);
      ChunkCache::Entry* entry = cache_.Find(id);
      if (held != nullptr || (entry != nullptr && entry->chunk != nullptr)) {
        op->chunks[slot] = held != nullptr ? std::move(held) : entry->chunk;
        if (entry != nullptr) cache_.Touch(id);
        metrics_.cache_hits.fetch_add(1, std::memory_order_relaxed);
        return;
      }
      if (entry == nullptr) return;  // neither cached nor loading (a bug): FinishRead reports the gap
      metrics_.cache_misses.fetch_add(1, std::memory_order_relaxed);
      if (entry->prefetched) {
        waited_on_prefetch = true;
        // A reader waits for a queued prefetch: give it demand priority.
        if (entry->waiters.empty()) scheduler_.Promote([&](const FetchJob& j) { return !j.head && j.extent == id; });
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
    op->pending.store(1);  // held until every extent is added
    for (size_t i = first; i <= last; ++i) {
      const ByteRange chunk = plan.Chunk(i);
      const uint64_t b = std::max(op->range.offset, chunk.offset);
      const uint64_t e = std::min(op->range.end(), chunk.end());
      const ByteRange part{b, e - b};
      const ExtentMap::Extent* cached = state.extents->Exactly(chunk);
      if (cached != nullptr && !op->hints.within) {  // the chunk, cached or coming whole
        add(cached->id, nullptr);
        continue;
      }
      const FetchPlanner::Want want =
          planner_.WantOf(state, chunk, part,
                          FetchPlanner::ReadKind{mode, pattern, run_end, spans_tensors, op->hints.within, file_readahead});
      for (auto& [id, held] : planner_.Cover(state, want, part)) add(id, std::move(held));
    }
    if (kernel_read && (mode == Mode::kSlice || mode == Mode::kNearSlice)) {
      planner_.TopUpSliceSweep(state, pattern->id, static_cast<size_t>(std::max(0, plan.TensorAt(op->range.offset))),
                               file_readahead);
    } else if (kernel_read && mode == Mode::kUnknown) {
      if (!spans_tensors) {
        planner_.RampWithinTensor(state, *access, op->range, run_end, run_meets_next);
      }
    } else if (op->hints.prefetch && mode != Mode::kAround && mode != Mode::kWholeEnd) {
      planner_.UpdateStreams(state, *access, first, last, op->range.end(), waited_on_prefetch);
    }
    if (op->pending.fetch_sub(1) != 1) return;  // the last arriving entry finishes it
  }
  FinishRead(op);
}

void ReadEngine::Prefetch(const ObjectInfo& object, ByteRange range, std::optional<ByteRange> within) {
  if (trace_ != nullptr) {
    trace_->Record(TracedRead{.offset = range.offset, .length = range.length, .kernel = false, .prefetch_call = true,
                              .delivered = false, .within = within, .object = object.name});
  }
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
  planner_.PrefetchRange(state, range, within);
}

bool ReadEngine::HasDerived(const ChunkKey& key) {
  MutexLock lock(mu_);
  return cache_.FindDerived(key).has_value();
}

void ReadEngine::ReadDerived(const ChunkKey& key, uint64_t size, const DeriveFn& derive, ChunkWaiter done) {
  std::shared_ptr<const Chunk> cached;
  ExtentId id = 0;  // of the entry this call computes
  bool unmounting = false;
  std::vector<std::shared_ptr<const Chunk>> evicted;  // released after mu_
  {
    MutexLock lock(mu_);
    EvictedChunks keep_evicted(cache_, evicted);
    unmounting = stopping_;
    const std::optional<ExtentId> found = unmounting ? std::nullopt : cache_.FindDerived(key);
    ChunkCache::Entry* entry = found ? cache_.Find(*found) : nullptr;
    if (unmounting) {
      // `done` is called below, without mu_ (callbacks never run under it).
    } else if (entry != nullptr && entry->chunk != nullptr) {
      cache_.Touch(*found);
      metrics_.cache_hits.fetch_add(1, std::memory_order_relaxed);
      cached = entry->chunk;
    } else {
      metrics_.cache_misses.fetch_add(1, std::memory_order_relaxed);
      if (entry != nullptr) {  // being computed: wait for it
        entry->waiters.push_back(std::move(done));
        return;
      }
      cache_.Reserve(size, ChunkCache::Eviction::kAny);
      id = cache_.InsertDerived(key, size);
      cache_.Find(id)->waiters.push_back(std::move(done));
    }
  }
  if (unmounting) return done(UnavailableError("tensorfs is unmounting"));
  if (cached != nullptr) return done(cached);
  derive([this, key, id](StatusOr<std::shared_ptr<Chunk>> chunk) {
    std::vector<ChunkWaiter> waiters;
    {
      MutexLock lock(mu_);
      std::optional<std::vector<ChunkWaiter>> taken = chunk.ok() ? cache_.Publish(id, *chunk) : cache_.Fail(id);
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
      const std::optional<ByteRange> consumed = cache_.MarkDelivered(op->extents[i], parts[i]);
      if (consumed && state != objects_.end()) state->second.given.Add(*consumed);
    }
  }
  if (op->hints.prefetch) {  // a kernel read; views count their own reads
    metrics_.read_requests.fetch_add(1, std::memory_order_relaxed);
    metrics_.bytes_served.fetch_add(op->range.length, std::memory_order_relaxed);
  }
  result.owner = std::make_shared<std::vector<std::shared_ptr<const Chunk>>>(std::move(op->chunks));
  op->done(std::move(result));
}

}  // namespace tensorfs
