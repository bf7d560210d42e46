// The index of a sharded checkpoint: model.safetensors.index.json.
//
//   {"metadata": {"total_size": 16060522496, ...},
//    "weight_map": {"model.embed_tokens.weight": "model-00001-of-00004.safetensors", ...}}
//
// File names in the weight map are relative to the directory that holds the
// index. "metadata" is optional, and so is its "total_size" (a byte count that
// writers compute from the tensors; it is informational and not checked).
//
// Callers: the catalog (checkpoint.h) parses every *.safetensors.index.json of
// a checkpoint directory and cross-checks it against the shard headers.
//
// Thread-safety: free functions and a plain struct; safe from any thread.
#ifndef TENSORFS_CORE_SAFETENSORS_INDEX_H_
#define TENSORFS_CORE_SAFETENSORS_INDEX_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"

namespace tensorfs {

// The name transformers writes and looks for.
inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";
// Indexes larger than this are refused rather than read into memory.
inline constexpr uint64_t kMaxIndexBytes = 64ull << 20;

struct SafetensorsIndex {
  std::optional<uint64_t> total_size;
  // The "metadata" object. String values as they are; any other value as its
  // compact JSON text (total_size is there too, as "16060522496").
  std::map<std::string, std::string> metadata;
  // Tensor name -> shard file name (relative to the index's directory).
  std::map<std::string, std::string> weight_map;

  // The distinct shard files of the weight map, sorted.
  std::vector<std::string> Files() const;
};

// True for "model.safetensors.index.json" and any other
// "<name>.safetensors.index.json" (diffusers writes
// "diffusion_pytorch_model.safetensors.index.json"). `name` may include a
// directory prefix.
bool IsIndexFileName(std::string_view name);

// Parses index JSON read from `file_name` (used only in messages). kCorrupt
// with a message naming the file, and the tensor where one is at fault.
StatusOr<SafetensorsIndex> ParseIndex(std::string_view file_name, std::string_view json);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_SAFETENSORS_INDEX_H_
