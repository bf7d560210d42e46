// ReadEngine's fetch planner: which ranges to request for what the access model
// says, as chunks, pieces of chunks (the gaps between cached pieces) or edge
// pieces of a view's range; the streams of sequential readers and their
// windows, the whole-object sweep, slice readers' window sweeps, the start of
// the next shard. Reads the cache and the per-object state under mu_; hands
// requests to the fetch scheduler (Enqueue).
#include "core/engine/read_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace tensorfs {

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

void ReadEngine::Plan(ObjectState& state, const std::vector<PlannerCall>& calls) {
  for (const PlannerCall& call : calls) {
    switch (call.kind) {
      case PlannerCall::Kind::kWholeTensor:
        ContinueTensor(state, call.tensor);
        break;
      case PlannerCall::Kind::kCopyGap:
        PrefetchPieces(state, call.range);
        break;
      case PlannerCall::Kind::kPatternDropped:
        DropSweeps(call.pattern_id);
        break;
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

}  // namespace tensorfs
