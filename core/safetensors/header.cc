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

// serde_json, which the reference uses, refuses JSON nested deeper than this.
constexpr int kMaxJsonDepth = 128;

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

// "a string", "an array", ... for messages about a JSON value of the wrong type.
std::string Describe(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::object: return "an object";
    case Json::value_t::array: return "an array";
    case Json::value_t::string: return "a string";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "the number " + j.dump();
    case Json::value_t::binary: return "binary data";
    case Json::value_t::discarded: return "nothing";
  }
  return "an unknown JSON value";
}

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

// Thrown from the parser callback to stop parsing; caught in ParseJson.
struct JsonAbort {
  std::string message;
};

// Parses the header JSON, rejecting duplicate keys at the top level and within
// entries (which readers would resolve differently) and excessive nesting.
StatusOr<Json> ParseJson(std::string_view file, std::string_view text) {
  std::set<std::string> top_keys;
  std::set<std::string> entry_keys;
  std::string current_entry;
  auto callback = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) {
      if (depth >= kMaxJsonDepth) {
        throw JsonAbort{"header nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels"};
      }
      if (depth == 1) entry_keys.clear();
    } else if (event == Json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (depth == 1) {
        if (!top_keys.insert(key).second) {
          throw JsonAbort{key == kMetadataKey ? "header has \"__metadata__\" twice"
                                              : "header has tensor '" + key + "' twice"};
        }
        current_entry = key;
      } else if (depth == 2 && !entry_keys.insert(key).second) {
        throw JsonAbort{(current_entry == kMetadataKey ? std::string("__metadata__")
                                                       : "tensor '" + current_entry + "'") +
                        " has key \"" + key + "\" twice"};
      }
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), callback);
  } catch (const JsonAbort& e) {
    return FileError(file, e.message);
  } catch (const Json::exception& e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag.
    if (size_t close = what.find("] "); what.starts_with("[json.exception") && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    return FileError(file, "header is not valid JSON: " + what);
  }
}

Status ParseEntry(std::string_view file, const std::string& name, const Json& entry,
                  TensorInfo& out) {
  out.name = name;
  if (!entry.is_object()) {
    return TensorError(file, name,
                       "entry must be an object with \"dtype\", \"shape\" and \"data_offsets\", "
                       "found " + Describe(entry));
  }
  auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end()) return TensorError(file, name, "missing \"dtype\"");
  if (!dtype_it->is_string()) {
    return TensorError(file, name, "\"dtype\" must be a string such as \"BF16\", found " +
                                       Describe(*dtype_it));
  }
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  std::optional<Dtype> dtype = ParseDtype(dtype_name);
  if (!dtype) {
    std::string known;
    for (Dtype d : AllDtypes()) known += (known.empty() ? "" : ", ") + std::string(DtypeName(d));
    return TensorError(file, name, "unknown dtype \"" + dtype_name + "\" (known: " + known + ")");
  }
  out.dtype = *dtype;

  auto shape_it = entry.find("shape");
  if (shape_it == entry.end()) return TensorError(file, name, "missing \"shape\"");
  if (!shape_it->is_array()) {
    return TensorError(file, name, "\"shape\" must be an array of non-negative integers, found " +
                                       Describe(*shape_it));
  }
  out.shape.clear();
  out.shape.reserve(shape_it->size());
  for (size_t i = 0; i < shape_it->size(); ++i) {
    const Json& dim = (*shape_it)[i];
    if (!dim.is_number_unsigned()) {
      return TensorError(file, name, "shape " + shape_it->dump() + " has " + Describe(dim) +
                                         " at position " + std::to_string(i) +
                                         "; dimensions must be non-negative integers");
    }
    out.shape.push_back(dim.get<uint64_t>());
  }

  auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end()) return TensorError(file, name, "missing \"data_offsets\"");
  if (!offsets_it->is_array() || offsets_it->size() != 2 || !(*offsets_it)[0].is_number_unsigned() ||
      !(*offsets_it)[1].is_number_unsigned()) {
    return TensorError(file, name,
                       "\"data_offsets\" must be [begin, end] with non-negative integers, found " +
                           offsets_it->dump());
  }
  out.begin = (*offsets_it)[0].get<uint64_t>();
  out.end = (*offsets_it)[1].get<uint64_t>();
  if (out.end < out.begin) {
    return TensorError(file, name, OffsetsText(out.begin, out.end) + " end before they begin");
  }
  return OkStatus();
}

Status ParseMetadata(std::string_view file, const Json& j, std::map<std::string, std::string>& out) {
  if (j.is_null()) return OkStatus();  // the reference reads null as "no metadata"
  if (!j.is_object()) {
    return FileError(file, "\"__metadata__\" must be an object of string to string, found " +
                               Describe(j));
  }
  for (const auto& [key, value] : j.items()) {
    if (!value.is_string()) {
      return FileError(file, "\"__metadata__\" key '" + key + "' has " + Describe(value) +
                                 " as its value; metadata values must be strings");
    }
    out.emplace(key, value.get<std::string>());
  }
  return OkStatus();
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
  ASSIGN_OR_RETURN(Json doc, ParseJson(file_name, text));
  if (!doc.is_object()) {
    return FileError(file_name, "header must be a JSON object mapping tensor names to entries, found " +
                                    Describe(doc));
  }

  header.tensors.reserve(doc.size());
  for (const auto& [key, value] : doc.items()) {
    if (key == kMetadataKey) {
      RETURN_IF_ERROR(ParseMetadata(file_name, value, header.metadata));
      continue;
    }
    TensorInfo info;
    RETURN_IF_ERROR(ParseEntry(file_name, key, value, info));
    header.tensors.push_back(std::move(info));
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
