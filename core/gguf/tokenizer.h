// A checkpoint's tokenizer as the tokenizer.* keys of a GGUF file, written as
// convert_hf_to_gguf.py writes them (conversion/base.py's get_vocab_base,
// _set_vocab_gpt2, _create_vocab_sentencepiece; gguf-py's SpecialVocab), or
// not at all: whatever llama.cpp would then tokenize differently from the
// checkpoint's own tokenizer is refused with one line saying why, which
// `tensorfs inspect` shows as the reason a directory has no @gguf/.
//
// Two kinds of vocabulary:
//  - byte-level BPE from tokenizer.json (Llama 3, Qwen 2/3, Mistral-Nemo):
//    model "gpt2"; the vocabulary in id order, holes up to config's vocab_size
//    as "[PAD<i>]" (UNUSED); added tokens CONTROL when special or looking
//    special ("<|...|>", "<unused...>", ...), else USER_DEFINED with "▁" as a
//    space; the merges ("a b", or the newer pairs joined with a space, spaces
//    inside a part written as "Ġ"); tokenizer.ggml.pre picked from the
//    pre-tokenizer's Split patterns by a table of the pre-tokenizers llama.cpp
//    implements (llama-bpe, qwen2, qwen35, tekken), refused when they are not
//    there, when the tokenizer.json's BPE treats whole-word tokens
//    (ignore_merges) differently from that pre-tokenizer, or when its
//    normalizer is one llama.cpp does not apply (Qwen's NFC is accepted, as
//    the converter does: llama.cpp leaves text as it comes);
//  - SentencePiece from tokenizer.model (Llama 2, Mistral up to v0.3, Gemma,
//    Phi-3): model "llama", pre "default", every piece with its score and
//    type (USER_DEFINED pieces become NORMAL, as the converter writes them),
//    added_tokens.json and tokenizer_config.json's added_tokens_decoder on
//    top, padding to vocab_size. Refused unless llama.cpp's tokenizer gives
//    sentencepiece's result: a BPE model with byte fallback and all 256 byte
//    pieces, no normalization rules, whitespace kept, the dummy prefix as
//    llama.cpp adds it (add_space_prefix, false for Gemma), every user-defined
//    piece among the added tokens, and the unk/bos/eos ids llama.cpp assumes
//    when no file names them (0, 1, 2).
// A tokenizer.json-only Llama tokenizer (BPE with byte_fallback, no
// tokenizer.model) is refused: the converter writes flat -1000 scores for it,
// which llama.cpp then merges in another order than the Hugging Face
// tokenizer. So are WordPiece and Unigram tokenizer.json files, duplicate
// tokens, a vocabulary larger than config's vocab_size, a malformed
// tokenizer.model, and missing files.
//
// Special tokens, add_bos/add_eos/add_sep, the chat template: SpecialVocab's
// rules (tokenizer_config.json's bos/eos/unk/sep/pad/cls/mask tokens matched
// by content against tokenizer.json's added tokens, its add_*_token bools,
// the post_processor's TemplateProcessing or RobertaProcessing, config.json's
// *_token_id when an int; chat_template from tokenizer_config.json, else
// chat_template.jinja). special_tokens_map.json is not read: the converter does
// not read it either.
//
// Thread-safety: pure function.
#ifndef TENSORFS_CORE_GGUF_TOKENIZER_H_
#define TENSORFS_CORE_GGUF_TOKENIZER_H_

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/gguf/gguf_format.h"
#include "core/util/status.h"

namespace tensorfs {

struct TokenizerFiles {  // the directory's files, as read; absent ones are nullopt
  std::optional<std::string> tokenizer_json, tokenizer_config_json, tokenizer_model, added_tokens_json,
      special_tokens_map_json, chat_template_jinja;
};

struct GgufVocab {
  GgufMetadata metadata;  // every tokenizer.* key the converter writes (model, pre, tokens,
                          // scores, token_type, merges, special token ids, add_bos/eos,
                          // add_space_prefix, chat_template)
  uint64_t tokens = 0;    // the length of tokenizer.ggml.tokens (= token_embd's rows)
};

// `config` is config.json parsed (vocab_size and the *_token_id keys are read
// from it, or from its text_config when it has none); `arch` the GGUF
// architecture ("llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe", "phi3",
// "gemma2", "gemma3"), which decides the converter's vocabulary rules. Fails,
// with one line saying why, whenever the tokenizer cannot be converted
// exactly.
StatusOr<GgufVocab> ConvertTokenizer(const TokenizerFiles& files, const nlohmann::json& config,
                                     std::string_view arch);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_GGUF_TOKENIZER_H_
