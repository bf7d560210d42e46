// FetchPlanner (see fetch_planner.h): requests for chunks and for the gaps
// between extents, the streams of sequential readers and their windows, the
// whole-object sweep, slice readers' window sweeps, the start of the next
// shard.
#include "core/engine/fetch_planner.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace tensorfs {

bool FetchPlanner::Request(ObjectState& state, size_t index, bool prefetch, bool sweep) {
  const ByteRange range = state.plan->Chunk(index);
  if (prefetch && state.given.Holds(range)) return true;
  if (state.extents->Holds(range)) return true;
  uint64_t in_pieces = 0;
  for (const ExtentMap::Extent& piece : state.extents->Overlapping(range)) in_pieces += piece.range.length;
  // Part of it came as pieces: fetch only the rest (not counted as a sweep's).
  // Unless that part is small (a reader's first reads, before it was known to
  // read whole tensors): the whole chunk then comes in one request rather
  // than in two or three around the pieces, a few of its bytes twice, and
  // replaces them.
  // Nor, for a prefetch, what the kernel holds of it already (given whole).
  bool given_part = false;
  if (prefetch && state.together.whole()) {
    const std::vector<ByteRange> not_given = state.given.NotGiven(range);
    given_part = not_given.size() != 1 || not_given.front().offset != range.offset ||
                 not_given.front().length != range.length;
  }
  if ((in_pieces > 0 && in_pieces * tuning_.small_pieces > range.length) || given_part) {
    return RequestGaps(state, range, prefetch, range.length) >= 0;
  }
  return RequestExtent(state, range, prefetch, sweep) != 0;
}

ExtentId FetchPlanner::RequestExtent(ObjectState& state, ByteRange range, bool prefetch, bool sweep, int slice) {
  if (!cache_.Reserve(range.length, prefetch ? ChunkCache::Eviction::kConsumed : ChunkCache::Eviction::kNotInUse) &&
      prefetch) {
    return 0;
  }
  const ExtentId id = cache_.InsertLoading(*state.extents, range, prefetch);
  if (prefetch) metrics_.prefetches.fetch_add(1, std::memory_order_relaxed);
  if (sweep) ++state.sweep_in_flight;
  if (slice >= 0) state.slice_sweeps[slice].in_flight += range.length;
  host_.Enqueue(state,
                FetchJob{.object = state.info.id(), .extent = id, .range = range, .sweep = sweep, .slice = slice},
                prefetch);
  return id;
}

int64_t FetchPlanner::RequestGaps(ObjectState& state, ByteRange range, bool prefetch, uint64_t max_piece, int slice,
                                std::vector<ExtentMap::Extent>* tiles, std::optional<ByteRange> needed) {
  std::vector<ExtentMap::Extent> found;
  if (tiles == nullptr) found = state.extents->Overlapping(range);
  std::vector<ExtentMap::Extent>& known = tiles == nullptr ? found : *tiles;
  const size_t n = known.size();  // the extents there before; new ones are appended
  int64_t requested = 0;
  auto request_part = [&](uint64_t begin, uint64_t end) {
    for (uint64_t at = begin; at < end;) {
      const ByteRange piece{at, std::min(end - at, std::max<uint64_t>(max_piece, tuning_.page))};
      const ExtentId id = RequestExtent(state, piece, prefetch, /*sweep=*/false, slice);
      if (id == 0) return false;
      known.push_back(ExtentMap::Extent{piece, id});
      requested += static_cast<int64_t>(piece.length);
      at = piece.end();
    }
    return true;
  };
  // What the kernel was given whole it holds itself (a piece read, consumed
  // and evicted, is no extent any more): a prefetch leaves it out, and so does
  // a read's request past the bytes the read itself needs.
  auto request = [&](uint64_t first, uint64_t last) {
    if ((!prefetch && !needed) || !state.together.whole()) return request_part(first, last);
    std::vector<ByteRange> parts = state.given.NotGiven(ByteRange{first, last - first});
    if (needed) {
      const uint64_t b = std::max(first, needed->offset);
      const uint64_t e = std::min(last, needed->end());
      if (b < e) {
        parts.push_back(ByteRange{b, e - b});
        std::sort(parts.begin(), parts.end(), [](const ByteRange& x, const ByteRange& y) { return x.offset < y.offset; });
        std::vector<ByteRange> merged;
        for (const ByteRange& p : parts) {
          if (!merged.empty() && p.offset <= merged.back().end()) {
            merged.back().length = std::max(merged.back().end(), p.end()) - merged.back().offset;
          } else {
            merged.push_back(p);
          }
        }
        parts = std::move(merged);
      }
    }
    for (const ByteRange& p : parts) {
      if (!request_part(p.offset, p.end())) return false;
    }
    return true;
  };
  uint64_t cursor = range.offset;
  for (size_t i = 0; i < n; ++i) {
    const ByteRange piece = known[i].range;  // by value: request() appends to `known`
    if (piece.offset > cursor && !request(cursor, piece.offset)) return -1;
    cursor = std::max(cursor, piece.end());
  }
  if (cursor < range.end() && !request(cursor, range.end())) return -1;
  return requested;
}

FetchPlanner::Want FetchPlanner::WantOf(const ObjectState& state, ByteRange chunk, ByteRange part,
                                    const ReadKind& kind) const {
  // A view's reads the part inside its run of tensors; a chunk wanted whole
  // and not begun comes in one request. Else missing bytes come as pieces: a
  // whole reader's fill the chunk's gaps, a slice reader's its window, an
  // unknown reader's start at the read and run on a little (no further than
  // its run in the tensor likely ends: RunEnd), unless the read spans
  // tensors (the kernel reading around a page near a tensor's edge: what the
  // reader needs of the tensors beyond that edge is not known yet).
  const ChunkPlan& plan = *state.plan;
  const uint64_t b = part.offset;
  const uint64_t e = part.end();
  const bool whole = kind.mode == Mode::kWhole || kind.mode == Mode::kWholeEnd;
  if (kind.within) {
    const ByteRange inside = PartWithin(chunk, kind.within);
    return Want{inside, inside.length};
  }
  // Readers that read the object in no order (its sweep is on) while the
  // cache cannot hold what such readers will still read (see TopUpSweep):
  // the read's tensor, not the other tensors of its chunk, whose readers may
  // come at any time.
  if (whole && state.sweep && state.together.whole() && host_.SweepsLeft() > cache_.capacity()) {
    const int k = plan.TensorAt(b);
    if (k >= 0) {
      const TensorSpan& t = plan.tensors()[static_cast<size_t>(k)];
      const uint64_t tb = std::max(chunk.offset, std::min(b & ~(tuning_.page - 1), t.begin));
      const uint64_t te = std::min(chunk.end(), std::max(t.end, e));
      return Want{ByteRange{tb, te - tb}, options_.chunk_size};
    }
  }
  if (whole && !state.extents->Overlaps(chunk)) return Want{chunk, chunk.length};
  if (whole) return Want{chunk, options_.chunk_size};
  ByteRange want = part;
  if (kind.mode == Mode::kSlice) {
    // The windows the part falls in, within the chunk.
    for (int k = plan.TensorAt(b); k >= 0 && static_cast<size_t>(k) < plan.tensors().size() &&
                                   plan.tensors()[static_cast<size_t>(k)].begin < e;
         ++k) {
      const ByteRange w =
          model_.WindowOf(plan, kind.pattern->learned.pattern, static_cast<size_t>(k), kind.file_readahead);
      if (w.end() <= b || w.offset >= e) continue;
      const uint64_t wb = std::max(std::min(want.offset, w.offset), chunk.offset);
      const uint64_t we = std::min(std::max(want.end(), w.end()), chunk.end());
      want = ByteRange{wb, we - wb};
    }
  } else if (kind.mode == Mode::kNearSlice || kind.mode == Mode::kAround || kind.spans_tensors) {
    want = ByteRange{std::max(b & ~(tuning_.page - 1), chunk.offset), 0};
    want.length = std::min(chunk.end(), (e + tuning_.page - 1) & ~(tuning_.page - 1)) - want.offset;
  } else if (state.extents->Covers(part)) {
    // Cached or coming: the read calls for nothing now. Its run on ahead is
    // the prefetch's (RampWithinTensor), which grows with the reader's run;
    // bringing the next pages with each read would cut it into pieces.
    return Want{part, options_.chunk_size};
  } else {
    const uint64_t wb = b & ~(tuning_.page - 1);
    const uint64_t run_on = std::min(kind.run_end, std::max(wb, chunk.offset) + tuning_.first_piece);
    const uint64_t we = std::min(chunk.end(), std::max(e, run_on));
    want = ByteRange{std::max(wb, chunk.offset), 0};
    want.length = we - want.offset;
  }
  return Want{want, options_.chunk_size};
}

std::vector<std::pair<ExtentId, std::shared_ptr<const Chunk>>> FetchPlanner::Cover(ObjectState& state,
                                                                                   const Want& wanted, ByteRange part) {
  Want want = wanted;
  // More than the read's own bytes, where the cache has no room for them but
  // by evicting chunks readers are using (chunk_cache.h): the part of the
  // read's tensor in the chunk, else its own bytes only, the cache going over
  // its budget by them until the kernel takes them. (The rest of a chunk
  // holding other tensors is for their readers, who may come at any time.)
  auto missing = [&](ByteRange range) {
    uint64_t gaps = 0;
    uint64_t at = range.offset;
    for (const ExtentMap::Extent& x : state.extents->Overlapping(range)) {
      if (x.range.offset > at) gaps += x.range.offset - at;
      at = std::max(at, x.range.end());
    }
    return gaps + (at < range.end() ? range.end() - at : 0);
  };
  auto clip = [&](uint64_t b, uint64_t e) {
    b = std::max(want.range.offset, b);
    e = std::min(want.range.end(), e);
    return ByteRange{b, e > b ? e - b : 0};
  };
  const ByteRange own = clip(part.offset & ~(tuning_.page - 1), (part.end() + tuning_.page - 1) & ~(tuning_.page - 1));
  const int tensor = state.plan->TensorAt(part.offset);
  const ByteRange its_tensor =
      tensor < 0 ? own
                 : clip(std::min(own.offset, state.plan->tensors()[static_cast<size_t>(tensor)].begin),
                        std::max(own.end(), state.plan->tensors()[static_cast<size_t>(tensor)].end));
  for (const ByteRange& smaller : {its_tensor, own}) {
    if (!state.together.whole()) break;
    const uint64_t gaps = want.range.length > smaller.length ? missing(want.range) : 0;
    if (gaps == 0 || cache_.Reserve(gaps, ChunkCache::Eviction::kNotInUse) ||
        cache_.used() + gaps <= cache_.capacity() + options_.chunk_size) {
      break;
    }
    want.range = smaller;
  }
  // Requesting the gaps may evict ready extents this read needs: hold them first.
  std::vector<ExtentMap::Extent> tiles = state.extents->Overlapping(want.range);  // RequestGaps appends to it
  std::map<ExtentId, std::shared_ptr<const Chunk>> held;
  for (const ExtentMap::Extent& x : tiles) {
    if (const ChunkCache::Entry* entry = cache_.Find(x.id); entry != nullptr && entry->chunk != nullptr) {
      held[x.id] = entry->chunk;
    }
  }
  RequestGaps(state, want.range, /*prefetch=*/false, want.max_piece, -1, &tiles, part);
  std::sort(tiles.begin(), tiles.end(),
            [](const ExtentMap::Extent& x, const ExtentMap::Extent& y) { return x.range.offset < y.range.offset; });
  std::vector<std::pair<ExtentId, std::shared_ptr<const Chunk>>> cover;
  for (const ExtentMap::Extent& x : tiles) {
    if (x.range.end() <= part.offset || x.range.offset >= part.end()) continue;
    auto h = held.find(x.id);
    cover.emplace_back(x.id, h != held.end() ? std::move(h->second) : nullptr);
  }
  return cover;
}

ByteRange FetchPlanner::PartWithin(ByteRange chunk, const std::optional<ByteRange>& within) {
  // A chunk outside `within` altogether (a caller reading past the range it
  // named) is read whole: there is no edge of `within` in it.
  if (!within || (chunk.offset >= within->offset && chunk.end() <= within->end()) ||
      chunk.end() <= within->offset || chunk.offset >= within->end()) {
    return chunk;
  }
  const uint64_t begin = std::max(chunk.offset, within->offset);
  return ByteRange{begin, std::min(chunk.end(), within->end()) - begin};
}

void FetchPlanner::StartSliceSweep(ObjectState& state, int id, size_t from, uint64_t file_readahead) {
  if (state.slice_sweeps.contains(id)) return;
  TopUpSliceSweep(state, id, from, file_readahead);
}

void FetchPlanner::TopUpSliceSweep(ObjectState& state, int id, size_t from, uint64_t file_readahead) {
  // Its readers together read it whole: its chunks come whole, not as windows.
  if (state.together.whole()) return;
  const AccessModel::ActivePattern* active = model_.Pattern(id);
  if (active == nullptr) state.slice_sweeps.erase(id);
  if (active == nullptr || stopping_) return;
  auto [sweep_it, fresh] = state.slice_sweeps.try_emplace(id, SliceSweep{.start = from});
  SliceSweep& sweep = sweep_it->second;
  // The margins of the pattern's reader's file: the one it reads now, or,
  // for a sweep begun before it opened it, the one its files will get.
  if (file_readahead != 0) {
    sweep.file_readahead = file_readahead;
  } else if (fresh) {
    sweep.file_readahead = host_.FileReadaheadOf(state, *active);
  }
  const ChunkPlan& plan = *state.plan;
  const size_t n = plan.tensors().size();
  // Windows closer than half a read-around are one request: the kernel
  // reads the gap, around one or the other. At a slice readahead it reads
  // less of it.
  const uint64_t gap = std::min(tuning_.coalesce_gap, model_.ReadAroundHalf(sweep.file_readahead));
  while (sweep.visited < n && sweep.in_flight < options_.prefetch_window) {
    // One run of windows close together, cut at chunk boundaries.
    size_t k = (sweep.start + sweep.visited) % n;
    ByteRange run = model_.WindowOf(plan, active->learned.pattern, k, sweep.file_readahead);
    size_t count = 1;
    while (sweep.visited + count < n && (k + 1) % n != sweep.start % n && k + 1 < n) {
      const ByteRange next = model_.WindowOf(plan, active->learned.pattern, k + 1, sweep.file_readahead);
      if (next.offset > run.end() + gap || next.end() - run.offset > options_.chunk_size) break;
      run = ByteRange{run.offset, std::max(run.end(), next.end()) - run.offset};
      ++k;
      ++count;
    }
    bool room = true;
    for (size_t c = plan.ChunkAt(run.offset), last = plan.ChunkAt(run.end() - 1); c <= last && room; ++c) {
      const ByteRange chunk = plan.Chunk(c);
      if (state.extents->Holds(chunk)) continue;
      const uint64_t b = std::max(chunk.offset, run.offset);
      const uint64_t e = std::min(chunk.end(), run.end());
      if (state.given.Holds(ByteRange{b, e - b})) continue;
      room = RequestGaps(state, ByteRange{b, e - b}, /*prefetch=*/true, options_.chunk_size, id) >= 0;
    }
    if (!room) return;  // the cache is full: the next read tops up again
    sweep.visited += count;
  }
  // Every window of this object is on its way: go on into the next shard.
  if (sweep.visited >= n && state.successor) {
    ObjectState& next = host_.StateOf(*state.successor);
    if (next.plan != nullptr) {
      if (!next.plan->tensors().empty()) StartSliceSweep(next, id, 0);
    } else if (std::find(next.pending_sweeps.begin(), next.pending_sweeps.end(), id) == next.pending_sweeps.end()) {
      next.pending_sweeps.push_back(id);
      host_.StartHead(next, /*prefetch=*/true);
    }
  }
}

void FetchPlanner::ContinueTensor(ObjectState& state, size_t index) {
  const ChunkPlan& plan = *state.plan;
  const TensorSpan& t = plan.tensors()[index];
  for (size_t c = plan.ChunkAt(t.begin), last = plan.ChunkAt(t.end - 1); c <= last; ++c) {
    if (!Request(state, c, /*prefetch=*/true)) return;
  }
}

const AccessModel::Touch* FetchPlanner::TouchOf(const ChunkPlan& plan, const AccessState& access, ByteRange range) {
  const int index = plan.TensorAt(range.end() - 1);
  if (index < 0) return nullptr;
  for (const AccessModel::Touch& x : access.trail.touches) {
    if (x.tensor == index && x.range.offset <= range.end() - 1 && range.end() <= x.range.end()) return &x;
  }
  return nullptr;
}

uint64_t FetchPlanner::RunEnd(const ChunkPlan& plan, const AccessState& access, ByteRange range, bool named,
                              uint64_t file_readahead) const {
  const int index = plan.TensorAt(range.end() - 1);
  if (index < 0) return UINT64_MAX;
  const TensorSpan& t = plan.tensors()[static_cast<size_t>(index)];
  const AccessModel::Touch* touch = TouchOf(plan, access, range);
  // A copy whose end is known runs no further (see AccessModel::Classify),
  // nor, before it is, a likely slice past its likely end.
  if (touch != nullptr && touch->copy_end > 0) return touch->copy_end;
  if (touch != nullptr && named) return LikelySliceEnd(plan, access, *touch, model_.FileReadahead(file_readahead));
  return t.end;
}

void FetchPlanner::RampWithinTensor(ObjectState& state, const AccessState& access, ByteRange range,
                                    uint64_t run_end, bool meets_next) {
  const ChunkPlan& plan = *state.plan;
  const int index = plan.TensorAt(range.end() - 1);
  // A read within the head chunk is most likely the kernel reading around a
  // header parsed through mmap: it calls for nothing more yet.
  if (index < 0 || plan.ChunkAt(range.end() - 1) == 0) return;
  const TensorSpan& t = plan.tensors()[static_cast<size_t>(index)];
  const AccessModel::Touch* touch = TouchOf(plan, access, range);
  const uint64_t run = touch == nullptr ? range.length : range.end() - touch->range.offset;
  const uint64_t limit = run_end;
  // How far the bytes after the read are cached or coming already.
  uint64_t frontier = range.end();
  while (frontier < limit) {
    const ExtentMap::Extent* at = state.extents->At(frontier);
    if (at == nullptr) break;
    frontier = at->range.end();
  }
  // Ahead by as much as the reader has read of the tensor, topped up in steps
  // that double, so that each request is larger than the one before. A
  // reader that began within the tensor reads a slice, whose rows end
  // somewhere: what is fetched past them is no more than what it read. One
  // that began at its start may read it whole: twice that.
  const uint64_t ahead = std::max(run, tuning_.first_piece);
  const bool within = touch != nullptr && touch->range.offset > t.begin;
  if (frontier >= limit) return;
  if (meets_next) return PrefetchPieces(state, ByteRange{frontier, limit - frontier});
  if (frontier >= range.end() + ahead / 2) return;
  PrefetchPieces(state, ByteRange{frontier, std::min(limit, range.end() + (within ? ahead : 2 * ahead)) - frontier});
}

uint64_t FetchPlanner::LikelySliceEnd(const ChunkPlan& plan, const AccessState& access,
                                      const AccessModel::Touch& touch, uint64_t file_readahead) const {
  const std::vector<TensorSpan>& tensors = plan.tensors();
  const TensorSpan& t = tensors[static_cast<size_t>(touch.tensor)];
  const Tuning::SliceMargins m = tuning_.MarginsAt(file_readahead);
  // Touches that tell no fraction: up to their tensor's end (a layer norm's
  // page read whole, the kernel reading around the next tensor's start).
  // Those from their tensor's start no further than one read-around may be
  // the kernel reading around a page before it (a header parsed, a layer
  // norm): they are taken only where no other touch tells.
  enum Tells { kNothing, kMaybe, kRows };
  auto tells = [&](int k, ByteRange seen) {
    if (k < 0 || static_cast<size_t>(k) >= tensors.size()) return kNothing;
    const TensorSpan& x = tensors[static_cast<size_t>(k)];
    if (seen.end() >= x.end) return kNothing;
    return seen.offset <= x.begin && seen.end() <= x.begin + 2 * m.half ? kMaybe : kRows;
  };
  // The rows the reader read of the tensor it began before this one: of its
  // touches of other tensors, the one it began last, while not left yet (a
  // touch is left some reads after the reader moved on); else the touch it
  // left last (rows near a tensor's end included: Trail::left). One that
  // tells rows over one that may.
  Tells told = kNothing;
  int k = -1;
  ByteRange seen;
  uint64_t first_read = 0;
  for (const AccessModel::Touch& x : access.trail.touches) {
    const Tells y = x.tensor == touch.tensor ? kNothing : tells(x.tensor, x.range);
    if (y > told || (y != kNothing && y == told && x.first_read > first_read)) {
      told = y;
      k = x.tensor;
      seen = x.range;
      first_read = x.first_read;
    }
  }
  for (auto l = access.trail.left.rbegin(); told != kRows && l != access.trail.left.rend(); ++l) {
    const Tells y = l->tensor == touch.tensor ? kNothing : tells(l->tensor, l->range);
    if (y > told) {
      told = y;
      k = l->tensor;
      seen = l->range;
    }
  }
  if (told == kNothing) return t.end;
  const TensorSpan& s = tensors[static_cast<size_t>(k)];
  // Where the rows began in each: the kernel read half a read-around before
  // them, unless they begin with their tensor.
  auto start = [&](const TensorSpan& x, uint64_t at) {
    return at == x.begin ? 0.0 : static_cast<double>(at + m.half - x.begin) / x.size();
  };
  const double lo = start(s, seen.offset);
  const double here = start(t, touch.range.offset);
  const double slack = static_cast<double>(2 * m.half + 2 * t.row_bytes + tuning_.page);
  if (std::abs(here - lo) * static_cast<double>(t.size()) > slack) return t.end;
  // And where they ended: past them the kernel read the read-around of the
  // last page and a readahead window, usually. They end at that fraction here
  // too, and the kernel reads up to two windows past them.
  const double hi =
      std::max(lo, static_cast<double>(seen.end() - std::min(seen.end(), s.begin + m.UsualAfter())) / s.size());
  const uint64_t end = t.begin + static_cast<uint64_t>(hi * static_cast<double>(t.size())) + m.MostAfter();
  return std::min(t.end, (end + tuning_.page - 1) & ~(tuning_.page - 1));
}

void FetchPlanner::PrefetchPieces(ObjectState& state, ByteRange range) {
  const ChunkPlan& plan = *state.plan;
  // Requests of up to 4 MiB, so the link's connections each carry a share.
  const uint64_t piece = tuning_.max_piece;
  for (uint64_t at = range.offset; at < range.end();) {
    const size_t c = plan.ChunkAt(at);
    const uint64_t e = std::min(range.end(), plan.Chunk(c).end());
    const ByteRange part{at, e - at};
    if (!state.given.Holds(part) && RequestGaps(state, part, /*prefetch=*/true, piece) < 0) {
      return;
    }
    at = e;
  }
}

size_t FetchPlanner::WindowChunks(const ChunkPlan& plan, size_t from, uint64_t bytes) {
  size_t n = 0;
  for (uint64_t sum = 0; from + n < plan.size() && sum < bytes; ++n) sum += plan.Chunk(from + n).length;
  return n;
}

void FetchPlanner::NoteStreamRead(uint64_t id) {
  recent_streams_.push_back(id);
  ++streams_read_[id];
  if (recent_streams_.size() > tuning_.active_reads) {
    auto it = streams_read_.find(recent_streams_.front());
    if (--it->second == 0) streams_read_.erase(it);
    recent_streams_.pop_front();
  }
}

uint64_t FetchPlanner::StreamWindow() const {
  const uint64_t share = options_.prefetch_window / std::max<size_t>(1, streams_read_.size());
  return std::max(share, LeastWindow());
}

uint64_t FetchPlanner::LeastWindow() const {
  return std::min(options_.prefetch_window, tuning_.min_stream_window_chunks * options_.chunk_size);
}

void FetchPlanner::UpdateStreams(ObjectState& state, AccessState& access, size_t first, size_t last, uint64_t read_end,
                               bool waited) {
  const ChunkPlan& plan = *state.plan;
  // Reading the header (to list tensors, say) calls for no tensor data.
  if (read_end <= plan.data_start()) return;
  ++access.trail.clock;
  Stream* s = nullptr;
  for (Stream& st : access.streams) {
    if (first + tuning_.back_tolerance >= st.start && first <= st.frontier + 1) {
      s = &st;
      break;
    }
  }
  const uint64_t least = LeastWindow();
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
    if (access.far_jumps >= (access.continued ? 1 : tuning_.sweep_after_jumps) && !state.sweep) {
      state.sweep = true;
      state.sweep_process = access.process;
      host_.SweepStarted(state);
      spdlog::debug("{}: read out of order; prefetching it whole in storage order", state.info.name);
    }
  }
  s->age = access.trail.clock;
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
    ContinueIntoSuccessor(state, left, access.process);
  }
  // Streams that ran into this one are part of it now.
  Stream merged = *s;
  std::erase_if(access.streams, [&](const Stream& st) {
    return &st != s && st.start + tuning_.back_tolerance >= merged.start && st.start <= merged.frontier + 1 &&
           st.frontier <= std::max(merged.frontier, st.frontier);
  });
  if (state.sweep) TopUpSweep(state);
}

void FetchPlanner::ContinueIntoSuccessor(ObjectState& state, uint64_t left, uint64_t process) {
  if (!state.successor || left >= options_.prefetch_window) return;
  const uint64_t want = options_.prefetch_window - left;
  ObjectState& next = host_.StateOf(*state.successor);
  if (next.plan != nullptr) {
    ContinueInto(next, want, process);
  } else {
    next.continue_bytes = std::max(next.continue_bytes, want);
    next.continue_process = process;
    host_.StartHead(next, /*prefetch=*/true);
  }
}

void FetchPlanner::ContinueInto(ObjectState& state, uint64_t bytes, uint64_t process) {
  const ChunkPlan& plan = *state.plan;
  // The stream the predecessor's reader will continue in: one per process
  // (a reader of another process coming to this file is not that reader).
  std::vector<Stream>& streams = state.access.streams;
  auto it = std::find_if(streams.begin(), streams.end(), [&](const Stream& st) {
    return st.start == 0 && (!st.continuation || st.process == process);
  });
  if (it == streams.end()) {
    if (streams.size() >= tuning_.max_streams) return;
    streams.push_back(Stream{.start = 0, .last = 0, .frontier = 0, .reads = 2, .id = next_stream_id_++,
                             .continuation = true, .process = process});
    it = std::prev(streams.end());
  }
  state.access.continued = true;  // the reads that name no reader continue there too
  it->age = ++state.access.trail.clock;
  uint64_t covered = 0;
  for (size_t i = 1; i < plan.size() && covered < bytes; ++i) {
    covered += plan.Chunk(i).length;
    if (i <= it->frontier) continue;
    if (!Request(state, i, /*prefetch=*/true)) break;
    it->frontier = i;
  }
}

void FetchPlanner::TopUpSweep(ObjectState& state) {
  const ChunkPlan& plan = *state.plan;
  // Its readers read it in no order: what the sweep fetches is read at no
  // particular time, so it pays only when the rest of every object read so
  // (the readers may go to any of them) fits in the cache; else each chunk
  // comes when a reader needs it.
  if (state.together.whole() && state.sweep_next < plan.size() && host_.SweepsLeft() > cache_.capacity()) return;
  const int limit = static_cast<int>(std::max<uint64_t>(1, options_.prefetch_window / options_.chunk_size));
  while (state.sweep_in_flight < limit && state.sweep_next < plan.size()) {
    if (!Request(state, state.sweep_next, /*prefetch=*/true, /*sweep=*/true)) return;
    ++state.sweep_next;
  }
  // All of this object is on its way: the next file of the checkpoint can start.
  if (state.sweep_next >= plan.size()) {
    ContinueIntoSuccessor(state, static_cast<uint64_t>(state.sweep_in_flight) * options_.chunk_size,
                          state.sweep_process);
  }
}

void FetchPlanner::PrefetchRange(ObjectState& state, ByteRange range, const std::optional<ByteRange>& within) {
  const ChunkPlan& plan = *state.plan;
  const uint64_t end = std::min(range.end(), state.info.size);
  if (range.offset >= end) return;
  for (size_t i = plan.ChunkAt(range.offset), last = plan.ChunkAt(end - 1); i <= last; ++i) {
    const ByteRange chunk = plan.Chunk(i);
    if (within && (chunk.end() <= within->offset || chunk.offset >= within->end())) continue;
    const ByteRange part = PartWithin(chunk, within);
    if (RequestGaps(state, part, /*prefetch=*/true, part.length) < 0) return;
  }
}

}  // namespace tensorfs
