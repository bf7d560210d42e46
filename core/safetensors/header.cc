#include "core/safetensors/header.h"

#include <algorithm>
#include <limits>
#include <set>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

namespace tensorfs {
namespace {

using Json = nlohmann::json;

Status FileError(std::string_view file, std::string_view what) {
  return CorruptError(std::string(file) + ": " + std::string(what));
}

Status TensorError(std::string_view file, std::string_view tensor, std::string_view what) {
  return CorruptError(std::string(file) + ": tensor '" + std::string(tensor) + "': " +
                      std::string(what));
}

std::string RangeText(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

std::string OffsetsText(uint64_t begin, uint64_t end) { return "data_offsets " + RangeText(begin, end); }

// Offset of the first byte that does not belong to a well-formed UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing above
// U+10FFFF) or is NUL, or nullopt when `s` is valid.
std::optional<size_t> FindInvalidUtf8(std::span<const std::byte> s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    if (b0 == 0) return i;  // valid UTF-8, but never valid in JSON text, and the parser would stop there
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      len = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      len = 3;
      if (b0 == 0xE0) lo = 0xA0;  // overlong
      if (b0 == 0xED) hi = 0x9F;  // surrogates
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      len = 4;
      if (b0 == 0xF0) lo = 0x90;  // overlong
      if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + len > n) return i;
    const auto b1 = static_cast<uint8_t>(s[i + 1]);
    if (b1 < lo || b1 > hi) return i;
    for (size_t k = 2; k < len; ++k) {
      const auto bk = static_cast<uint8_t>(s[i + k]);
      if (bk < 0x80 || bk > 0xBF) return i;
    }
    i += len;
  }
  return std::nullopt;
}

// One JSON scalar as the SAX parser reports it; Describe() words it for a
// message only when one is needed.
struct Scalar {
  enum Kind { kNull, kBoolean, kInteger, kUnsigned, kFloat, kString } kind = kNull;
  int64_t integer = 0;
  uint64_t unsigned_value = 0;
  std::string* text = nullptr;  // kString: the value (may be moved from); kFloat: the number as written

  std::string Describe() const {
    switch (kind) {
      case kNull: return "null";
      case kBoolean: return "a boolean";
      case kInteger: return "the number " + std::to_string(integer);
      case kUnsigned: return "the number " + std::to_string(unsigned_value);
      case kFloat: return "the number " + *text;
      case kString: return "a string";
    }
    return "an unknown JSON value";
  }
};

std::string DescribeStructure(bool object) { return object ? "an object" : "an array"; }

// Builds the tensor table while nlohmann's SAX parser reads the header, so
// that parsing takes time linear in the header's size and keeps nothing but
// the table: values the table does not need are skipped as they stream past,
// and every limit is checked the moment it is crossed. The first problem
// stops the parser; error() says what it was.
//
// The header is {"name": entry, ..., "__metadata__": {"key": "value", ...}}
// with entry {"dtype": "F32", "shape": [d0, ...], "data_offsets": [b, e]};
// entries may carry other keys, whose values are skipped. A value of the
// wrong type is skipped too before it is reported, so that the depth limit
// speaks first about a deeply nested one.
class HeaderHandler {
 public:
  using number_integer_t = Json::number_integer_t;
  using number_unsigned_t = Json::number_unsigned_t;
  using number_float_t = Json::number_float_t;
  using string_t = Json::string_t;
  using binary_t = Json::binary_t;

  HeaderHandler(std::string_view file, SafetensorsHeader& out) : file_(file), out_(out) {}

  const Status& error() const { return error_; }
  bool done() const { return where_ == Where::kDone; }

  // ---- nlohmann::json_sax interface ----
  bool null() { return OnScalar(Scalar{.kind = Scalar::kNull}); }
  bool boolean(bool) { return OnScalar(Scalar{.kind = Scalar::kBoolean}); }
  bool number_integer(number_integer_t v) { return OnScalar(Scalar{.kind = Scalar::kInteger, .integer = v}); }
  bool number_unsigned(number_unsigned_t v) {
    return OnScalar(Scalar{.kind = Scalar::kUnsigned, .unsigned_value = v});
  }
  bool number_float(number_float_t, const string_t& raw) {
    std::string text = raw;
    return OnScalar(Scalar{.kind = Scalar::kFloat, .text = &text});
  }
  bool string(string_t& v) { return OnScalar(Scalar{.kind = Scalar::kString, .text = &v}); }
  bool binary(binary_t&) { return Fail(FileError(file_, "header holds binary data, which JSON text cannot")); }
  bool start_object(std::size_t) { return OnStart(true); }
  bool start_array(std::size_t) { return OnStart(false); }
  bool end_object() { return OnEnd(); }
  bool end_array() { return OnEnd(); }
  bool key(string_t& k) { return OnKey(k); }
  bool parse_error(std::size_t, const std::string&, const Json::exception& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag.
    if (size_t close = what.find("] "); what.starts_with("[json.exception") && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    return Fail(FileError(file_, "header is not valid JSON: " + what));
  }

 private:
  // Where the parser is: what the next event means.
  enum class Where {
    kRoot,                // before the top-level value
    kTop,                 // in the top-level object, before a key
    kMetadataValue,       // after "__metadata__":
    kMetadata,            // in "__metadata__", before a key
    kMetadataEntryValue,  // after a key of "__metadata__"
    kEntryValue,          // after a tensor name
    kEntry,               // in a tensor's entry, before a key
    kDtypeValue,          // after "dtype":
    kShapeValue,          // after "shape":
    kOffsetsValue,        // after "data_offsets":
    kOtherValue,          // after any other key of an entry
    kShape,               // in the shape array
    kOffsets,             // in the data_offsets array
    kDone,                // after the top-level object
  };

  bool Fail(Status status) {
    error_ = std::move(status);
    return false;
  }

  Status EntryError(std::string_view what) const { return TensorError(file_, entry_.name, what); }

  std::string EntryShape(const std::string& found) const {
    return "entry must be an object with \"dtype\", \"shape\" and \"data_offsets\", found " + found;
  }
  std::string DtypeShape(const std::string& found) const {
    return "\"dtype\" must be a string such as \"BF16\", found " + found;
  }
  std::string ShapeShape(const std::string& found) const {
    return "\"shape\" must be an array of non-negative integers, found " + found;
  }
  std::string OffsetsShape(const std::string& found) const {
    return "\"data_offsets\" must be [begin, end] with non-negative integers, found " + found;
  }
  std::string DimensionError(const std::string& found) const {
    return "shape has " + found + " at position " + std::to_string(entry_.shape.size()) +
           "; dimensions must be non-negative integers";
  }
  std::string MetadataValueError(const std::string& found) const {
    return "\"__metadata__\" key '" + metadata_key_ + "' has " + found +
           " as its value; metadata values must be strings";
  }
  Status TopLevelError(const std::string& found) const {
    return FileError(file_, "header must be a JSON object mapping tensor names to entries, found " + found);
  }
  Status MetadataTypeError(const std::string& found) const {
    return FileError(file_, "\"__metadata__\" must be an object of string to string, found " + found);
  }

  // Skips the structured value that just started, then fails with `status`
  // (or, when it is OK, goes back to the entry the value belongs to).
  bool Skip(Status status) {
    skip_depth_ = 1;
    after_skip_ = std::move(status);
    return true;
  }

  bool OnScalar(const Scalar& v) {
    if (skip_depth_ > 0) return true;
    switch (where_) {
      case Where::kRoot:
        return Fail(TopLevelError(v.Describe()));
      case Where::kMetadataValue:
        if (v.kind != Scalar::kNull) return Fail(MetadataTypeError(v.Describe()));
        where_ = Where::kTop;  // the reference reads null as "no metadata"
        return true;
      case Where::kMetadataEntryValue:
        if (v.kind != Scalar::kString) return Fail(FileError(file_, MetadataValueError(v.Describe())));
        metadata_bytes_ += v.text->size();
        if (metadata_bytes_ > kMaxMetadataBytes) return Fail(MetadataBytesError());
        out_.metadata.emplace(std::move(metadata_key_), std::move(*v.text));
        where_ = Where::kMetadata;
        return true;
      case Where::kEntryValue:
        return Fail(EntryError(EntryShape(v.Describe())));
      case Where::kDtypeValue: {
        if (v.kind != Scalar::kString) return Fail(EntryError(DtypeShape(v.Describe())));
        std::optional<Dtype> dtype = ParseDtype(*v.text);
        if (!dtype) {
          std::string known;
          for (Dtype d : AllDtypes()) known += (known.empty() ? "" : ", ") + std::string(DtypeName(d));
          return Fail(EntryError("unknown dtype \"" + *v.text + "\" (known: " + known + ")"));
        }
        entry_.dtype = *dtype;
        where_ = Where::kEntry;
        return true;
      }
      case Where::kShapeValue:
        return Fail(EntryError(ShapeShape(v.Describe())));
      case Where::kOffsetsValue:
        return Fail(EntryError(OffsetsShape(v.Describe())));
      case Where::kOtherValue:
        where_ = Where::kEntry;
        return true;
      case Where::kShape:
        if (v.kind != Scalar::kUnsigned) return Fail(EntryError(DimensionError(v.Describe())));
        if (entry_.shape.size() >= kMaxShapeDims) {
          return Fail(EntryError("shape has more than " + std::to_string(kMaxShapeDims) +
                                 " dimensions, over the limit of " + std::to_string(kMaxShapeDims) +
                                 " dimensions per shape"));
        }
        entry_.shape.push_back(v.unsigned_value);
        return true;
      case Where::kOffsets:
        if (v.kind != Scalar::kUnsigned) {
          return Fail(EntryError(OffsetsShape("an array with " + v.Describe() + " at position " +
                                              std::to_string(offsets_seen_))));
        }
        if (offsets_seen_ >= 2) return Fail(EntryError(OffsetsShape("an array of more than 2 values")));
        (offsets_seen_ == 0 ? entry_.begin : entry_.end) = v.unsigned_value;
        ++offsets_seen_;
        return true;
      case Where::kTop:
      case Where::kMetadata:
      case Where::kEntry:
      case Where::kDone:
        break;
    }
    return Fail(InternalError("safetensors header parser: a value where a key was due"));
  }

  bool OnStart(bool object) {
    if (depth_ >= kMaxHeaderJsonDepth) {
      return Fail(FileError(file_, "header nests JSON deeper than " + std::to_string(kMaxHeaderJsonDepth) +
                                       " levels"));
    }
    ++depth_;
    if (skip_depth_ > 0) {
      ++skip_depth_;
      return true;
    }
    const std::string found = DescribeStructure(object);
    switch (where_) {
      case Where::kRoot:
        if (!object) return Skip(TopLevelError(found));
        where_ = Where::kTop;
        return true;
      case Where::kMetadataValue:
        if (!object) return Skip(MetadataTypeError(found));
        where_ = Where::kMetadata;
        return true;
      case Where::kMetadataEntryValue:
        return Skip(FileError(file_, MetadataValueError(found)));
      case Where::kEntryValue:
        if (!object) return Skip(EntryError(EntryShape(found)));
        where_ = Where::kEntry;
        return true;
      case Where::kDtypeValue:
        return Skip(EntryError(DtypeShape(found)));
      case Where::kShapeValue:
        if (object) return Skip(EntryError(ShapeShape(found)));
        entry_.shape.clear();
        where_ = Where::kShape;
        return true;
      case Where::kOffsetsValue:
        if (object) return Skip(EntryError(OffsetsShape(found)));
        offsets_seen_ = 0;
        where_ = Where::kOffsets;
        return true;
      case Where::kOtherValue:
        return Skip(OkStatus());
      case Where::kShape:
        return Skip(EntryError(DimensionError(found)));
      case Where::kOffsets:
        return Skip(EntryError(OffsetsShape("an array with " + found + " at position " +
                                            std::to_string(offsets_seen_))));
      case Where::kTop:
      case Where::kMetadata:
      case Where::kEntry:
      case Where::kDone:
        break;
    }
    return Fail(InternalError("safetensors header parser: a value where a key was due"));
  }

  bool OnEnd() {
    --depth_;
    if (skip_depth_ > 0) {
      if (--skip_depth_ > 0) return true;
      if (!after_skip_.ok()) return Fail(std::move(after_skip_));
      where_ = Where::kEntry;  // only the values of unknown entry keys are skipped without error
      return true;
    }
    switch (where_) {
      case Where::kTop:
        where_ = Where::kDone;
        return true;
      case Where::kMetadata:
        where_ = Where::kTop;
        return true;
      case Where::kEntry:
        return FinishEntry();
      case Where::kShape:
        where_ = Where::kEntry;
        return true;
      case Where::kOffsets:
        if (offsets_seen_ != 2) {
          return Fail(EntryError(OffsetsShape("an array of " + std::to_string(offsets_seen_) +
                                              (offsets_seen_ == 1 ? " value" : " values"))));
        }
        where_ = Where::kEntry;
        return true;
      default:
        break;
    }
    return Fail(InternalError("safetensors header parser: the end of a value that did not start"));
  }

  bool OnKey(string_t& k) {
    if (skip_depth_ > 0) return true;
    switch (where_) {
      case Where::kTop:
        if (k == kMetadataKey) {
          if (seen_metadata_) return Fail(FileError(file_, "header has \"__metadata__\" twice"));
          seen_metadata_ = true;
          where_ = Where::kMetadataValue;
          return true;
        }
        if (out_.tensors.size() >= kMaxTensorsPerHeader) {
          return Fail(FileError(file_, "header has more than " + std::to_string(kMaxTensorsPerHeader) +
                                           " tensors, over the limit of " +
                                           std::to_string(kMaxTensorsPerHeader) + " tensors per file"));
        }
        entry_ = TensorInfo{.name = std::move(k)};
        entry_keys_ = 0;
        other_keys_.clear();
        where_ = Where::kEntryValue;
        return true;
      case Where::kMetadata:
        if (out_.metadata.size() >= kMaxMetadataEntries) {
          return Fail(FileError(file_, "\"__metadata__\" has more than " + std::to_string(kMaxMetadataEntries) +
                                           " entries, over the limit of " +
                                           std::to_string(kMaxMetadataEntries) + " entries per file"));
        }
        if (out_.metadata.contains(k)) {
          return Fail(FileError(file_, "__metadata__ has key \"" + k + "\" twice"));
        }
        metadata_bytes_ += k.size();
        if (metadata_bytes_ > kMaxMetadataBytes) return Fail(MetadataBytesError());
        metadata_key_ = std::move(k);
        where_ = Where::kMetadataEntryValue;
        return true;
      case Where::kEntry: {
        unsigned bit = 0;
        if (k == "dtype") {
          bit = 1;
          where_ = Where::kDtypeValue;
        } else if (k == "shape") {
          bit = 2;
          where_ = Where::kShapeValue;
        } else if (k == "data_offsets") {
          bit = 4;
          where_ = Where::kOffsetsValue;
        } else {
          where_ = Where::kOtherValue;
        }
        const bool repeated = bit != 0 ? (entry_keys_ & bit) != 0 : !other_keys_.insert(k).second;
        if (repeated) return Fail(EntryError("has key \"" + k + "\" twice"));
        entry_keys_ |= bit;
        return true;
      }
      default:
        break;
    }
    return Fail(InternalError("safetensors header parser: a key outside an object"));
  }

  bool FinishEntry() {
    if ((entry_keys_ & 1) == 0) return Fail(EntryError("missing \"dtype\""));
    if ((entry_keys_ & 2) == 0) return Fail(EntryError("missing \"shape\""));
    if ((entry_keys_ & 4) == 0) return Fail(EntryError("missing \"data_offsets\""));
    if (entry_.end < entry_.begin) {
      return Fail(EntryError(OffsetsText(entry_.begin, entry_.end) + " end before they begin"));
    }
    out_.tensors.push_back(std::move(entry_));
    where_ = Where::kTop;
    return true;
  }

  Status MetadataBytesError() const {
    return FileError(file_, "\"__metadata__\" holds more than " + std::to_string(kMaxMetadataBytes) +
                                " bytes of keys and values, over the limit of " +
                                std::to_string(kMaxMetadataBytes) + " bytes per file");
  }

  const std::string_view file_;
  SafetensorsHeader& out_;
  Status error_;
  Where where_ = Where::kRoot;
  int depth_ = 0;       // containers open
  int skip_depth_ = 0;  // containers open in the value being skipped; 0: not skipping
  Status after_skip_;   // what to report once the skipped value ends (OK: nothing)
  bool seen_metadata_ = false;
  std::string metadata_key_;
  uint64_t metadata_bytes_ = 0;
  TensorInfo entry_;              // the entry being read
  unsigned entry_keys_ = 0;       // 1: dtype, 2: shape, 4: data_offsets seen in entry_
  std::set<std::string> other_keys_;  // other keys seen in entry_
  size_t offsets_seen_ = 0;
};

// A tensor named twice, which readers would resolve differently, or nullptr.
// Sorts indices rather than names: 4 bytes a tensor.
const std::string* FindRepeatedName(const std::vector<TensorInfo>& tensors) {
  std::vector<uint32_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<uint32_t>(i);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return tensors[a].name < tensors[b].name; });
  for (size_t i = 1; i < order.size(); ++i) {
    if (tensors[order[i]].name == tensors[order[i - 1]].name) return &tensors[order[i]].name;
  }
  return nullptr;
}

// The byte size of `t`, or why it has none.
Status CheckTensorSize(std::string_view file, const TensorInfo& t) {
  uint64_t count = 1;
  for (uint64_t dim : t.shape) {
    if (__builtin_mul_overflow(count, dim, &count)) {
      return TensorError(file, t.name, "shape " + FormatShape(t.shape) +
                                           " overflows: its element count does not fit in 64 bits");
    }
  }
  const unsigned __int128 bits = static_cast<unsigned __int128>(count) * DtypeBits(t.dtype);
  if (bits % 8 != 0) {
    return TensorError(file, t.name,
                       "shape " + FormatShape(t.shape) + " of " + std::string(DtypeName(t.dtype)) +
                           " is " + std::to_string(count) + " x " +
                           std::to_string(DtypeBits(t.dtype)) +
                           " bits, which is not a whole number of bytes");
  }
  const unsigned __int128 bytes = bits / 8;
  if (bytes > std::numeric_limits<uint64_t>::max()) {
    return TensorError(file, t.name, "shape " + FormatShape(t.shape) + " of " +
                                         std::string(DtypeName(t.dtype)) +
                                         " overflows: its byte size does not fit in 64 bits");
  }
  if (static_cast<uint64_t>(bytes) != t.size()) {
    return TensorError(file, t.name,
                       OffsetsText(t.begin, t.end) + " hold " + std::to_string(t.size()) +
                           " bytes but shape " + FormatShape(t.shape) + " of " +
                           std::string(DtypeName(t.dtype)) + " needs " +
                           std::to_string(static_cast<uint64_t>(bytes)));
  }
  return OkStatus();
}

Status CheckBounds(std::string_view file, uint64_t header_length, uint64_t file_size) {
  if (header_length > kMaxHeaderLength) {
    return FileError(file, "header length is " + std::to_string(header_length) +
                               " bytes, over the format's limit of " +
                               std::to_string(kMaxHeaderLength) +
                               " bytes (not a safetensors file, or a corrupt one)");
  }
  if (file_size < kHeaderLengthBytes || header_length > file_size - kHeaderLengthBytes) {
    return FileError(file, "header length is " + std::to_string(header_length) +
                               " bytes, which runs past the end of the " +
                               std::to_string(file_size) +
                               "-byte file (truncated, or not a safetensors file)");
  }
  return OkStatus();
}

}  // namespace

const TensorInfo* SafetensorsHeader::Find(std::string_view name) const {
  for (const TensorInfo& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<uint64_t> TensorByteSize(Dtype dtype, std::span<const uint64_t> shape) {
  uint64_t count = 1;
  for (uint64_t dim : shape) {
    if (__builtin_mul_overflow(count, dim, &count)) return std::nullopt;
  }
  const unsigned __int128 bits = static_cast<unsigned __int128>(count) * DtypeBits(dtype);
  if (bits % 8 != 0 || bits / 8 > std::numeric_limits<uint64_t>::max()) return std::nullopt;
  return static_cast<uint64_t>(bits / 8);
}

std::string FormatShape(std::span<const uint64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

StatusOr<uint64_t> ParseHeaderLength(std::string_view file_name,
                                     std::span<const std::byte> first_bytes, uint64_t file_size) {
  if (file_size < kHeaderLengthBytes) {
    return FileError(file_name, "file is " + std::to_string(file_size) +
                                    " bytes, too short for the 8-byte header length that opens "
                                    "every safetensors file (empty or truncated)");
  }
  TENSORFS_CHECK(first_bytes.size() >= kHeaderLengthBytes);
  uint64_t n = 0;
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) {
    n |= static_cast<uint64_t>(static_cast<uint8_t>(first_bytes[i])) << (8 * i);
  }
  RETURN_IF_ERROR(CheckBounds(file_name, n, file_size));
  return n;
}

StatusOr<SafetensorsHeader> ParseHeader(std::string_view file_name,
                                        std::span<const std::byte> header_json,
                                        uint64_t file_size) {
  SafetensorsHeader header;
  header.header_length = header_json.size();
  RETURN_IF_ERROR(CheckBounds(file_name, header.header_length, file_size));

  if (std::optional<size_t> bad = FindInvalidUtf8(header_json)) {
    static constexpr char kHex[] = "0123456789abcdef";
    const auto b = static_cast<uint8_t>(header_json[*bad]);
    if (b == 0) {
      return FileError(file_name, "header has a NUL byte at header offset " + std::to_string(*bad) +
                                      " (file offset " + std::to_string(*bad + kHeaderLengthBytes) +
                                      "); JSON allows none, and padding after the JSON must be spaces");
    }
    return FileError(file_name, std::string("header is not valid UTF-8: byte 0x") + kHex[b >> 4] +
                                    kHex[b & 0xF] + " at header offset " + std::to_string(*bad) +
                                    " (file offset " + std::to_string(*bad + kHeaderLengthBytes) +
                                    ")");
  }
  const std::string_view text(reinterpret_cast<const char*>(header_json.data()), header_json.size());
  HeaderHandler handler(file_name, header);
  if (!Json::sax_parse(text.begin(), text.end(), &handler) || !handler.done()) {
    if (!handler.error().ok()) return handler.error();
    return InternalError(std::string(file_name) + ": safetensors header parser stopped without a reason");
  }
  if (const std::string* name = FindRepeatedName(header.tensors)) {
    return FileError(file_name, "header has tensor '" + *name + "' twice");
  }
  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });

  // In storage order, each tensor starts where the previous one ended and
  // holds exactly its shape's bytes.
  uint64_t expected = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : header.tensors) {
    if (t.begin != expected) {
      if (prev == nullptr) {
        return TensorError(file_name, t.name,
                           OffsetsText(t.begin, t.end) +
                               " should begin at 0: the first tensor of the data section must "
                               "start at its first byte");
      }
      if (t.begin > expected) {
        return TensorError(file_name, t.name,
                           OffsetsText(t.begin, t.end) + " leave a gap of " +
                               std::to_string(t.begin - expected) + " bytes after tensor '" +
                               prev->name + "', which ends at " + std::to_string(expected));
      }
      return TensorError(file_name, t.name,
                         OffsetsText(t.begin, t.end) + " overlap tensor '" + prev->name +
                             "', which holds " + RangeText(prev->begin, prev->end));
    }
    RETURN_IF_ERROR(CheckTensorSize(file_name, t));
    expected = t.end;
    prev = &t;
  }

  const uint64_t data_size = file_size - kHeaderLengthBytes - header.header_length;
  if (expected != data_size) {
    const std::string sizes = "the file is " + std::to_string(file_size) + " bytes: 8 + " +
                              std::to_string(header.header_length) + " header bytes + " +
                              std::to_string(data_size) + " data bytes";
    if (prev == nullptr) {
      return FileError(file_name, "header declares no tensors, but " + sizes +
                                      " (trailing bytes belong to no tensor)");
    }
    if (expected > data_size) {
      return TensorError(file_name, prev->name,
                         OffsetsText(prev->begin, prev->end) + " end past the end of the file; " +
                             sizes + " (truncated file?)");
    }
    return TensorError(file_name, prev->name,
                       OffsetsText(prev->begin, prev->end) + " end the last tensor " +
                           std::to_string(data_size - expected) + " bytes before the end of the file; " +
                           sizes + " (trailing bytes belong to no tensor)");
  }
  return header;
}

StatusOr<SafetensorsHeader> ParseSafetensorsFile(std::string_view file_name,
                                                 std::span<const std::byte> file) {
  ASSIGN_OR_RETURN(uint64_t n, ParseHeaderLength(file_name, file, file.size()));
  return ParseHeader(file_name, file.subspan(kHeaderLengthBytes, n), file.size());
}

std::string SerializeHeader(const std::vector<TensorInfo>& tensors,
                            const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  if (!metadata.empty()) doc[std::string(kMetadataKey)] = metadata;
  for (const TensorInfo& t : tensors) {
    TENSORFS_CHECK(t.name != kMetadataKey && !doc.contains(t.name));
    nlohmann::ordered_json entry;
    entry["dtype"] = std::string(DtypeName(t.dtype));
    entry["shape"] = t.shape;
    entry["data_offsets"] = {t.begin, t.end};
    doc[t.name] = std::move(entry);
  }
  std::string json = doc.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(kHeaderLengthBytes, '\0');
  const uint64_t n = json.size();
  for (size_t i = 0; i < kHeaderLengthBytes; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  out += json;
  return out;
}

StatusOr<uint64_t> LayOutContiguously(std::vector<TensorInfo>& tensors) {
  uint64_t offset = 0;
  for (TensorInfo& t : tensors) {
    std::optional<uint64_t> size = TensorByteSize(t.dtype, t.shape);
    if (!size) {
      return InvalidArgumentError("tensor '" + t.name + "': shape " + FormatShape(t.shape) + " of " +
                                  std::string(DtypeName(t.dtype)) +
                                  " has no byte size (overflow, or not a whole number of bytes)");
    }
    t.begin = offset;
    if (__builtin_add_overflow(offset, *size, &offset)) {
      return InvalidArgumentError("tensor '" + t.name + "': the data section overflows 64 bits");
    }
    t.end = offset;
  }
  return offset;
}

}  // namespace tensorfs
