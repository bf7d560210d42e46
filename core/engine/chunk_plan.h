// ChunkPlan: how one object is cut into chunks, the unit of fetching and caching.
//
// Chunk 0 is the object's head: for a safetensors file, the 8-byte length, the
// JSON header and the start of the data, fetched in one request on first use.
// After it come full chunk_size requests (the last may be up to 1.5 chunks):
// consecutive small tensors share a chunk, a tensor larger than a chunk is
// fetched as chunk-sized pieces in parallel, and a file costs at most
// size / chunk_size + 1.5 requests.
//
// For a safetensors file each chunk also knows the last chunk of the tensors it
// holds, so the engine fetches the rest of a tensor as soon as any of it is
// read; and the plan knows where the header ends, so reading only the header
// fetches no tensor data.
//
// Thread-safety: immutable after construction.
#ifndef TENSORFS_CORE_ENGINE_CHUNK_PLAN_H_
#define TENSORFS_CORE_ENGINE_CHUNK_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/engine/slice_pattern.h"
#include "core/safetensors/header.h"
#include "core/util/types.h"

namespace tensorfs {

class ChunkPlan {
 public:
  // Aligned chunks after a head chunk [0, head_end).
  static ChunkPlan Aligned(uint64_t object_size, uint64_t head_end, uint64_t chunk_size);
  // Tensor-aware chunks after a head chunk [0, head_end). The header must have
  // been validated against object_size.
  static ChunkPlan ForSafetensors(const SafetensorsHeader& header, uint64_t object_size, uint64_t head_end,
                                  uint64_t chunk_size);

  size_t size() const { return starts_.size(); }
  uint64_t object_size() const { return object_size_; }
  ByteRange Chunk(size_t index) const;
  // The chunk holding byte `offset` (< object_size).
  size_t ChunkAt(uint64_t offset) const;
  // The last chunk of the tensor that chunk `index` holds the start or a piece of
  // (index itself for coalesced small tensors and for aligned plans).
  size_t TensorEnd(size_t index) const { return tensor_end_[index]; }
  // Where tensor data begins (0 when the object is not planned by tensor).
  uint64_t data_start() const { return data_start_; }
  // Where data ends (the last tensor's end; object_size for plain files).
  uint64_t data_end() const { return data_end_; }
  // The non-empty tensors in storage order (empty when not planned by tensor).
  const std::vector<TensorSpan>& tensors() const { return tensors_; }
  // The index in tensors() of the tensor holding byte `offset`, or -1.
  int TensorAt(uint64_t offset) const;

 private:
  ChunkPlan(uint64_t object_size) : object_size_(object_size) {}
  void Add(uint64_t start, size_t tensor_end);
  void AddFixedChunks(uint64_t head_end, uint64_t chunk_size);

  uint64_t object_size_;
  uint64_t data_start_ = 0;
  uint64_t data_end_ = 0;
  std::vector<TensorSpan> tensors_;
  std::vector<uint64_t> starts_;     // chunk i is [starts_[i], starts_[i+1] or object_size_)
  std::vector<size_t> tensor_end_;  // see TensorEnd
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_CHUNK_PLAN_H_
