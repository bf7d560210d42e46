// What a checkpoint directory's GGUF files hold, decided from its config.json,
// its safetensors headers and its converted vocabulary alone (no tensor data):
// the GGUF architecture and its metadata, and every GGUF tensor with its
// shape and where its values come from. core/views/gguf_view.h makes the
// files from it.
//
// It follows llama.cpp's convert_hf_to_gguf.py (LlamaModel, Qwen2Model,
// Qwen3Model, Phi3MiniModel: set_gguf_parameters, modify_tensors,
// generate_extra_tensors) for the keys and tensors, the transformers config
// classes for what a config.json leaves out (the converter reads it through
// AutoConfig), and llama.cpp's loader (llama_model::load_tensors) for what a
// file must hold: every tensor it creates, of the shape it expects, and
// nothing else. A checkpoint that cannot be converted exactly, or whose file
// the loader would refuse or run wrongly, gives an error with one line saying
// why, which `tensorfs inspect` prints.
//
//   config.json "architectures"[0]     GGUF arch   notes
//   LlamaForCausalLM, MistralForCausalLM  llama    q/k_proj rows permuted (rotate-half
//                                                  to interleaved pairs); llama3 rope
//                                                  gives rope_freqs.weight
//   Qwen2ForCausalLM                   qwen2       q/k/v biases required
//   Qwen3ForCausalLM                   qwen3       q/k norms, head_dim
//   Phi3ForCausalLM                    phi3        fused attn_qkv and ffn_up (gate and
//                                                  up), longrope factors as tensors
//
// Thread-safety: pure functions; a GgufModel is a plain value.
#ifndef TENSORFS_CORE_VIEWS_GGUF_MODEL_H_
#define TENSORFS_CORE_VIEWS_GGUF_MODEL_H_

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/gguf/gguf_format.h"
#include "core/gguf/type_choice.h"
#include "core/safetensors/checkpoint.h"
#include "core/util/status.h"

namespace tensorfs {

// One tensor of the GGUF files.
struct GgufTensorPlan {
  std::string name;           // "blk.0.attn_q.weight"
  std::vector<uint64_t> ne;   // GGUF order: the HF shape reversed
  // The source tensor; null for a tensor the converter computes (rope_freqs,
  // longrope factors), whose F32 values are `values`.
  const CatalogEntry* source = nullptr;
  std::vector<float> values;
  // Non-zero: rows permuted within each of this many heads as the converter's
  // LlamaModel.permute does: row h*d + 2i + j of the output is row
  // h*d + j*d/2 + i of the source (d = rows / heads, i < d/2, j < 2).
  uint64_t permute_heads = 0;
};

struct GgufModel {
  std::string arch;      // "llama", "qwen2", "qwen3", "phi3"
  std::string name;      // general.name: the checkpoint directory's name
  // Every key but the per-file general.file_type (written as the F16 file's,
  // to be replaced in place), architecture keys, tokenizer keys and
  // general.quantization_version, in the converter's order.
  GgufMetadata metadata;
  std::vector<GgufTensorPlan> tensors;  // in file order: computed ones, then the source's storage order
  uint32_t block_count = 0;
  uint32_t head_count = 0;
  uint32_t head_count_kv = 0;
  bool tied = false;     // no output.weight: the loader uses token_embd
  // The file the converter's "auto" outtype writes: kMostlyBF16 when the
  // first 2-D weight is bf16, else kMostlyF16.
  GgufFileType float_file_type = GgufFileType::kMostlyF16;

  // The three files of @gguf/: the F16 (or BF16) file, Q8_0, Q4_K_M.
  std::vector<GgufFileType> file_types() const {
    return {float_file_type, GgufFileType::kMostlyQ8_0, GgufFileType::kMostlyQ4_K_M};
  }
  // Each tensor's type in a file of `file_type` (ChooseType).
  GgmlType TypeOf(const GgufTensorPlan& tensor, GgufFileType file_type) const;
};

// The GGUF architecture that config.json's "architectures"[0] names, or
// kUnimplemented saying which architecture it is and which are supported.
StatusOr<std::string> GgufArchitecture(const nlohmann::json& config);

// The metadata keys and tensors of `checkpoint` as GGUF `arch` (from
// GgufArchitecture), with the tokenizer keys of `vocab` (ConvertTokenizer's).
// `name` becomes general.name. Fails with one line saying why: a key the
// loader needs missing from config.json, an unknown or unsupported rope
// scaling type, a tensor with no GGUF name or of another shape than the
// loader expects, a required tensor missing, a vocabulary that does not
// match the embedding's rows, a dtype other than F32, F16 and BF16.
StatusOr<GgufModel> PlanGgufModel(const nlohmann::json& config, std::string_view arch, const Checkpoint& checkpoint,
                                  const GgufMetadata& vocab_metadata, uint64_t vocab_tokens, std::string name);

// "NAME-Q4_K_M.gguf".
std::string GgufFileName(std::string_view name, GgufFileType file_type);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_GGUF_MODEL_H_
