#include "core/views/view_reader.h"

#include <algorithm>
#include <vector>

#include "core/views/gather.h"

namespace tensorfs {
namespace {

// The prefetch window is topped up in steps of 1/kRefillSteps of it.
constexpr uint64_t kRefillSteps = 8;

}  // namespace

void ViewReader::Read(std::shared_ptr<const ViewFile> file, uint64_t offset, size_t size, ReadDone done) {
  if (!file->error().ok()) return done(file->error());
  if (offset >= file->size() || size == 0) return done(ReadResult{});
  const uint64_t end = std::min<uint64_t>(file->size(), offset + size);

  const std::vector<Extent>& extents = file->extents();
  const size_t first = file->ExtentAt(offset);
  const size_t last = file->ExtentAt(end - 1);
  // One slot per extent; the file is kept with the result (its header bytes).
  std::shared_ptr<Gather> gather = Gather::Start(last - first + 1, std::move(done), file);
  for (size_t i = first; i <= last; ++i) {
    const Extent& e = extents[i];
    const size_t slot = i - first;
    const uint64_t begin = std::max(offset, e.offset);
    const uint64_t stop = std::min(end, e.offset + e.length);
    auto fill = [gather, slot, length = stop - begin](StatusOr<ReadResult> result) {
      if (!result.ok()) return gather->Fail(result.status());
      if (result->size() != length) return gather->Fail(InternalError("source object is shorter than the catalog says"));
      gather->Fill(slot, std::move(*result));
    };
    switch (e.kind) {
      case Extent::Kind::kBytes:
        gather->Fill(slot, ReadResult{.pieces = {std::as_bytes(std::span<const char>(
                                          e.bytes->data() + (begin - e.offset), stop - begin))}});
        break;
      case Extent::Kind::kSource:
        engine_.Read(e.source, e.source_offset + (begin - e.offset), stop - begin, std::move(fill),
                     ReadHints{.prefetch = false, .delivered = true,
                               .within = file->RunOf(e.source.name, ByteRange{e.source_offset, e.length})});
        break;
      case Extent::Kind::kTransform: {
        const TransformSource& source = e.transform->source();
        e.transform->Read(engine_, pool_, e.part, ByteRange{begin - e.offset, stop - begin},
                          file->RunOf(source.object.name, source.range), std::move(fill));
        break;
      }
    }
  }
  MaybePrefetch(*file, offset, end);
  ComputeAhead(*file, end);
  gather->Issued();
}

void ViewReader::ComputeAhead(const ViewFile& file, uint64_t from) {
  if (compute_ahead_ == 0 || !file.computes_ahead() || !file.error().ok()) return;
  uint64_t segments = compute_ahead_;
  const std::vector<Extent>& extents = file.extents();
  // Within a window of the read: the tensors after it that copies fill.
  const uint64_t horizon = from + window_;
  for (size_t i = file.ExtentAt(from); i < extents.size() && segments > 0 && extents[i].offset < horizon; ++i) {
    const Extent& e = extents[i];
    if (e.kind != Extent::Kind::kTransform || e.part != 0 || !e.transform->compute_ahead()) continue;
    const TransformSource& source = e.transform->source();
    e.transform->ComputeAhead(engine_, pool_, 0, std::max(from, e.offset) - e.offset, segments,
                              file.RunOf(source.object.name, source.range));
  }
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
    } else if (e.kind == Extent::Kind::kTransform) {
      const TransformSource& source = e.transform->source();
      at = e.offset + e.transform->Prefetch(engine_, e.part, begin, source_budget,
                                            file.RunOf(source.object.name, source.range));
    } else {
      at = e.offset + e.length;
    }
  }
  return std::max(at, from);
}

}  // namespace tensorfs
