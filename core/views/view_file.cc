#include "core/views/view_file.h"

#include <algorithm>
#include <cstring>

#include "core/views/quantize.h"

namespace tensorfs {
namespace {

uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }

void StoreFloats(std::span<const float> values, std::span<std::byte> out) {
  TENSORFS_CHECK(out.size() == values.size() * sizeof(float));
  std::memcpy(out.data(), values.data(), out.size());  // little endian, as the format
}

}  // namespace

std::shared_ptr<const TensorTransform> TensorTransform::Make(Op op, ObjectInfo source, std::string tensor,
                                                            ByteRange source_range, Dtype dtype, uint64_t elements,
                                                            uint64_t unit_elements, uint64_t segment_source_bytes,
                                                            uint64_t transpose_rows) {
  auto t = std::make_shared<TensorTransform>();
  t->op = op;
  t->source = std::move(source);
  t->tensor = std::move(tensor);
  t->source_range = source_range;
  t->dtype = dtype;
  t->elements = elements;
  t->unit = std::max<uint64_t>(1, unit_elements);
  const uint64_t unit_bytes = t->unit * DtypeBits(dtype) / 8;
  t->units_per_segment = std::max<uint64_t>(1, segment_source_bytes / std::max<uint64_t>(1, unit_bytes));
  if (transpose_rows != 0) {
    t->transpose_rows = transpose_rows;
    t->units_per_segment = std::max<uint64_t>(1, CeilDiv(elements, t->unit));
  }
  return t;
}

int TensorTransform::parts() const { return op == Op::kCastBf16 || op == Op::kCastF16 ? 1 : 2; }

uint64_t TensorTransform::PartBytes(int part, uint64_t n) const {
  switch (op) {
    case Op::kNf4: return part == 0 ? (n + 1) / 2 : CeilDiv(n, unit) * sizeof(float);
    case Op::kBlockwise8: return part == 0 ? n : CeilDiv(n, unit) * sizeof(float);
    case Op::kInt8Rows: return part == 0 ? n : CeilDiv(n, unit) * sizeof(float);
    case Op::kCastBf16:
    case Op::kCastF16: return 2 * n;
  }
  return 0;
}

uint64_t TensorTransform::SegmentCount(uint64_t s) const {
  const uint64_t first = SegmentFirst(s);
  return first >= elements ? 0 : std::min(segment_elements(), elements - first);
}

uint64_t TensorTransform::SegmentBytes(uint64_t s) const {
  uint64_t bytes = 0;
  for (int p = 0; p < parts(); ++p) {
    bytes += PartEnd(p, s) - PartOffset(p, s);
  }
  return bytes;
}

uint64_t TensorTransform::OffsetInSegment(int part, uint64_t s) const {
  uint64_t offset = 0;
  for (int p = 0; p < part; ++p) offset += PartEnd(p, s) - PartOffset(p, s);
  return offset;
}

ByteRange TensorTransform::SourceRange(uint64_t s) const {
  const uint64_t element_bytes = DtypeBits(dtype) / 8;
  return ByteRange{source_range.offset + SegmentFirst(s) * element_bytes, SegmentCount(s) * element_bytes};
}

namespace {

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

// Elements decoded at a time: the buffers stay small (a few hundred KiB per
// thread) however large the segment.
constexpr uint64_t kSliceElements = 32768;

}  // namespace

void TensorTransform::Compute(uint64_t s, std::span<const std::span<const std::byte>> source,
                              std::span<std::byte> out) const {
  const uint64_t element_bytes = DtypeBits(dtype) / 8;
  const uint64_t count = SegmentCount(s);
  uint64_t total = 0;
  for (const auto& piece : source) total += piece.size();
  TENSORFS_CHECK(total == count * element_bytes && out.size() == SegmentBytes(s));
  PieceReader reader(source);
  if (transpose_rows != 0) {  // one segment: the whole tensor
    const uint64_t rows = transpose_rows;
    const uint64_t cols = count / rows;
    std::vector<std::byte> raw(count * element_bytes);
    std::vector<float> stored(count);
    std::vector<float> x(count);
    reader.Read(raw);
    quant::DecodeFloats(dtype, raw, stored);
    for (uint64_t r = 0; r < rows; ++r) {
      for (uint64_t c = 0; c < cols; ++c) x[c * rows + r] = stored[r * cols + c];
    }
    Emit(s, 0, x, out);
    return;
  }
  thread_local std::vector<std::byte> raw;
  thread_local std::vector<float> x;
  const uint64_t slice = std::max<uint64_t>(1, kSliceElements / unit) * unit;
  for (uint64_t done = 0; done < count; done += slice) {
    const uint64_t n = std::min(slice, count - done);
    raw.resize(n * element_bytes);
    x.resize(n);
    reader.Read(raw);
    quant::DecodeFloats(dtype, raw, x);
    Emit(s, done, x, out);
  }
}

void TensorTransform::Emit(uint64_t s, uint64_t done, std::span<const float> x, std::span<std::byte> out) const {
  const uint64_t first = SegmentFirst(s);
  const uint64_t n = x.size();
  const uint64_t codes_at = PartBytes(0, first + done) - PartBytes(0, first);
  const uint64_t codes_len = PartBytes(0, first + done + n) - PartBytes(0, first + done);
  std::span<std::byte> codes = out.subspan(codes_at, codes_len);
  thread_local std::vector<float> scales;
  scales.resize(CeilDiv(n, unit));
  std::span<std::byte> scale_bytes =
      parts() == 2 ? out.subspan(OffsetInSegment(1, s) + done / unit * sizeof(float), scales.size() * sizeof(float))
                   : std::span<std::byte>();
  switch (op) {
    case Op::kNf4:
      quant::QuantizeNf4(x, unit, {reinterpret_cast<uint8_t*>(codes.data()), codes.size()}, scales);
      StoreFloats(scales, scale_bytes);
      return;
    case Op::kBlockwise8:
      quant::QuantizeBlockwise8(x, unit, {reinterpret_cast<uint8_t*>(codes.data()), codes.size()}, scales);
      StoreFloats(scales, scale_bytes);
      return;
    case Op::kInt8Rows:
      for (uint64_t r = 0; r < scales.size(); ++r) {
        scales[r] = quant::QuantizeRowInt8(x.subspan(r * unit, unit),
                                           {reinterpret_cast<int8_t*>(codes.data()) + r * unit, unit});
      }
      StoreFloats(scales, scale_bytes);
      return;
    case Op::kCastBf16:
      quant::EncodeHalf(Dtype::BF16, x, codes);
      return;
    case Op::kCastF16:
      quant::EncodeHalf(Dtype::F16, x, codes);
      return;
  }
}

void ViewFile::AddBytes(std::string bytes) {
  if (bytes.empty()) return;
  Extent e{.kind = Extent::Kind::kBytes, .offset = size_, .length = bytes.size()};
  e.bytes = std::make_shared<const std::string>(std::move(bytes));
  size_ += e.length;
  extents_.push_back(std::move(e));
}

void ViewFile::AddSource(const ObjectInfo& source, ByteRange range) {
  if (range.length == 0) return;
  extents_.push_back(Extent{.kind = Extent::Kind::kSource, .offset = size_, .length = range.length,
                            .source = source, .source_offset = range.offset});
  size_ += range.length;
  source_bytes_ += range.length;
  AddRun(source.name, range);
}

void ViewFile::AddTransform(std::shared_ptr<const TensorTransform> transform, int part) {
  const uint64_t length = transform->PartSize(part);
  if (length == 0) return;
  if (part == 0) {
    source_bytes_ += transform->source_range.length;
    AddRun(transform->source.name, transform->source_range);
  }
  extents_.push_back(Extent{.kind = Extent::Kind::kTransform, .offset = size_, .length = length,
                            .transform = std::move(transform), .part = part});
  size_ += length;
}

void ViewFile::AddRun(const std::string& object, ByteRange range) {
  std::vector<ByteRange>& runs = runs_[object];
  if (!runs.empty() && runs.back().end() == range.offset) {
    runs.back().length += range.length;
  } else {
    runs.push_back(range);
  }
}

ByteRange ViewFile::RunOf(const std::string& object, ByteRange range) const {
  auto it = runs_.find(object);
  if (it != runs_.end()) {
    for (const ByteRange& run : it->second) {
      if (range.offset >= run.offset && range.end() <= run.end()) return run;
    }
  }
  return range;
}

size_t ViewFile::ExtentAt(uint64_t offset) const {
  auto it = std::upper_bound(extents_.begin(), extents_.end(), offset,
                             [](uint64_t off, const Extent& e) { return off < e.offset + e.length; });
  return static_cast<size_t>(it - extents_.begin());
}

}  // namespace tensorfs
