#include "core/gguf/gguf_format.h"

#include <bit>
#include <limits>

namespace tensorfs {
namespace {

constexpr uint32_t kDefaultAlignment = 32;  // GGUF_DEFAULT_ALIGNMENT
constexpr size_t kMaxName = 64;             // GGML_MAX_NAME: names are shorter
constexpr size_t kMaxDims = 4;              // GGML_MAX_DIMS
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

class Writer {
 public:
  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void U64(uint64_t v) {
    for (int i = 0; i < 8; ++i) U8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void Str(std::string_view s) {
    U64(s.size());
    out_.append(s);
  }
  void Value(const GgufValue& value) {
    std::visit([this](const auto& v) { Put(v); }, value);
  }
  std::string& bytes() { return out_; }

 private:
  void Put(uint32_t v) { U32(v); }
  void Put(int32_t v) { U32(static_cast<uint32_t>(v)); }
  void Put(float v) { U32(std::bit_cast<uint32_t>(v)); }
  void Put(bool v) { U8(v ? 1 : 0); }
  void Put(const std::string& v) { Str(v); }
  static constexpr GgufValueType ElementType(const std::vector<std::string>*) { return GgufValueType::kString; }
  static constexpr GgufValueType ElementType(const std::vector<int32_t>*) { return GgufValueType::kInt32; }
  static constexpr GgufValueType ElementType(const std::vector<float>*) { return GgufValueType::kFloat32; }
  template <typename T>
  void Put(const std::vector<T>& v) {
    U32(static_cast<uint32_t>(ElementType(&v)));
    U64(v.size());
    for (const T& e : v) Put(e);
  }

  std::string out_;
};

uint64_t Pad(uint64_t n, uint64_t alignment) { return (n + alignment - 1) / alignment * alignment; }

std::string Shape(const std::vector<uint64_t>& ne) {
  std::string s = "{";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "}";
}

Status CheckTensor(const GgufTensorRecord& t) {
  if (t.name.empty()) return InvalidArgumentError("a tensor has an empty name");
  if (t.name.size() >= kMaxName) {
    return InvalidArgumentError("tensor name '" + t.name + "' is " + std::to_string(t.name.size()) +
                                " bytes; llama.cpp's names are shorter than " + std::to_string(kMaxName));
  }
  const std::string what = "tensor '" + t.name + "' of shape " + Shape(t.ne);
  if (t.ne.empty() || t.ne.size() > kMaxDims) {
    return InvalidArgumentError(what + " has " + std::to_string(t.ne.size()) + " dimensions; GGUF allows 1 to " +
                                std::to_string(kMaxDims));
  }
  uint64_t elements = 1;
  for (uint64_t n : t.ne) {
    if (n == 0) return InvalidArgumentError(what + " has an empty dimension");
    if (n > kInt64Max / elements) return InvalidArgumentError(what + " has more elements than int64 counts");
    elements *= n;
  }
  const uint64_t block = BlockElements(t.type);
  if (t.ne[0] % block != 0) {
    return InvalidArgumentError(what + " has " + std::to_string(t.ne[0]) + " elements per row, not a multiple of " +
                                std::string(GgmlTypeName(t.type)) + "'s block of " + std::to_string(block));
  }
  if (elements / block > kInt64Max / BlockBytes(t.type)) {
    return InvalidArgumentError(what + " of type " + std::string(GgmlTypeName(t.type)) + " is over int64's bytes");
  }
  return OkStatus();
}

}  // namespace

GgufValueType ValueTypeOf(const GgufValue& value) {
  switch (value.index()) {
    case 0:
      return GgufValueType::kUint32;
    case 1:
      return GgufValueType::kInt32;
    case 2:
      return GgufValueType::kFloat32;
    case 3:
      return GgufValueType::kBool;
    case 4:
      return GgufValueType::kString;
    default:
      return GgufValueType::kArray;
  }
}

void GgufMetadata::Set(std::string key, GgufValue value) {
  if (auto it = index_.find(key); it != index_.end()) {
    entries_[it->second].value = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.push_back(Entry{std::move(key), std::move(value)});
}

const GgufValue* GgufMetadata::Find(std::string_view key) const {
  const auto it = index_.find(key);
  return it == index_.end() ? nullptr : &entries_[it->second].value;
}

void GgufMetadata::Remove(std::string_view key) {
  const auto it = index_.find(key);
  if (it == index_.end()) return;
  const size_t position = it->second;
  index_.erase(it);
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(position));
  for (auto& [k, i] : index_) {
    if (i > position) --i;
  }
}

void GgufMetadata::Merge(const GgufMetadata& other) {
  for (const Entry& e : other.entries_) Set(e.key, e.value);
}

uint64_t TensorBytes(GgmlType type, const std::vector<uint64_t>& ne) {
  uint64_t bytes = ne.empty() ? 0 : RowBytes(type, ne[0]);
  for (size_t i = 1; i < ne.size(); ++i) bytes *= ne[i];
  return bytes;
}

StatusOr<GgufLayout> LayOutGguf(const GgufMetadata& metadata, const std::vector<GgufTensorRecord>& tensors,
                                uint32_t alignment) {
  if (alignment < 8 || (alignment & (alignment - 1)) != 0) {
    return InvalidArgumentError("GGUF alignment " + std::to_string(alignment) +
                                " is not a power of two of at least 8");
  }
  if (const GgufValue* a = metadata.Find("general.alignment")) {
    const uint32_t* value = std::get_if<uint32_t>(a);
    if (value == nullptr) return InvalidArgumentError("key general.alignment must be a u32, as llama.cpp reads it");
    if (*value != alignment) {
      return InvalidArgumentError("key general.alignment is " + std::to_string(*value) + " but the file is laid out at " +
                                  std::to_string(alignment));
    }
  } else if (alignment != kDefaultAlignment) {
    return InvalidArgumentError("alignment " + std::to_string(alignment) +
                                " needs a u32 general.alignment key: llama.cpp assumes 32 without one");
  }
  for (size_t i = 0; i < metadata.entries().size(); ++i) {
    if (metadata.entries()[i].key.empty()) return InvalidArgumentError("key #" + std::to_string(i) + " is empty");
  }
  std::map<std::string_view, size_t> names;
  for (size_t i = 0; i < tensors.size(); ++i) {
    RETURN_IF_ERROR(CheckTensor(tensors[i]));
    if (const auto [it, inserted] = names.emplace(tensors[i].name, i); !inserted) {
      return InvalidArgumentError("tensor name '" + tensors[i].name + "' appears twice (tensors #" +
                                  std::to_string(it->second) + " and #" + std::to_string(i) + ")");
    }
  }

  Writer w;
  w.bytes() = "GGUF";
  w.U32(3);
  w.U64(tensors.size());
  w.U64(metadata.size());
  for (const GgufMetadata::Entry& e : metadata.entries()) {
    w.Str(e.key);
    w.U32(static_cast<uint32_t>(ValueTypeOf(e.value)));
    w.Value(e.value);
  }
  GgufLayout layout;
  uint64_t relative = 0;
  for (const GgufTensorRecord& t : tensors) {
    w.Str(t.name);
    w.U32(static_cast<uint32_t>(t.ne.size()));
    for (uint64_t n : t.ne) w.U64(n);
    w.U32(static_cast<uint32_t>(t.type));
    w.U64(relative);
    const uint64_t bytes = TensorBytes(t.type, t.ne);
    layout.offsets.push_back(relative);
    layout.sizes.push_back(bytes);
    if (Pad(bytes, alignment) > kInt64Max - relative) {
      return InvalidArgumentError("tensor '" + t.name + "' ends past int64's bytes");
    }
    relative += Pad(bytes, alignment);
  }
  layout.header = std::move(w.bytes());
  layout.header.resize(Pad(layout.header.size(), alignment), '\0');
  for (uint64_t& offset : layout.offsets) offset += layout.header.size();
  layout.file_size = layout.header.size() + relative;
  return layout;
}

}  // namespace tensorfs
