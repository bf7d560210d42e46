#include "core/engine/chunk_plan.h"

#include <algorithm>

#include "core/util/status.h"

namespace tensorfs {

void ChunkPlan::Add(uint64_t start, size_t tensor_end) {
  TENSORFS_CHECK(starts_.empty() || start > starts_.back());
  starts_.push_back(start);
  tensor_end_.push_back(tensor_end);
}

ByteRange ChunkPlan::Chunk(size_t index) const {
  TENSORFS_CHECK(index < starts_.size());
  uint64_t end = index + 1 < starts_.size() ? starts_[index + 1] : object_size_;
  return ByteRange{starts_[index], end - starts_[index]};
}

size_t ChunkPlan::ChunkAt(uint64_t offset) const {
  auto it = std::upper_bound(starts_.begin(), starts_.end(), offset);
  return static_cast<size_t>(it - starts_.begin()) - 1;
}

void ChunkPlan::AddFixedChunks(uint64_t head_end, uint64_t chunk_size) {
  Add(0, 0);
  if (head_end >= object_size_) return;
  // Full chunks after the head; a last piece under half a chunk joins the one
  // before it, so an object costs at most (size - head) / chunk_size + 1.5 requests.
  for (uint64_t start = head_end; start < object_size_; start += chunk_size) {
    uint64_t rest = object_size_ - start;
    if (start > head_end && rest < chunk_size / 2) break;
    Add(start, starts_.size());
  }
}

int ChunkPlan::TensorAt(uint64_t offset) const {
  auto it = std::upper_bound(tensors_.begin(), tensors_.end(), offset,
                             [](uint64_t off, const TensorSpan& t) { return off < t.begin; });
  if (it == tensors_.begin()) return -1;
  --it;
  return offset < it->end ? static_cast<int>(it - tensors_.begin()) : -1;
}

ChunkPlan ChunkPlan::Aligned(uint64_t object_size, uint64_t head_end, uint64_t chunk_size) {
  ChunkPlan plan(object_size);
  plan.data_end_ = object_size;
  plan.AddFixedChunks(std::min(head_end, object_size), chunk_size);
  return plan;
}

ChunkPlan ChunkPlan::ForSafetensors(const SafetensorsHeader& header, uint64_t object_size, uint64_t head_end,
                                    uint64_t chunk_size) {
  ChunkPlan plan(object_size);
  plan.data_start_ = std::min(header.data_start(), object_size);
  // Tensors are packed back to back, so full-size requests run across tensor
  // boundaries: small tensors share a chunk, large ones span several.
  plan.AddFixedChunks(std::min(head_end, object_size), chunk_size);
  // What makes the plan tensor-aware: each chunk knows the last chunk of the
  // tensors it holds, so reading any part of a tensor fetches all of it.
  for (const TensorInfo& t : header.tensors) {
    if (t.size() == 0) continue;
    size_t first = plan.ChunkAt(plan.data_start_ + t.begin);
    size_t last = plan.ChunkAt(plan.data_start_ + t.end - 1);
    for (size_t i = first; i <= last; ++i) plan.tensor_end_[i] = std::max(plan.tensor_end_[i], last);
    const uint64_t dim0 = t.shape.empty() ? 1 : t.shape[0];
    const uint64_t row = dim0 == 0 || t.size() % dim0 != 0 ? t.size() : t.size() / dim0;
    const uint64_t begin = plan.data_start_ + t.begin;
    // Aliased or overlapping tensors (rejected by validation) never get here;
    // keep the list sorted and disjoint all the same.
    if (plan.tensors_.empty() || begin >= plan.tensors_.back().end) {
      plan.tensors_.push_back(TensorSpan{begin, plan.data_start_ + t.end, std::max<uint64_t>(row, 1)});
    }
  }
  plan.data_end_ = plan.tensors_.empty() ? object_size : plan.tensors_.back().end;
  return plan;
}

}  // namespace tensorfs
