// Deterministic safetensors checkpoints for tests and benchmarks.
//
// ModelSpec describes a small model shaped like a real architecture (tensor
// names and shapes as the Hugging Face checkpoints of Llama, Qwen2, Mixtral,
// DeepSeek-MoE, GPT-2 and T5 have them); sizes are parameters. PlanCheckpoint distributes
// the tensors over shards the way transformers does (in forward order, cut by
// size) and, whenever there is more than one shard, makes sure at least one
// layer has tensors in two shards, since that is the case a per-layer view
// must handle. Within each shard the tensors are stored sorted by name, as the
// safetensors writer stores them, so storage order differs from forward order
// ("model.layers.10." before "model.layers.2.", "lm_head." before "model.").
//
// Tensor bytes are a pure function of the tensor's name, dtype and byte index:
// FillTensorBytes/ExpectedTensorBytes give them to tests that compare what a
// read returns. F32, F16, BF16 and F64 tensors hold finite values whose
// magnitude lies in [2^-8, 1) with random sign, so quantizers see sane input;
// other dtypes hold pseudo-random bytes.
//
// Thread-safety: free functions over their arguments; safe from any thread.
#ifndef TENSORFS_TESTS_SUPPORT_CHECKPOINT_GEN_H_
#define TENSORFS_TESTS_SUPPORT_CHECKPOINT_GEN_H_

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/safetensors/dtype.h"
#include "core/safetensors/header.h"
#include "core/util/status.h"
#include "tests/support/memory_store.h"

namespace tensorfs::testing {

enum class Arch {
  kLlama,      // model.embed_tokens, model.layers.N.{self_attn,mlp,...}, model.norm, lm_head
  kQwen2,      // Llama plus q/k/v_proj biases
  kMixtral,    // Llama attention; block_sparse_moe.gate and experts.E.w1/w2/w3
  kGpt2,       // transformer.wte/wpe, transformer.h.N..., transformer.ln_f; tied (no lm_head)
  kT5,         // shared, encoder.block.N..., decoder.block.N..., final_layer_norms, lm_head
  kLlamaTied,  // Llama without lm_head (tie_word_embeddings)
  kDeepseekMoe,  // Llama attention; the first dense_layers blocks with a dense mlp, the others
                 // mlp.gate, mlp.experts.E.{gate,up,down}_proj (intermediate / 2 wide) and
                 // mlp.shared_experts.{gate,up,down}_proj
};

// "llama", "qwen2", "mixtral", "gpt2", "t5", "llama-tied", "deepseek-moe".
std::string_view ArchName(Arch arch);
std::optional<Arch> ParseArch(std::string_view name);

struct ModelSpec {
  Arch arch = Arch::kLlama;
  uint64_t layers = 2;         // blocks per stack (T5: encoder and decoder each)
  uint64_t hidden = 64;
  uint64_t intermediate = 128;
  uint64_t vocab = 256;
  uint64_t experts = 4;        // Mixtral and DeepSeek-MoE only
  uint64_t dense_layers = 1;   // DeepSeek-MoE only: blocks before the first MoE block
  uint64_t heads = 4;          // must divide hidden
  uint64_t kv_heads = 4;       // must divide heads; k/v_proj have hidden*kv_heads/heads rows
  uint64_t max_positions = 128;  // GPT-2 position embeddings
  Dtype dtype = Dtype::F32;    // F32, F16 or BF16
};

// kInvalidArgument naming the field when a spec cannot describe a model.
Status ValidateSpec(const ModelSpec& spec);

struct TensorSpec {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;

  uint64_t size() const;  // bytes
};

// The model's tensors in forward order. Precondition: ValidateSpec is OK.
std::vector<TensorSpec> ModelTensors(const ModelSpec& spec);
// Sum of the tensors' sizes.
uint64_t ModelTensorBytes(const ModelSpec& spec);

// Bytes [offset, offset + out.size()) of the tensor named `name` of `dtype`.
void FillTensorBytes(std::string_view name, Dtype dtype, uint64_t offset, std::span<std::byte> out);
// All `size` bytes of that tensor.
std::string ExpectedTensorBytes(std::string_view name, Dtype dtype, uint64_t size);
std::string ExpectedTensorBytes(const TensorSpec& tensor);

struct ShardPlan {
  std::string file_name;            // "model-00001-of-00004.safetensors" or "model.safetensors"
  std::vector<TensorInfo> tensors;  // storage order, offsets relative to the data section
  std::string header;               // the first header.size() bytes of the file
  uint64_t file_size = 0;
};

struct CheckpointPlan {
  std::vector<ShardPlan> shards;
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  uint64_t total_size = 0;                        // sum of tensor sizes
  // A layer group whose tensors lie in two shards ("model.layers.1."); empty
  // with a single shard.
  std::string split_group;
};

struct WriteOptions {
  int num_shards = 1;
  std::filesystem::path dir;      // WriteCheckpoint only
  bool write_index = true;        // model.safetensors.index.json, when num_shards > 1
  bool write_extra_files = true;  // config.json, generation_config.json, tokenizer.json
  bool sort_by_name_in_file = true;  // false: store each shard's tensors in forward order
};

StatusOr<CheckpointPlan> PlanCheckpoint(const ModelSpec& spec, const WriteOptions& options);

// The contents of the small JSON files a checkpoint directory holds.
std::string IndexJson(const CheckpointPlan& plan);
std::string ConfigJson(const ModelSpec& spec);
std::string GenerationConfigJson(const ModelSpec& spec);
std::string TokenizerJson(const ModelSpec& spec);

// Every file of the checkpoint, name -> bytes, in memory (small models only).
StatusOr<std::map<std::string, std::string>> BuildCheckpointFiles(const ModelSpec& spec,
                                                                  const WriteOptions& options);

// Puts BuildCheckpointFiles into `store` under `prefix` ("" or "models/x/").
StatusOr<CheckpointPlan> PutCheckpoint(MemoryStore& store, std::string_view prefix,
                                       const ModelSpec& spec, const WriteOptions& options);

struct WrittenCheckpoint {
  CheckpointPlan plan;
  std::vector<std::pair<std::filesystem::path, uint64_t>> files;  // path, bytes
};

// Writes the checkpoint into options.dir (created if missing), streaming tensor
// bytes, so it also serves for multi-GiB test data.
StatusOr<WrittenCheckpoint> WriteCheckpoint(const ModelSpec& spec, const WriteOptions& options);

// For crafting small files in tests.
struct RawTensor {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;
  // The tensor's data; its length sets data_offsets, whatever the shape says.
  // When nullopt, ExpectedTensorBytes of the shape's size.
  std::optional<std::string> bytes;
};

// A safetensors file holding `tensors` in the given order.
std::string BuildSafetensorsFile(const std::vector<RawTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata = {});

// A file made of the 8-byte length of `json`, `json` itself (as given: no
// padding, no validation) and `data_bytes` zero bytes: for malformed headers.
std::string FileWithHeaderJson(std::string_view json, uint64_t data_bytes);

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_CHECKPOINT_GEN_H_
