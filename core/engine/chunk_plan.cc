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

ChunkPlan ChunkPlan::Aligned(uint64_t object_size, uint64_t head_end, uint64_t chunk_size) {
  ChunkPlan plan(object_size);
  head_end = std::min(head_end, object_size);
  plan.Add(0, 0);
  uint64_t next = (head_end / chunk_size + 1) * chunk_size;
  if (head_end < object_size) plan.Add(head_end, plan.size());
  for (; next < object_size; next += chunk_size) {
    if (next > plan.starts_.back()) plan.Add(next, plan.size());
  }
  return plan;
}

ChunkPlan ChunkPlan::ForSafetensors(const SafetensorsHeader& header, uint64_t object_size, uint64_t head_end,
                                    uint64_t chunk_size) {
  ChunkPlan plan(object_size);
  head_end = std::min(head_end, object_size);
  plan.Add(0, 0);
  if (head_end >= object_size) return plan;

  // Items to place in storage order: the rest of the header (if the head chunk
  // stopped inside it), then each tensor; each clipped to start at head_end.
  struct Item {
    uint64_t begin, end;
  };
  std::vector<Item> items;
  const uint64_t data_start = header.data_start();
  if (head_end < data_start) items.push_back({head_end, data_start});
  for (const TensorInfo& t : header.tensors) {
    uint64_t begin = std::max(data_start + t.begin, head_end);
    uint64_t end = data_start + t.end;
    if (end > begin) items.push_back({begin, end});
  }

  uint64_t chunk_start = head_end;  // start of the chunk being filled
  bool open = false;                // whether a chunk starting at chunk_start is open
  for (const Item& item : items) {
    uint64_t length = item.end - item.begin;
    if (length > chunk_size) {
      // A large tensor: close the open chunk, then near-equal pieces.
      if (open && item.begin > chunk_start) plan.Add(chunk_start, plan.size());
      uint64_t pieces = (length + chunk_size - 1) / chunk_size;
      size_t first = plan.size();
      for (uint64_t p = 0; p < pieces; ++p) plan.Add(item.begin + length * p / pieces, 0);
      for (size_t i = first; i < plan.size(); ++i) plan.tensor_end_[i] = plan.size() - 1;
      chunk_start = item.end;
      open = false;
    } else if (open && item.end - chunk_start > chunk_size) {
      // The small tensor does not fit: close the chunk, start a new one with it.
      plan.Add(chunk_start, plan.size());
      chunk_start = item.begin;
    } else if (!open) {
      chunk_start = item.begin;
      open = true;
    }
  }
  if (open) plan.Add(chunk_start, plan.size());
  // The head chunk ends inside the first tensor or right after the header: a
  // read there is a read of that tensor, whose rest the engine fetches.
  if (!items.empty()) {
    size_t first_item_end = plan.ChunkAt(items.front().end - 1);
    plan.tensor_end_[0] = plan.TensorEnd(first_item_end);
  }
  return plan;
}

}  // namespace tensorfs
