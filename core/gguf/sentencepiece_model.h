// A SentencePiece tokenizer.model (sentencepiece_model.proto's ModelProto),
// parsed without the protobuf library: the pieces with their scores and types,
// and the trainer and normalizer settings that decide whether llama.cpp's
// SentencePiece tokenizer reproduces sentencepiece's.
//
// Wire format (proto2): a message is a sequence of (tag varint = field << 3 |
// wire type, value); wire types 0 varint, 1 fixed64, 2 length-delimited, 5
// fixed32. Fields read here:
//   ModelProto      1 repeated SentencePiece pieces, 2 TrainerSpec, 3 NormalizerSpec
//   SentencePiece   1 string piece, 2 float score (fixed32), 3 enum type (NORMAL 1)
//   TrainerSpec     3 model_type (UNIGRAM 1, BPE 2, WORD 3, CHAR 4),
//                   24 treat_whitespace_as_suffix, 35 byte_fallback
//   NormalizerSpec  1 name, 2 precompiled_charsmap, 3 add_dummy_prefix,
//                   4 remove_extra_whitespaces, 5 escape_whitespaces,
//                   6 normalization_rule_tsv
// Other fields are skipped by their wire type. A truncated or malformed
// message (a length past its end, a varint over 10 bytes, a group or unknown
// wire type, a known field of the wrong wire type) is an error.
//
// Thread-safety: pure function; the result is a plain value.
#ifndef TENSORFS_CORE_GGUF_SENTENCEPIECE_MODEL_H_
#define TENSORFS_CORE_GGUF_SENTENCEPIECE_MODEL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/util/status.h"

namespace tensorfs {

struct SentencePieceModel {
  // SentencePiece.Type, the same codes as GGUF's token types.
  enum Type : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };
  enum ModelType : int32_t { kUnigram = 1, kBpe = 2, kWord = 3, kChar = 4 };

  struct Piece {
    std::string piece;
    float score = 0.0f;
    int32_t type = kNormal;
  };
  std::vector<Piece> pieces;  // id order

  // TrainerSpec, with proto defaults for absent fields.
  int32_t model_type = kUnigram;
  bool treat_whitespace_as_suffix = false;
  bool byte_fallback = false;

  // NormalizerSpec, with proto defaults for absent fields.
  std::string normalizer_name;
  std::string precompiled_charsmap;
  std::string normalization_rule_tsv;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

// Parses a tokenizer.model's bytes. Errors name the field and offset: a
// tokenizer.model that is cut short says so.
StatusOr<SentencePieceModel> ParseSentencePieceModel(std::string_view bytes);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_GGUF_SENTENCEPIECE_MODEL_H_
