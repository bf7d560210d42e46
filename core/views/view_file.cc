#include "core/views/view_file.h"

#include <algorithm>

namespace tensorfs {

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

void ViewFile::AddTransform(std::shared_ptr<const Transform> transform, int part) {
  const uint64_t length = transform->PartSize(part);
  if (length == 0) return;
  if (part == 0) {
    const TransformSource& source = transform->source();
    source_bytes_ += source.range.length;
    AddRun(source.object.name, source.range);
  }
  computes_ahead_ = computes_ahead_ || transform->compute_ahead();
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
