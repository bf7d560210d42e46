// Which ggml type each tensor of a GGUF file gets, as llama.cpp's own tools
// choose it:
//  - F32, F16, BF16 and Q8_0 files as convert_hf_to_gguf.py writes them with
//    --outtype f32 / f16 / bf16 / q8_0 (conversion/base.py prepare_tensors);
//  - Q4_K_M as llama-quantize makes it from the converter's F16 or BF16 file
//    with no importance matrix and no overrides (src/llama-quant.cpp:
//    tensor_allows_quantization, llama_tensor_get_type_impl,
//    tensor_type_fallback).
//
// The rules are those of the llama.cpp release node-llama-cpp 3.21 ships
// (its llama/llama.cpp.info.json names it). Differences from older releases
// worth knowing: llama-quantize sends a fused attn_qkv through the attn_v
// rules (Q6_K on use_more_bits' layers, else Q4_K), where releases before the
// tensor categories gave it Q5_K.
//
// Thread-safety: pure functions over constant tables; safe from any thread.
#ifndef TENSORFS_CORE_GGUF_TYPE_CHOICE_H_
#define TENSORFS_CORE_GGUF_TYPE_CHOICE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/gguf/ggml_types.h"

namespace tensorfs {

// general.file_type (llama.h's LLAMA_FTYPE).
enum class GgufFileType : uint32_t {
  kAllF32 = 0,
  kMostlyF16 = 1,
  kMostlyQ8_0 = 7,
  kMostlyQ4_K_M = 15,
  kMostlyBF16 = 32,
};

// "F32", "F16", "Q8_0", "Q4_K_M", "BF16": the suffix llama.cpp's tools give
// such files (NAME-Q4_K_M.gguf).
std::string_view GgufFileTypeName(GgufFileType file_type);

struct TensorTypeQuery {
  std::string name;           // the GGUF name, "blk.3.attn_v.weight"
  std::vector<uint64_t> ne;   // GGUF order (ne[0] = the row length), as the converter writes it
  uint32_t block_count = 0;   // layers
  uint32_t expert_count = 0;  // 0 for dense models
  bool has_output = true;     // false when embeddings are tied (no output.weight)
  // For Q4_K_M only: llama-quantize bumps attn_v from Q4_K to Q5_K in models it
  // types as 70B (arch "llama" with 80 layers and grouped-query attention;
  // "qwen2", "deci" and "olmo" with 80 layers). Empty / 0: not such a model.
  std::string arch;
  uint32_t head_count = 0;
  uint32_t head_count_kv = 0;
  // For Q4_K_M only: the file llama-quantize starts from, kMostlyF16 or
  // kMostlyBF16 (a bf16 checkpoint's). The tensors it does not quantize keep
  // their type in that file; the ones it quantizes start from that file's
  // values (so an f32 checkpoint's weights are rounded to F16 first, exactly
  // as the converter's F16 file holds them, before QuantizeBlocks).
  GgufFileType quantize_from = GgufFileType::kMostlyF16;
};

// The type this tensor gets in a file of `file_type`.
//  - Converter outtypes: 1-D tensors, names ending in "_norm.weight", names
//    not ending in ".weight" (biases) and the converter's F32 list
//    (ffn_gate_inp, ffn_gate_inp_shexp, position_embd, token_types, ...) stay
//    F32; the rest take the outtype, Q8_0 falling back to F16 when ne[0] is
//    not a multiple of 32.
//  - Q4_K_M: what llama-quantize does not quantize keeps the quantize_from
//    file's type; the rest default to Q4_K, with output.weight (or a tied
//    token_embd) Q6_K (Q8_0 when ne[0] % 256 != 0); attn_v, attn_qkv and
//    attn_kv_b Q6_K on use_more_bits' layers (the first and last eighth, and
//    every third between), Q5_K in a 70B, Q8_0 with 8 experts; ffn_down Q6_K
//    on use_more_bits' layers; attn_k Q8_0 and attn_output Q5_K with 8
//    experts; then the shape fallbacks (Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K ->
//    Q8_0, and F16 when even a 32-block does not divide ne[0]).
// Preconditions: block_count > 0 for Q4_K_M; a tensor of a block is named
// "blk.N." with N < block_count and each block has at most one attn_v-like and
// one dense ffn_down tensor (so llama-quantize's running counters equal N), as
// in every architecture tensorfs converts.
GgmlType ChooseType(GgufFileType file_type, const TensorTypeQuery& query);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_GGUF_TYPE_CHOICE_H_
