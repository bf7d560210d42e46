// The GGUF container: key/value metadata and tensor records, laid out as
// llama.cpp's reader (ggml/src/gguf.cpp, gguf_init_from_file) requires, so
// that a file whose header is LayOutGguf's and whose tensor data sits at its
// offsets loads.
//
// GGUF v3, little-endian throughout:
//   "GGUF" | u32 version 3 | u64 tensor count | u64 key/value count
//   key/value pairs: string key | u32 value type | value
//     string = u64 byte length + the bytes; bool = 1 byte; array = u32
//     element type | u64 count | the elements, each untagged
//   tensor records: string name | u32 n_dims | n_dims x u64 ne | u32 ggml
//     type | u64 offset from the start of the data section
//   zeros up to a multiple of the alignment: the data section starts there
//   each tensor's bytes, in record order, each followed by zeros up to a
//   multiple of the alignment (the reader requires exactly these offsets)
//
// Thread-safety: GgufMetadata is a plain value (not synchronized; share it
// const or copy it); LayOutGguf is a pure function.
#ifndef TENSORFS_CORE_GGUF_GGUF_FORMAT_H_
#define TENSORFS_CORE_GGUF_GGUF_FORMAT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/gguf/ggml_types.h"
#include "core/util/status.h"

namespace tensorfs {

// GGUF value type codes (ggml's gguf.h).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// The value types llama.cpp's loader reads for the keys tensorfs writes: u32
// hyperparameters and token ids, f32 floats, bools, strings, and arrays of
// strings, INT32 (token types, per-layer counts) and FLOAT32 (scores).
using GgufValue = std::variant<uint32_t, int32_t, float, bool, std::string, std::vector<std::string>,
                               std::vector<int32_t>, std::vector<float>>;

// An ordered list of GGUF key/value pairs with the exact value types llama.cpp
// demands. Keys are unique: a setter on an existing key replaces its value in
// place (its position stays); a new key goes last.
class GgufMetadata {
 public:
  void SetU32(std::string key, uint32_t v) { Set(std::move(key), v); }
  void SetI32(std::string key, int32_t v) { Set(std::move(key), v); }
  void SetF32(std::string key, float v) { Set(std::move(key), v); }
  void SetBool(std::string key, bool v) { Set(std::move(key), v); }
  void SetString(std::string key, std::string v) { Set(std::move(key), std::move(v)); }
  void SetStringArray(std::string key, std::vector<std::string> v) { Set(std::move(key), std::move(v)); }
  void SetI32Array(std::string key, std::vector<int32_t> v) { Set(std::move(key), std::move(v)); }
  void SetF32Array(std::string key, std::vector<float> v) { Set(std::move(key), std::move(v)); }
  void Set(std::string key, GgufValue value);

  bool Has(std::string_view key) const { return Find(key) != nullptr; }
  // The value of `key`, or nullptr.
  const GgufValue* Find(std::string_view key) const;
  // The value of `key` if it has type T, else nullptr.
  template <typename T>
  const T* Get(std::string_view key) const {
    const GgufValue* v = Find(key);
    return v != nullptr ? std::get_if<T>(v) : nullptr;
  }
  // Removes `key` if present (later keys move up one place).
  void Remove(std::string_view key);
  // Sets every key of `other`, in its order (replacing values in place, as
  // Set does).
  void Merge(const GgufMetadata& other);

  struct Entry {
    std::string key;
    GgufValue value;
  };
  // In order.
  const std::vector<Entry>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
  std::map<std::string, size_t, std::less<>> index_;  // key -> position in entries_
};

// GGUF's type code for a value (an array's own code is kArray).
GgufValueType ValueTypeOf(const GgufValue& value);

struct GgufTensorRecord {
  std::string name;
  std::vector<uint64_t> ne;  // GGUF order: ne[0] is the row length
  GgmlType type;
};

struct GgufLayout {
  std::string header;             // every byte before the data section, padded to alignment
  std::vector<uint64_t> offsets;  // each tensor's absolute offset in the file
  std::vector<uint64_t> sizes;    // each tensor's bytes (without padding)
  uint64_t file_size = 0;         // header + every tensor padded to alignment
};

// The byte size of a tensor of this type and shape (RowBytes times the other
// dimensions). Precondition: ne[0] is whole blocks.
uint64_t TensorBytes(GgmlType type, const std::vector<uint64_t>& ne);

// Lays out a GGUF v3 file. Checks what llama.cpp's reader checks and fails
// with a message naming the tensor or key and what is wrong: keys unique and
// non-empty; tensor names non-empty, shorter than 64 bytes and unique; 1 to 4
// dimensions, each at least 1, their product and the byte size within int64;
// ne[0] a multiple of the type's block. `alignment` must be a power of two of
// at least 8; any alignment but GGUF's default of 32 must be written as a u32
// general.alignment of the same value (and one that is present must match).
StatusOr<GgufLayout> LayOutGguf(const GgufMetadata& metadata, const std::vector<GgufTensorRecord>& tensors,
                                uint32_t alignment = 32);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_GGUF_GGUF_FORMAT_H_
