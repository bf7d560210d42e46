#include "core/views/view_reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

namespace tensorfs {
namespace {

// The key of a derived chunk: what it is computed from (the source object's
// name and generation, where its bytes start) and how.
ChunkKey DerivedKey(const TensorTransform& t, uint64_t segment) {
  std::string name = std::to_string(static_cast<int>(t.op)) + ":" + std::to_string(t.unit) + ":" +
                     std::to_string(t.transpose_rows) + "\n" + t.source.name + "\n" +
                     std::to_string(t.source_range.offset);
  return ChunkKey{ObjectId{std::move(name), t.source.generation}, segment};
}

// The segment of `t` whose part `part` holds byte `offset` of that part.
uint64_t SegmentAt(const TensorTransform& t, int part, uint64_t offset) {
  return offset / t.PartBytes(part, t.segment_elements());
}

// The prefetch window is topped up in steps of 1/kRefillSteps of it.
constexpr uint64_t kRefillSteps = 8;

}  // namespace

// One read in progress: a slot per piece, filled as they arrive.
struct ViewReader::Gather {
  std::shared_ptr<const ViewFile> file;
  std::vector<ReadResult> slots;
  std::atomic<int> pending{1};  // one extra, released when every piece is issued
  std::atomic<bool> failed{false};
  Status error;  // written once, by the piece that sets `failed`
  ReadDone done;

  void Fail(const Status& status) {
    if (!failed.exchange(true)) error = status;
  }
  void Arrive() {
    if (pending.fetch_sub(1) != 1) return;
    if (failed.load()) return done(error);
    ReadResult result;
    auto owners = std::make_shared<std::vector<std::shared_ptr<const void>>>();
    owners->push_back(file);
    for (ReadResult& slot : slots) {
      owners->push_back(std::move(slot.owner));
      result.pieces.insert(result.pieces.end(), slot.pieces.begin(), slot.pieces.end());
    }
    result.owner = std::move(owners);
    done(std::move(result));
  }
};

void ViewReader::Read(std::shared_ptr<const ViewFile> file, uint64_t offset, size_t size, ReadDone done) {
  if (!file->error().ok()) return done(file->error());
  if (offset >= file->size() || size == 0) return done(ReadResult{});
  const uint64_t end = std::min<uint64_t>(file->size(), offset + size);

  auto gather = std::make_shared<Gather>();
  gather->file = file;
  gather->done = std::move(done);
  const std::vector<Extent>& extents = file->extents();
  size_t first = file->ExtentAt(offset);
  size_t last = file->ExtentAt(end - 1);
  // Count the slots first: pieces may complete (and read `slots`) while later
  // ones are still being issued.
  size_t slots = 0;
  for (size_t i = first; i <= last; ++i) {
    const Extent& e = extents[i];
    if (e.kind != Extent::Kind::kTransform) {
      ++slots;
      continue;
    }
    const uint64_t begin = std::max(offset, e.offset) - e.offset;
    const uint64_t stop = std::min(end, e.offset + e.length) - e.offset;
    slots += SegmentAt(*e.transform, e.part, stop - 1) - SegmentAt(*e.transform, e.part, begin) + 1;
  }
  gather->slots.resize(slots);
  gather->pending.fetch_add(static_cast<int>(slots));

  size_t slot = 0;
  for (size_t i = first; i <= last; ++i) {
    const Extent& e = extents[i];
    const uint64_t begin = std::max(offset, e.offset);
    const uint64_t stop = std::min(end, e.offset + e.length);
    switch (e.kind) {
      case Extent::Kind::kBytes: {
        ReadResult& r = gather->slots[slot++];
        r.pieces.push_back(std::as_bytes(std::span<const char>(e.bytes->data() + (begin - e.offset), stop - begin)));
        gather->Arrive();
        break;
      }
      case Extent::Kind::kSource: {
        ReadResult* r = &gather->slots[slot++];
        const uint64_t length = stop - begin;
        engine_.Read(
            e.source, e.source_offset + (begin - e.offset), length,
            [gather, r, length](StatusOr<ReadResult> result) {
              if (!result.ok()) {
                gather->Fail(result.status());
              } else if (result->size() != length) {
                gather->Fail(InternalError("source object is shorter than the catalog says"));
              } else {
                *r = std::move(*result);
              }
              gather->Arrive();
            },
            ReadHints{.prefetch = false, .delivered = true,
                      .within = file->RunOf(e.source.name, ByteRange{e.source_offset, e.length})});
        break;
      }
      case Extent::Kind::kTransform: {
        const TensorTransform& t = *e.transform;
        const uint64_t part_begin = begin - e.offset;
        const uint64_t part_end = stop - e.offset;
        for (uint64_t s = SegmentAt(t, e.part, part_begin); s <= SegmentAt(t, e.part, part_end - 1); ++s) {
          ReadResult* r = &gather->slots[slot++];
          const uint64_t seg_begin = t.PartOffset(e.part, s);
          const uint64_t from = std::max(part_begin, seg_begin);
          const uint64_t to = std::min(part_end, t.PartEnd(e.part, s));
          const uint64_t in_chunk = t.OffsetInSegment(e.part, s) + (from - seg_begin);
          std::shared_ptr<const TensorTransform> transform = e.transform;
          const ByteRange within = file->RunOf(t.source.name, t.source_range);
          DeriveFn derive = [this, transform, s, within](std::function<void(StatusOr<std::shared_ptr<Chunk>>)> publish) {
            const ByteRange src = transform->SourceRange(s);
            engine_.Read(
                transform->source, src.offset, src.length,
                [transform, s, src, publish = std::move(publish)](StatusOr<ReadResult> result) {
                  if (!result.ok()) {
                    return publish(result.status().WithContext("cannot compute " + transform->tensor));
                  }
                  if (result->size() != src.length) {
                    return publish(InternalError("source object is shorter than the catalog says"));
                  }
                  auto chunk = std::make_shared<Chunk>(ByteRange{0, transform->SegmentBytes(s)});
                  transform->Compute(s, result->pieces, chunk->writable());
                  publish(std::move(chunk));
                },
                // The source bytes live on in the derived chunk: consumed.
                ReadHints{.prefetch = false, .delivered = true, .within = within});
          };
          engine_.ReadDerived(DerivedKey(t, s), t.SegmentBytes(s), derive,
                              [gather, r, in_chunk, length = to - from](const StatusOr<std::shared_ptr<const Chunk>>& chunk) {
                                if (!chunk.ok()) {
                                  gather->Fail(chunk.status());
                                } else {
                                  r->owner = *chunk;
                                  r->pieces.push_back((*chunk)->bytes().subspan(in_chunk, length));
                                }
                                gather->Arrive();
                              });
        }
        break;
      }
    }
  }
  MaybePrefetch(*file, offset, end);
  gather->Arrive();  // the extra count: every piece is issued
}

void ViewReader::MaybePrefetch(const ViewFile& file, uint64_t read_begin, uint64_t read_end) {
  file.bytes_read.fetch_add(read_end - read_begin);
  // A read within the header (a loader listing the tensors) calls for no data.
  const std::vector<Extent>& extents = file.extents();
  if (!extents.empty() && extents[0].kind == Extent::Kind::kBytes && read_end <= extents[0].length) return;
  // A reader going through the files in order: one that read the file before
  // this one, or one that has read half of the first file (layer loaders start
  // with the embedding; running on then keeps the link busy while the reader
  // copies the rest; a reader of the first file alone costs a window). Counted
  // in bytes read, not by offset: a copy reads its last page early.
  const bool continues =
      file.next != nullptr &&
      (file.previous != nullptr ? file.previous->bytes_read.load() > 0 : file.bytes_read.load() >= file.size() / 2);
  // Source bytes per byte of this file: the window is counted in source bytes
  // (what the link carries) and topped up each time the reader has consumed
  // an eighth of it. (Topped up at half, the requests of half a window went
  // out together, shared the link, ended together, and the link idled while
  // the reader caught up.)
  const double ratio = file.size() == 0 ? 0 : static_cast<double>(file.source_bytes()) / file.size();
  const auto window = static_cast<uint64_t>(window_ / std::max(ratio, 1e-6));  // in bytes of this file
  const uint64_t step = window / kRefillSteps;
  MutexLock lock(prefetch_mu_);
  const uint64_t to = file.prefetched_to.load();
  if (to < file.size()) {
    if (to > read_end && to - read_end > window - step) return;
  } else if (!continues) {
    return;
  } else if (const uint64_t at = file.continued_at.load(); at != ViewFile::kNever && read_end < at + step) {
    return;  // ran on recently
  }
  uint64_t budget = window_;
  const uint64_t reached = PrefetchSources(file, read_end, budget);
  file.prefetched_to.store(std::max(to, reached));
  if (reached < file.size() || !continues) return;
  // The window runs on into the next files (from their start: what is cached
  // or coming costs nothing).
  file.continued_at.store(read_end);
  for (const ViewFile* next = file.next; next != nullptr && budget > 0; next = next->next) {
    const uint64_t next_reached = PrefetchSources(*next, 0, budget);
    next->prefetched_to.store(std::max(next->prefetched_to.load(), next_reached));
    if (next_reached < next->size()) break;
  }
}

uint64_t ViewReader::PrefetchSources(const ViewFile& file, uint64_t from, uint64_t& source_budget) {
  if (!file.error().ok()) return file.size();
  const std::vector<Extent>& extents = file.extents();
  uint64_t at = from;
  for (size_t i = file.ExtentAt(from); i < extents.size() && source_budget > 0; ++i) {
    const Extent& e = extents[i];
    const uint64_t begin = std::max(at, e.offset) - e.offset;
    if (e.kind == Extent::Kind::kSource) {
      const uint64_t length = std::min(e.length - begin, source_budget);
      engine_.Prefetch(e.source, ByteRange{e.source_offset + begin, length},
                       file.RunOf(e.source.name, ByteRange{e.source_offset, e.length}));
      source_budget -= length;
      at = e.offset + begin + length;
    } else if (e.kind == Extent::Kind::kTransform && e.part != 0) {
      at = e.offset + e.length;  // the scales come from the same source as the codes before them
    } else if (e.kind == Extent::Kind::kTransform) {
      const TensorTransform& t = *e.transform;
      // Segments computed or being computed need no source bytes: those of
      // the one being read may already have been used and dropped.
      uint64_t s0 = SegmentAt(t, e.part, begin);
      while (s0 < t.segments() && engine_.HasDerived(DerivedKey(t, s0))) ++s0;
      if (s0 == t.segments()) {
        at = e.offset + e.length;
        continue;
      }
      uint64_t s1 = s0;
      uint64_t bytes = t.SourceRange(s0).length;
      while (s1 + 1 < t.segments() && bytes < source_budget) bytes += t.SourceRange(++s1).length;
      const ByteRange first = t.SourceRange(s0);
      engine_.Prefetch(t.source, ByteRange{first.offset, t.SourceRange(s1).end() - first.offset},
                       file.RunOf(t.source.name, t.source_range));
      source_budget -= std::min(source_budget, bytes);
      at = s1 + 1 < t.segments() ? e.offset + t.PartOffset(e.part, s1 + 1) : e.offset + e.length;
    } else {
      at = e.offset + e.length;
    }
  }
  return std::max(at, from);
}

}  // namespace tensorfs
