#include "core/engine/read_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "core/safetensors/header.h"

namespace tensorfs {
namespace {

constexpr size_t kMaxStreams = 8;
// Readers that jump to this many new places in one object are reading all of
// it in their own order (a loader going tensor by tensor in any order): from
// then on the object is prefetched whole, in storage order.
constexpr int kSweepAfterJumps = 3;
// Kernel readahead requests arrive slightly out of order; a read this many
// chunks behind a stream's start still belongs to it.
constexpr size_t kBackTolerance = 2;

std::string Mib(uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

}  // namespace

Status EngineOptions::Validate() const {
  if (chunk_size < (64u << 10) || chunk_size > (1u << 30)) {
    return InvalidArgumentError("chunk_size must lie between 64 KiB and 1 GiB");
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
  size_t first = 0;  // plan index of chunks[0]
  std::vector<std::shared_ptr<const Chunk>> chunks;
  std::vector<ChunkKey> keys;  // of chunks[i]: the chunk's own, or an edge piece's
  std::atomic<int> pending{0};
  std::atomic<bool> failed{false};
  Status error;  // written once, by the waiter that sets `failed`
  ReadDone done;
  ReadHints hints;
};

ReadEngine::ReadEngine(ObjectStore& store, const EngineOptions& options, Metrics& metrics)
    : store_(store), options_(options), metrics_(metrics), cache_(options.cache_size, metrics) {
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
          auto w = cache_.Fail(job.key);
          std::move(w.begin(), w.end(), std::back_inserter(waiters));
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
  if (inserted) it->second.info = object;
  return it->second;
}

std::shared_ptr<const ChunkPlan> ReadEngine::PlanOf(const ObjectId& object) {
  MutexLock lock(mu_);
  auto it = objects_.find(object);
  return it == objects_.end() ? nullptr : it->second.plan;
}

void ReadEngine::Enqueue(Job job, bool prefetch) {
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
  Enqueue(Job{.object = state.info.id(), .key = {state.info.id(), 0}, .range = {0, state.info.size}, .head = true},
          prefetch);
}

void ReadEngine::PrefetchHead(const ObjectInfo& object) {
  if (object.size == 0) return;
  MutexLock lock(mu_);
  ObjectState& state = StateOf(object);
  if (state.plan == nullptr) StartHead(state, /*prefetch=*/true);
}

bool ReadEngine::Request(ObjectState& state, size_t index, bool prefetch, bool sweep) {
  return RequestPiece(state, ChunkKey{state.info.id(), index}, state.plan->Chunk(index), prefetch, sweep);
}

bool ReadEngine::RequestPiece(ObjectState& state, const ChunkKey& key, ByteRange range, bool prefetch, bool sweep) {
  if (cache_.Find(key) != nullptr) return true;
  if (!cache_.Reserve(range.length, /*evict_unconsumed=*/!prefetch) && prefetch) return false;
  cache_.InsertLoading(key, range, prefetch);
  if (prefetch) metrics_.prefetches.fetch_add(1, std::memory_order_relaxed);
  Enqueue(Job{.object = state.info.id(), .key = key, .range = range, .sweep = sweep}, prefetch);
  return true;
}

ChunkKey ReadEngine::KeyWithin(ObjectState& state, size_t index, const std::optional<ByteRange>& within,
                               ByteRange* range) {
  ChunkKey key{state.info.id(), index};
  *range = state.plan->Chunk(index);
  if (!within || (range->offset >= within->offset && range->end() <= within->end()) ||
      cache_.Find(key) != nullptr) {
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

size_t ReadEngine::WindowChunks(const ChunkPlan& plan, size_t from) const {
  size_t n = 0;
  uint64_t bytes = 0;
  for (size_t i = from; i < plan.size() && bytes < options_.prefetch_window; ++i, ++n) bytes += plan.Chunk(i).length;
  return n;
}

void ReadEngine::UpdateStreams(ObjectState& state, size_t first, size_t last, uint64_t read_end) {
  const ChunkPlan& plan = *state.plan;
  // Reading the header (to list tensors, say) calls for no tensor data.
  if (read_end <= plan.data_start()) return;
  ++state.clock;
  Stream* s = nullptr;
  for (Stream& st : state.streams) {
    if (first + kBackTolerance >= st.start && first <= st.frontier + 1) {
      s = &st;
      break;
    }
  }
  if (s != nullptr) {
    s->last = std::max(s->last, last);
    s->frontier = std::max(s->frontier, last);
    ++s->reads;
  } else {
    if (!state.streams.empty()) ++state.far_jumps;
    Stream fresh{.start = first, .last = last, .frontier = last, .reads = 1};
    if (state.streams.size() < kMaxStreams) {
      state.streams.push_back(fresh);
      s = &state.streams.back();
    } else {
      s = &*std::min_element(state.streams.begin(), state.streams.end(),
                             [](const Stream& a, const Stream& b) { return a.age < b.age; });
      *s = fresh;
    }
    if (state.far_jumps >= kSweepAfterJumps && !state.sweep) {
      state.sweep = true;
      spdlog::debug("{}: read out of order; prefetching it whole in storage order", state.info.name);
    }
  }
  s->age = state.clock;

  // The rest of the tensor being read, and for a reader moving on (not one that
  // just jumped here), the window ahead in storage order. A first read that
  // stays in the head chunk is most likely the kernel reading ahead of a header
  // read: it calls for nothing more yet.
  const bool head_only = last == 0 && state.streams.size() == 1 && s->reads == 1;
  size_t target = head_only ? s->frontier : std::max(s->frontier, plan.TensorEnd(last));
  if (s->reads >= 2) target = std::max(target, last + WindowChunks(plan, last + 1));
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
  std::erase_if(state.streams, [&](const Stream& st) {
    return &st != s && st.start + kBackTolerance >= merged.start && st.start <= merged.frontier + 1 &&
           st.frontier <= std::max(merged.frontier, st.frontier);
  });
  if (state.sweep) TopUpSweep(state);
}

void ReadEngine::SetReadOrder(const std::vector<ObjectInfo>& objects) {
  MutexLock lock(mu_);
  for (size_t i = 0; i + 1 < objects.size(); ++i) StateOf(objects[i]).successor = objects[i + 1];
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
  // The stream the predecessor's reader will continue in.
  auto it = std::find_if(state.streams.begin(), state.streams.end(), [](const Stream& st) { return st.start == 0; });
  if (it == state.streams.end()) {
    if (state.streams.size() >= kMaxStreams) return;
    state.streams.push_back(Stream{.start = 0, .last = 0, .frontier = 0, .reads = 2});
    it = std::prev(state.streams.end());
  }
  it->age = ++state.clock;
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
      ++state.sweep_in_flight;
    }
    ++state.sweep_next;
  }
  // All of this object is on its way: the next file of the checkpoint can start.
  if (state.sweep_next >= plan.size()) {
    ContinueIntoSuccessor(state, static_cast<uint64_t>(state.sweep_in_flight) * options_.chunk_size);
  }
}

void ReadEngine::Read(const ObjectInfo& object, uint64_t offset, size_t size, ReadDone done, ReadHints hints) {
  if (offset >= object.size || size == 0) return done(ReadResult{});
  auto op = std::make_shared<ReadOp>();
  op->object = object.id();
  op->range = ByteRange{offset, std::min<uint64_t>(size, object.size - offset)};
  op->done = std::move(done);
  op->hints = hints;
  {
    MutexLock lock(mu_);
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
    size_t first = plan.ChunkAt(op->range.offset);
    size_t last = plan.ChunkAt(op->range.end() - 1);
    op->first = first;
    op->chunks.resize(last - first + 1);
    op->pending.store(static_cast<int>(op->chunks.size()));
    op->keys.reserve(last - first + 1);
    for (size_t i = first; i <= last; ++i) {
      ByteRange piece;
      ChunkKey key = KeyWithin(state, i, op->hints.within, &piece);
      op->keys.push_back(key);
      ChunkCache::Entry* entry = cache_.Find(key);
      if (entry != nullptr && entry->chunk != nullptr) {
        op->chunks[i - first] = entry->chunk;
        cache_.Touch(key);
        op->pending.fetch_sub(1);
        metrics_.cache_hits.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      metrics_.cache_misses.fetch_add(1, std::memory_order_relaxed);
      if (entry == nullptr) {
        RequestPiece(state, key, piece, /*prefetch=*/false);
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
      entry->waiters.push_back([this, op, slot = i - first](const StatusOr<std::shared_ptr<const Chunk>>& chunk) {
        if (!chunk.ok()) {
          if (!op->failed.exchange(true)) op->error = chunk.status();
        } else {
          op->chunks[slot] = *chunk;
        }
        if (op->pending.fetch_sub(1) == 1) FinishRead(op);
      });
    }
    if (op->hints.prefetch) UpdateStreams(state, first, last, op->range.end());
    if (op->pending.load() != 0) return;  // the last arriving chunk finishes it
  }
  FinishRead(op);
}

void ReadEngine::Prefetch(const ObjectInfo& object, ByteRange range, std::optional<ByteRange> within) {
  if (range.length == 0 || range.offset >= object.size) return;
  MutexLock lock(mu_);
  if (stopping_) return;
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
    ByteRange piece;
    ChunkKey key = KeyWithin(state, i, within, &piece);
    if (!RequestPiece(state, key, piece, /*prefetch=*/true)) return;
  }
}

void ReadEngine::ReadDerived(const ChunkKey& key, uint64_t size, const DeriveFn& derive, ChunkWaiter done) {
  std::shared_ptr<const Chunk> cached;
  {
    MutexLock lock(mu_);
    if (stopping_) return done(UnavailableError("tensorfs is unmounting"));
    ChunkCache::Entry* entry = cache_.Find(key);
    if (entry != nullptr && entry->chunk != nullptr) {
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
      cache_.InsertLoading(key, ByteRange{0, size}, /*prefetched=*/false).waiters.push_back(std::move(done));
    }
  }
  if (cached != nullptr) return done(cached);
  derive([this, key](StatusOr<std::shared_ptr<Chunk>> chunk) {
    std::vector<ChunkWaiter> waiters;
    {
      MutexLock lock(mu_);
      waiters = chunk.ok() ? cache_.Publish(key, *chunk) : cache_.Fail(key);
    }
    const StatusOr<std::shared_ptr<const Chunk>> result =
        chunk.ok() ? StatusOr<std::shared_ptr<const Chunk>>(std::shared_ptr<const Chunk>(*chunk))
                   : StatusOr<std::shared_ptr<const Chunk>>(chunk.status());
    for (auto& w : waiters) w(result);
  });
}

void ReadEngine::FinishRead(const std::shared_ptr<ReadOp>& op) {
  if (op->failed.load()) return op->done(op->error);
  ReadResult result;
  std::vector<ByteRange> parts;
  for (const auto& chunk : op->chunks) {
    uint64_t begin = std::max(op->range.offset, chunk->range().offset);
    uint64_t end = std::min(op->range.end(), chunk->range().end());
    parts.push_back(ByteRange{begin, end - begin});
    result.pieces.push_back(chunk->Slice(parts.back()));
  }
  if (op->hints.delivered) {
    MutexLock lock(mu_);
    for (size_t i = 0; i < parts.size(); ++i) cache_.MarkDelivered(op->keys[i], parts[i]);
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
    }
    RunJob(job);
  }
}

StatusOr<std::shared_ptr<Chunk>> ReadEngine::FetchHead(const ObjectInfo& object,
                                                        std::shared_ptr<const ChunkPlan>* plan) {
  const bool safetensors = object.name.ends_with(".safetensors");
  uint64_t head = std::min(object.size, safetensors ? options_.head_size : options_.chunk_size);
  auto chunk = std::make_shared<Chunk>(ByteRange{0, head});
  RETURN_IF_ERROR(store_.Read(object.id(), 0, chunk->writable()));
  metrics_.bytes_fetched.fetch_add(head, std::memory_order_relaxed);
  *plan = std::make_shared<const ChunkPlan>(ChunkPlan::Aligned(object.size, head, options_.chunk_size));
  if (!safetensors) return chunk;

  // A malformed header leaves the aligned plan: the file stays readable as is.
  StatusOr<uint64_t> n = ParseHeaderLength(object.name, chunk->bytes(), object.size);
  if (!n.ok()) return chunk;
  const uint64_t header_end = kHeaderLengthBytes + *n;
  if (header_end > head) {  // a header longer than the first request: fetch the rest
    auto whole = std::make_shared<Chunk>(ByteRange{0, header_end});
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
    chunk = std::make_shared<Chunk>(job.range);
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
  {
    MutexLock lock(mu_);
    ObjectState& state = objects_.at(job.object);
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
        }
        state.pending_prefetch.clear();
      } else {
        state.head_requested = false;  // the next read tries again
      }
    } else {
      waiters = status.ok() ? cache_.Publish(job.key, std::move(chunk)) : cache_.Fail(job.key);
      if (job.sweep) --state.sweep_in_flight;
      if (state.sweep && !stopping_) TopUpSweep(state);
    }
  }
  for (auto& w : waiters) w(result);
  for (auto& w : plan_waiters) w(status);
}

}  // namespace tensorfs
