#include "core/gguf/sentencepiece_model.h"

#include <bit>
#include <utility>

namespace tensorfs {
namespace {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// One field of a message: its number, wire type, and value (the integer of a
// varint or fixed field, the bytes of a length-delimited one).
struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  uint64_t integer = 0;
  std::string_view bytes;
};

class MessageReader {
 public:
  // `what` names the message in errors ("tokenizer.model's piece #5");
  // `base` is its offset in the file.
  MessageReader(std::string_view data, std::string what, size_t base)
      : data_(data), what_(std::move(what)), base_(base) {}

  bool done() const { return pos_ == data_.size(); }

  StatusOr<Field> Next() {
    Field f;
    const size_t start = pos_;
    ASSIGN_OR_RETURN(const uint64_t tag, Varint());
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire_type = static_cast<uint32_t>(tag & 7);
    if (f.number == 0 || (tag >> 3) > 0x1fffffff) return Error(start, "a field number of " + std::to_string(tag >> 3));
    switch (f.wire_type) {
      case kVarint: {
        ASSIGN_OR_RETURN(f.integer, Varint());
        break;
      }
      case kFixed64:
      case kFixed32: {
        const size_t n = f.wire_type == kFixed64 ? 8 : 4;
        if (data_.size() - pos_ < n) return Error(start, "field " + std::to_string(f.number) + " cut short");
        for (size_t i = 0; i < n; ++i) f.integer |= uint64_t{static_cast<uint8_t>(data_[pos_ + i])} << (8 * i);
        pos_ += n;
        break;
      }
      case kLengthDelimited: {
        ASSIGN_OR_RETURN(const uint64_t n, Varint());
        if (n > data_.size() - pos_) {
          return Error(start, "field " + std::to_string(f.number) + " of " + std::to_string(n) + " bytes with " +
                                  std::to_string(data_.size() - pos_) + " left");
        }
        f.bytes = data_.substr(pos_, n);
        pos_ += n;
        break;
      }
      default:
        return Error(start, "field " + std::to_string(f.number) + " of wire type " + std::to_string(f.wire_type) +
                                " (groups are not used by sentencepiece)");
    }
    return f;
  }

  // The absolute offset of a length-delimited field's bytes.
  size_t OffsetOf(std::string_view inner) const { return base_ + static_cast<size_t>(inner.data() - data_.data()); }

  Status Error(size_t at, const std::string& problem) const {
    return CorruptError(what_ + " is malformed at byte " + std::to_string(base_ + at) + ": " + problem);
  }

  // A bool (varint) or string (length-delimited) field's value, checking its
  // wire type.
  Status Read(const Field& f, const char* name, bool* out) const {
    RETURN_IF_ERROR(Expect(f, kVarint, name));
    *out = f.integer != 0;
    return OkStatus();
  }
  Status Read(const Field& f, const char* name, std::string* out) const {
    RETURN_IF_ERROR(Expect(f, kLengthDelimited, name));
    *out = std::string(f.bytes);
    return OkStatus();
  }

  // A field of the expected wire type, or an error naming it.
  Status Expect(const Field& f, uint32_t wire_type, const char* name) const {
    if (f.wire_type == wire_type) return OkStatus();
    return Error(pos_, std::string(name) + " (field " + std::to_string(f.number) + ") has wire type " +
                           std::to_string(f.wire_type) + ", not " + std::to_string(wire_type));
  }

 private:
  StatusOr<uint64_t> Varint() {
    uint64_t v = 0;
    const size_t start = pos_;
    for (int shift = 0; shift < 70; shift += 7) {
      if (pos_ == data_.size()) return Error(start, "a number cut short");
      const uint8_t b = static_cast<uint8_t>(data_[pos_++]);
      if (shift == 63 && b > 1) return Error(start, "a number over 64 bits");
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
    return Error(start, "a number over 10 bytes");
  }

  std::string_view data_;
  std::string what_;
  size_t base_;
  size_t pos_ = 0;
};

Status ParsePiece(std::string_view bytes, size_t base, size_t index, SentencePieceModel::Piece* piece) {
  MessageReader r(bytes, "tokenizer.model's piece #" + std::to_string(index), base);
  bool has_piece = false;
  while (!r.done()) {
    ASSIGN_OR_RETURN(const Field f, r.Next());
    switch (f.number) {
      case 1:
        RETURN_IF_ERROR(r.Read(f, "piece", &piece->piece));
        has_piece = true;
        break;
      case 2:
        RETURN_IF_ERROR(r.Expect(f, kFixed32, "score"));
        piece->score = std::bit_cast<float>(static_cast<uint32_t>(f.integer));
        break;
      case 3:
        RETURN_IF_ERROR(r.Expect(f, kVarint, "type"));
        piece->type = static_cast<int32_t>(f.integer);
        break;
      default:
        break;
    }
  }
  if (!has_piece) {
    return CorruptError("tokenizer.model's piece #" + std::to_string(index) + " (at byte " + std::to_string(base) +
                        ") has no text");
  }
  return OkStatus();
}

Status ParseTrainerSpec(std::string_view bytes, size_t base, SentencePieceModel* model) {
  MessageReader r(bytes, "tokenizer.model's trainer_spec", base);
  while (!r.done()) {
    ASSIGN_OR_RETURN(const Field f, r.Next());
    if (f.number == 3) {
      RETURN_IF_ERROR(r.Expect(f, kVarint, "model_type"));
      model->model_type = static_cast<int32_t>(f.integer);
    } else if (f.number == 24) {
      RETURN_IF_ERROR(r.Read(f, "treat_whitespace_as_suffix", &model->treat_whitespace_as_suffix));
    } else if (f.number == 35) {
      RETURN_IF_ERROR(r.Read(f, "byte_fallback", &model->byte_fallback));
    }
  }
  return OkStatus();
}

Status ParseNormalizerSpec(std::string_view bytes, size_t base, SentencePieceModel* model) {
  MessageReader r(bytes, "tokenizer.model's normalizer_spec", base);
  while (!r.done()) {
    ASSIGN_OR_RETURN(const Field f, r.Next());
    Status s;
    switch (f.number) {
      case 1: s = r.Read(f, "name", &model->normalizer_name); break;
      case 2: s = r.Read(f, "precompiled_charsmap", &model->precompiled_charsmap); break;
      case 3: s = r.Read(f, "add_dummy_prefix", &model->add_dummy_prefix); break;
      case 4: s = r.Read(f, "remove_extra_whitespaces", &model->remove_extra_whitespaces); break;
      case 5: s = r.Read(f, "escape_whitespaces", &model->escape_whitespaces); break;
      case 6: s = r.Read(f, "normalization_rule_tsv", &model->normalization_rule_tsv); break;
      default: break;
    }
    RETURN_IF_ERROR(s);
  }
  return OkStatus();
}

}  // namespace

StatusOr<SentencePieceModel> ParseSentencePieceModel(std::string_view bytes) {
  SentencePieceModel model;
  MessageReader r(bytes, "tokenizer.model", 0);
  while (!r.done()) {
    ASSIGN_OR_RETURN(const Field f, r.Next());
    switch (f.number) {
      case 1: {
        RETURN_IF_ERROR(r.Expect(f, kLengthDelimited, "pieces"));
        SentencePieceModel::Piece piece;
        RETURN_IF_ERROR(ParsePiece(f.bytes, r.OffsetOf(f.bytes), model.pieces.size(), &piece));
        model.pieces.push_back(std::move(piece));
        break;
      }
      case 2:
        RETURN_IF_ERROR(r.Expect(f, kLengthDelimited, "trainer_spec"));
        RETURN_IF_ERROR(ParseTrainerSpec(f.bytes, r.OffsetOf(f.bytes), &model));
        break;
      case 3:
        RETURN_IF_ERROR(r.Expect(f, kLengthDelimited, "normalizer_spec"));
        RETURN_IF_ERROR(ParseNormalizerSpec(f.bytes, r.OffsetOf(f.bytes), &model));
        break;
      default:
        break;
    }
  }
  if (model.pieces.empty()) return CorruptError("tokenizer.model holds no pieces");
  return model;
}

}  // namespace tensorfs
