// What ReadEngine's fetch workers run (see fetch_scheduler.h for the queues
// and the workers): range requests against the store (never under mu_), the
// head fetch that builds an object's plan, and the publishing of each
// finished fetch to the cache and to the reads waiting on it.
#include "core/engine/read_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/safetensors/header.h"

namespace tensorfs {

void ReadEngine::Enqueue(ObjectState& state, FetchJob job, bool prefetch) {
  ++state.jobs;
  scheduler_.Push(std::move(job), prefetch);
}

void ReadEngine::StartHead(ObjectState& state, bool prefetch) {
  if (state.head_requested) {
    if (!prefetch) {  // a reader waits: a queued head prefetch becomes demand
      scheduler_.Promote([&](const FetchJob& j) { return j.head && j.object == state.info.id(); });
    }
    return;
  }
  state.head_requested = true;
  Enqueue(state, FetchJob{.object = state.info.id(), .range = {0, state.info.size}, .head = true}, prefetch);
}

void ReadEngine::PrefetchHead(const ObjectInfo& object) {
  if (object.size == 0) return;
  MutexLock lock(mu_);
  PruneObjects();
  ObjectState& state = StateOf(object);
  if (state.plan == nullptr) StartHead(state, /*prefetch=*/true);
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

uint64_t ReadEngine::RunJob(const FetchJob& job) {
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
  const uint64_t delivered = status.ok() ? chunk->range().length : 0;
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
    if (job.head) {
      plan_waiters = std::move(state.plan_waiters);
      state.plan_waiters.clear();
      if (status.ok()) {
        state.plan = std::move(plan);
        const ByteRange head = chunk->range();
        if (!state.extents->Overlaps(head)) {
          cache_.Reserve(head.length, ChunkCache::Eviction::kAny);
          const ExtentId id = cache_.InsertLoading(*state.extents, head, /*prefetched=*/true);
          cache_.Publish(id, std::move(chunk));
        }
        if (state.continue_bytes > 0 && !stopping_) {
          planner_.ContinueInto(state, state.continue_bytes, state.continue_process);
        }
        state.continue_bytes = 0;
        if (!stopping_) {
          for (const auto& [range, within] : state.pending_prefetch) planner_.PrefetchRange(state, range, within);
          if (!state.plan->tensors().empty()) {
            for (int id : state.pending_sweeps) planner_.StartSliceSweep(state, id, 0);
          }
        }
        state.pending_prefetch.clear();
        state.pending_sweeps.clear();
      } else {
        state.head_requested = false;  // the next read tries again
      }
    } else {
      std::optional<std::vector<ChunkWaiter>> taken =
          status.ok() ? cache_.Publish(job.extent, std::move(chunk)) : cache_.Fail(job.extent);
      if (taken) {
        waiters = std::move(*taken);
      } else {
        Inconsistent(job.object.name + ": a fetch of " + std::to_string(job.range.offset) + "+" +
                     std::to_string(job.range.length) + " finished with no loading entry for it");
      }
      if (job.sweep) --state.sweep_in_flight;
      if (state.sweep && !stopping_) planner_.TopUpSweep(state);
      if (job.slice >= 0) {
        auto it = state.slice_sweeps.find(job.slice);
        if (it != state.slice_sweeps.end()) {
          it->second.in_flight -= std::min(it->second.in_flight, job.range.length);
          if (!stopping_) planner_.TopUpSliceSweep(state, job.slice, it->second.start);
        }
      }
    }
  }
  for (auto& w : waiters) w(result);
  for (auto& w : plan_waiters) w(status);
  return delivered;
}

}  // namespace tensorfs
