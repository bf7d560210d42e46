#include "core/views/transform.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "core/views/gather.h"
#include "core/views/quantize.h"

namespace tensorfs {
namespace {

constexpr int kMaxParts = 2;

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

// Copies consecutive bytes out of a list of pieces.
class PieceReader {
 public:
  explicit PieceReader(std::span<const std::span<const std::byte>> pieces) : pieces_(pieces) {}
  void Read(std::span<std::byte> out) {
    size_t done = 0;
    while (done < out.size()) {
      TENSORFS_CHECK(piece_ < pieces_.size());
      const std::span<const std::byte> piece = pieces_[piece_];
      const size_t n = std::min(out.size() - done, piece.size() - offset_);
      std::memcpy(out.data() + done, piece.data() + offset_, n);
      done += n;
      offset_ += n;
      if (offset_ == piece.size()) {
        ++piece_;
        offset_ = 0;
      }
    }
  }

 private:
  std::span<const std::span<const std::byte>> pieces_;
  size_t piece_ = 0;
  size_t offset_ = 0;
};

// Elements decoded at a time (rounded up to whole units): the buffers stay
// small (a few hundred KiB per thread) however large the segment.
constexpr uint64_t kSliceElements = 32768;

}  // namespace

Transform::Transform(TransformSource source, int parts, uint64_t unit, uint64_t segment_source_bytes,
                     std::string kind, bool compute_ahead)
    : source_(std::move(source)),
      parts_(parts),
      unit_(std::max<uint64_t>(1, unit)),
      key_(kind + ":" + std::to_string(unit_) + ":" + std::to_string(source_.transpose_rows) + "\n" +
           source_.object.name + "\n" + std::to_string(source_.range.offset)),
      compute_ahead_(compute_ahead) {
  TENSORFS_CHECK(parts_ >= 1 && parts_ <= kMaxParts);
  const uint64_t unit_bytes = unit_ * DtypeBits(source_.dtype) / 8;
  units_per_segment_ = std::max<uint64_t>(1, segment_source_bytes / std::max<uint64_t>(1, unit_bytes));
  if (source_.transpose_rows != 0) units_per_segment_ = std::max<uint64_t>(1, CeilDiv(source_.elements, unit_));
}

uint64_t Transform::SegmentCount(uint64_t s) const {
  const uint64_t first = SegmentFirst(s);
  return first >= source_.elements ? 0 : std::min(segment_elements(), source_.elements - first);
}

uint64_t Transform::SegmentBytes(uint64_t s) const {
  uint64_t bytes = 0;
  for (int p = 0; p < parts_; ++p) bytes += PartEnd(p, s) - PartOffset(p, s);
  return bytes;
}

uint64_t Transform::OffsetInSegment(int part, uint64_t s) const {
  uint64_t offset = 0;
  for (int p = 0; p < part; ++p) offset += PartEnd(p, s) - PartOffset(p, s);
  return offset;
}

ByteRange Transform::SourceRange(uint64_t s) const {
  const uint64_t element_bytes = DtypeBits(source_.dtype) / 8;
  return ByteRange{source_.range.offset + SegmentFirst(s) * element_bytes, SegmentCount(s) * element_bytes};
}

// The key of a derived chunk: what it is computed from (the source object's
// name and generation, where its bytes start) and how.
ChunkKey Transform::Key(uint64_t s) const { return ChunkKey{ObjectId{key_, source_.object.generation}, s}; }

DeriveFn Transform::Deriver(ReadEngine& engine, const std::shared_ptr<ComputePool>& pool, uint64_t s,
                            std::optional<ByteRange> within) const {
  return [self = shared_from_this(), &engine, pool, s,
          within](std::function<void(StatusOr<std::shared_ptr<Chunk>>)> publish) {
    const ByteRange src = self->SourceRange(s);
    engine.Read(
        self->source_.object, src.offset, src.length,
        [self, pool, s, src, publish = std::move(publish)](StatusOr<ReadResult> result) {
          if (!result.ok()) return publish(result.status().WithContext("cannot compute " + self->source_.tensor));
          if (result->size() != src.length) {
            return publish(InternalError("source object is shorter than the catalog says"));
          }
          auto compute = [self, s, source = std::move(*result), publish] {
            auto chunk = std::make_shared<Chunk>(ByteRange{0, self->SegmentBytes(s)});
            self->Compute(s, source.pieces, chunk->writable());
            publish(std::move(chunk));
          };
          if (pool == nullptr) return compute();
          pool->Post(std::move(compute));
        },
        // The source bytes live on in the derived chunk: consumed.
        ReadHints{.prefetch = false, .delivered = true, .within = within});
  };
}

void Transform::Read(ReadEngine& engine, const std::shared_ptr<ComputePool>& pool, int part, ByteRange range,
                     std::optional<ByteRange> within, ReadDone done) const {
  TENSORFS_CHECK(!range.empty() && range.end() <= PartSize(part));
  const uint64_t first = SegmentAt(part, range.offset);
  const uint64_t last = SegmentAt(part, range.end() - 1);
  std::shared_ptr<Gather> gather = Gather::Start(last - first + 1, std::move(done));
  for (uint64_t s = first; s <= last; ++s) {
    const uint64_t seg_begin = PartOffset(part, s);
    const uint64_t from = std::max(range.offset, seg_begin);
    const uint64_t to = std::min(range.end(), PartEnd(part, s));
    const uint64_t in_chunk = OffsetInSegment(part, s) + (from - seg_begin);
    engine.ReadDerived(Key(s), SegmentBytes(s), Deriver(engine, pool, s, within),
                       [gather, slot = s - first, in_chunk, length = to - from](
                           const StatusOr<std::shared_ptr<const Chunk>>& chunk) {
                         if (!chunk.ok()) return gather->Fail(chunk.status());
                         gather->Fill(slot, ReadResult{.owner = *chunk,
                                                       .pieces = {(*chunk)->bytes().subspan(in_chunk, length)}});
                       });
  }
  gather->Issued();
}

uint64_t Transform::Prefetch(ReadEngine& engine, int part, uint64_t from, uint64_t& source_budget,
                             std::optional<ByteRange> within) const {
  if (part != 0 || source_budget == 0) return PartSize(part);
  // Segments computed or being computed need no source bytes: those of the
  // one being read may already have been used and dropped.
  uint64_t s0 = SegmentAt(part, from);
  while (s0 < segments() && engine.HasDerived(Key(s0))) ++s0;
  if (s0 >= segments()) return PartSize(part);
  uint64_t s1 = s0;
  uint64_t bytes = SourceRange(s0).length;
  while (s1 + 1 < segments() && bytes < source_budget) bytes += SourceRange(++s1).length;
  const ByteRange first = SourceRange(s0);
  engine.Prefetch(source_.object, ByteRange{first.offset, SourceRange(s1).end() - first.offset}, within);
  source_budget -= std::min(source_budget, bytes);
  return s1 + 1 < segments() ? PartOffset(part, s1 + 1) : PartSize(part);
}

uint64_t Transform::ComputeAhead(ReadEngine& engine, const std::shared_ptr<ComputePool>& pool, int part,
                                 uint64_t from, uint64_t& segments, std::optional<ByteRange> within) const {
  if (!compute_ahead_) return PartSize(part);
  uint64_t s = SegmentAt(part, from);
  for (; s < this->segments() && segments > 0; ++s, --segments) {
    if (engine.HasDerived(Key(s))) continue;
    // Nobody waits: the chunk is cached for the reader that comes for it.
    engine.ReadDerived(Key(s), SegmentBytes(s), Deriver(engine, pool, s, within),
                       [](const StatusOr<std::shared_ptr<const Chunk>>&) {});
  }
  return s < this->segments() ? PartOffset(part, s) : PartSize(part);
}

void Transform::Compute(uint64_t s, std::span<const std::span<const std::byte>> source,
                        std::span<std::byte> out) const {
  const uint64_t element_bytes = DtypeBits(source_.dtype) / 8;
  const uint64_t count = SegmentCount(s);
  uint64_t total = 0;
  for (const auto& piece : source) total += piece.size();
  TENSORFS_CHECK(total == count * element_bytes && out.size() == SegmentBytes(s));
  PieceReader reader(source);
  if (source_.transpose_rows != 0) {  // one segment: the whole tensor
    const uint64_t rows = source_.transpose_rows;
    const uint64_t cols = count / rows;
    std::vector<std::byte> raw(count * element_bytes);
    std::vector<float> stored(count);
    std::vector<float> x(count);
    reader.Read(raw);
    quant::DecodeFloats(source_.dtype, raw, stored);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) x[c * rows + r] = stored[r * cols + c];
    }
    EmitInto(s, 0, x, out);
    return;
  }
  thread_local std::vector<std::byte> raw;
  thread_local std::vector<float> x;
  const uint64_t slice = std::max<uint64_t>(1, kSliceElements / unit_) * unit_;
  for (uint64_t done = 0; done < count; done += slice) {
    const uint64_t n = std::min(slice, count - done);
    raw.resize(n * element_bytes);
    x.resize(n);
    reader.Read(raw);
    quant::DecodeFloats(source_.dtype, raw, x);
    EmitInto(s, done, x, out);
  }
}

void Transform::EmitInto(uint64_t s, uint64_t done, std::span<const float> x, std::span<std::byte> out) const {
  const uint64_t begin = SegmentFirst(s) + done;
  const uint64_t end = begin + x.size();
  std::array<std::span<std::byte>, kMaxParts> parts;
  for (int p = 0; p < parts_; ++p) {
    const uint64_t at = OffsetInSegment(p, s) + (PartBytes(p, begin) - PartOffset(p, s));
    parts[p] = out.subspan(at, PartBytes(p, end) - PartBytes(p, begin));
  }
  Emit(x, std::span<const std::span<std::byte>>(parts.data(), static_cast<size_t>(parts_)));
}

}  // namespace tensorfs
