// The checkpoint the engine tests read: one f32 llama shard, hidden 512, so its
// tensors are 1, 3 and 8 MiB (sizes apart, as real layers are), held in a
// MemoryStore. Not thread-safe to build; the store it fills is.
#ifndef TENSORFS_TESTS_CORE_ENGINE_SINGLE_SHARD_CHECKPOINT_H_
#define TENSORFS_TESTS_CORE_ENGINE_SINGLE_SHARD_CHECKPOINT_H_

#include <gtest/gtest.h>

#include <string>

#include "tests/support/checkpoint_gen.h"
#include "tests/support/memory_store.h"

namespace tensorfs::testing {

struct SingleShardCheckpoint {
  SingleShardCheckpoint() {
    ModelSpec spec{.arch = Arch::kLlama, .layers = 4, .hidden = 512, .intermediate = 1536, .vocab = 4096,
                   .dtype = Dtype::F32};
    auto files = BuildCheckpointFiles(spec, {.num_shards = 1});
    EXPECT_TRUE(files.ok());
    for (auto& [name, bytes] : *files) {
      memory.Put(name, bytes);
      if (name.ends_with(".safetensors")) source = bytes;
    }
    shard = *memory.Stat("model.safetensors");
  }

  MemoryStore memory;
  std::string source;  // the shard's bytes
  ObjectInfo shard;    // "model.safetensors"
};

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_CORE_ENGINE_SINGLE_SHARD_CHECKPOINT_H_
