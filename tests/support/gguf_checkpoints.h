// Small Hugging Face checkpoints of the architectures the @gguf view
// converts (Llama, Mistral, Qwen2, Qwen3, Phi-3), with a byte-level BPE
// tokenizer.json that the tokenizer conversion accepts, for the GGUF tests.
//
// Tensor names and shapes are those of the Hugging Face models
// (q_proj/k_proj/v_proj, Qwen2's q/k/v biases, Qwen3's q_norm/k_norm and
// head_dim, Phi-3's fused qkv_proj and gate_up_proj); tensor values come from
// checkpoint_gen.h's FillTensorBytes (finite values in [2^-8, 1) with random
// sign). The tokenizer: the 256 GPT-2 byte symbols, `merges` merges of two
// letters, Phi-3's </s>, <unk>, <s> and <|endoftext|> for that architecture
// (llama.cpp looks them up in a model named like Phi-3), and two special
// added tokens (<|begin_of_text|>, <|end_of_text|>) last; its pre-tokenizer is Llama 3's Split pattern
// (llama-bpe) or Qwen2's (qwen2), as the architecture's real models have.
//
// Thread-safety: free functions over their arguments.
#ifndef TENSORFS_TESTS_SUPPORT_GGUF_CHECKPOINTS_H_
#define TENSORFS_TESTS_SUPPORT_GGUF_CHECKPOINTS_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/safetensors/dtype.h"
#include "tests/support/checkpoint_gen.h"

namespace tensorfs::testing {

struct GgufSpec {
  std::string architecture = "LlamaForCausalLM";  // config.json "architectures"[0]
  uint64_t layers = 2;
  uint64_t hidden = 256;  // a multiple of 256, so that Q4_K's blocks fit the rows
  uint64_t intermediate = 512;
  uint64_t heads = 4;
  uint64_t kv_heads = 2;
  uint64_t head_dim = 0;  // 0: hidden / heads; Qwen3 writes it to config.json either way
  uint64_t merges = 8;    // the vocabulary: 256 + merges + 2 tokens
  Dtype dtype = Dtype::BF16;
  bool tied = false;      // no lm_head.weight, tie_word_embeddings
  int shards = 1;         // several: with model.safetensors.index.json
  // Merged into config.json last (a null value removes the key).
  nlohmann::json config_patch = nlohmann::json::object();

  uint64_t vocab() const { return 256 + merges + (architecture == "Phi3ForCausalLM" ? 4 : 0) + 2; }
  uint64_t head_size() const { return head_dim != 0 ? head_dim : hidden / heads; }
};

// The checkpoint's tensors in forward order (values: ExpectedTensorBytes).
std::vector<TensorSpec> GgufSpecTensors(const GgufSpec& spec);

// config.json, as the model's own would be (before config_patch).
nlohmann::json GgufConfig(const GgufSpec& spec);

// tokenizer.json and tokenizer_config.json.
std::string GgufTokenizerJson(const GgufSpec& spec);
std::string GgufTokenizerConfigJson(const GgufSpec& spec);

// Every file of the checkpoint directory: name -> bytes.
std::map<std::string, std::string> GgufCheckpointFiles(const GgufSpec& spec);

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_SUPPORT_GGUF_CHECKPOINTS_H_
