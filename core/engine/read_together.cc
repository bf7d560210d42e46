#include "core/engine/read_together.h"

#include <algorithm>

namespace tensorfs {

bool ReadTogether::Note(const ChunkPlan& plan, ByteRange range, const Reader& reader, const Tuning& tuning) {
  if (whole_ || range.empty()) return false;
  const std::vector<TensorSpan>& tensors = plan.tensors();
  int k = plan.TensorAt(range.offset);
  if (k < 0) {  // in the header or padding: the tensor after it, if any
    auto it = std::upper_bound(tensors.begin(), tensors.end(), range.offset,
                               [](uint64_t off, const TensorSpan& t) { return off < t.begin; });
    k = static_cast<int>(it - tensors.begin());
  }
  bool read_tensor = false;
  bool nearly_whole = false;
  for (; k >= 0 && static_cast<size_t>(k) < tensors.size() && tensors[static_cast<size_t>(k)].begin < range.end();
       ++k) {
    const TensorSpan& t = tensors[static_cast<size_t>(k)];
    if (t.size() < tuning.whole_min) continue;
    read_tensor = true;
    const uint64_t b = std::max(range.offset, t.begin);
    const uint64_t e = std::min(range.end(), t.end);
    // Merge [b, e) into the tensor's ranges (sorted, disjoint).
    std::vector<ByteRange>& ranges = partial_[k];
    ByteRange merged{b, e - b};
    std::vector<ByteRange> out;
    out.reserve(ranges.size() + 1);
    for (const ByteRange& x : ranges) {
      if (x.end() < merged.offset || x.offset > merged.end()) {
        out.push_back(x);
        continue;
      }
      const uint64_t mb = std::min(x.offset, merged.offset);
      merged = ByteRange{mb, std::max(x.end(), merged.end()) - mb};
    }
    out.insert(std::upper_bound(out.begin(), out.end(), merged,
                                [](const ByteRange& a, const ByteRange& c) { return a.offset < c.offset; }),
               merged);
    ranges = std::move(out);
    uint64_t covered = 0;
    for (const ByteRange& x : ranges) covered += x.length;
    if (covered >= t.size() - t.size() / 10) {
      nearly_whole = true;
      partial_.erase(k);
    }
  }
  if (!read_tensor) return false;
  ++reads_;
  readers_[reader] = reads_;
  // Readers that stopped reading the object lately are no longer among its
  // readers; past kReaders the least recent go.
  std::erase_if(readers_, [&](const auto& r) { return reads_ - r.second > tuning.whole_memory; });
  while (readers_.size() > kReaders) {
    readers_.erase(std::min_element(readers_.begin(), readers_.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; }));
  }
  while (partial_.size() > kTensors) {
    auto least = std::min_element(partial_.begin(), partial_.end(), [](const auto& a, const auto& b) {
      uint64_t ca = 0, cb = 0;
      for (const ByteRange& x : a.second) ca += x.length;
      for (const ByteRange& x : b.second) cb += x.length;
      return ca < cb;
    });
    partial_.erase(least);
  }
  if (nearly_whole && readers_.size() >= 2) whole_ = true;
  return whole_;
}

void ReadTogether::Release(uint64_t value, uint64_t process) {
  std::erase_if(readers_, [&](const auto& r) { return std::get<0>(r.first) == value && std::get<1>(r.first) == process; });
}

uint64_t ReadTogether::SplitEnd(const ChunkPlan& plan, ByteRange range) const {
  if (range.empty()) return UINT64_MAX;
  const int k = plan.TensorAt(range.end() - 1);
  auto it = partial_.find(k);
  if (k < 0 || it == partial_.end()) return UINT64_MAX;
  const TensorSpan& t = plan.tensors()[static_cast<size_t>(k)];
  // The tensor's runs are merged and in order. Slices of rows are alike in
  // size and begin at the tensor's start: none is larger than the least
  // distance between two runs' starts (or a run's and the tensor's).
  const std::vector<ByteRange>& runs = it->second;
  // One reader's runs tell no split (a copy's first and last pages).
  if (runs.size() < 2 || readers_.size() < 2) return UINT64_MAX;
  uint64_t spacing = UINT64_MAX;
  uint64_t before = t.begin;
  uint64_t next = t.end;  // the last run ends with the tensor
  for (const ByteRange& run : runs) {
    if (run.offset > before) spacing = std::min(spacing, run.offset - before);
    before = run.offset;
    if (next == t.end && run.offset > range.end()) next = run.offset;
  }
  // The next run may be several readers' rows away (readers in between not
  // begun yet, or not on this mount): the read's own goes no further than
  // that distance past it.
  return std::min(next, range.end() + spacing);
}

}  // namespace tensorfs
