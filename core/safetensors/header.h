// The safetensors header: parsing with the validation the reference
// implementation (huggingface/safetensors) applies, and serialization.
//
// File layout: an 8-byte little-endian length N, N bytes of UTF-8 JSON (which
// may end in JSON whitespace: writers pad with spaces so that data starts
// 8-aligned; a NUL byte anywhere is refused, as the reference refuses it),
// then the data section. The JSON maps tensor names to
// {"dtype", "shape", "data_offsets": [begin, end]} with offsets relative to the
// data section, plus an optional "__metadata__" object of string to string.
//
// A header is accepted only if the tensors, sorted by offset, tile the data
// section exactly: the first begins at 0, each begins where the previous one
// ends, each holds exactly shape x dtype bytes, and the last ends at the end of
// the file. Every rejection is a kCorrupt Status whose message names the file,
// the tensor (when one is at fault) and what is wrong, so a user can tell a
// truncated download from a broken writer.
//
// Headers come from untrusted files, so parsing is bounded: a SAX parser builds
// the tensor table as it reads, in time linear in the header's size, keeping
// nothing but the table (no JSON tree), and refuses a header past any of the
// limits below (kCorrupt naming the file and the limit) the moment it crosses
// it. Together they bound what a header can cost in memory to a small multiple
// of its size. A file refused here is still served byte for byte as a plain
// file; only the views and the tensor-aware read plan need its header.
//
// Callers: the catalog (checkpoint.h) reads the first bytes of each file, calls
// ParseHeaderLength, reads the rest of the header and calls ParseHeader. Views
// that synthesize safetensors files call SerializeHeader.
//
// Thread-safety: free functions over their arguments and plain structs; safe
// from any thread. A SafetensorsHeader is immutable once built, by convention.
#ifndef TENSORFS_CORE_SAFETENSORS_HEADER_H_
#define TENSORFS_CORE_SAFETENSORS_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/safetensors/dtype.h"
#include "core/util/status.h"

namespace tensorfs {

// Size of the little-endian header length that opens every file.
inline constexpr uint64_t kHeaderLengthBytes = 8;
// Largest header the format allows (the reference's MAX_HEADER_SIZE).
inline constexpr uint64_t kMaxHeaderLength = 100'000'000;
// Limits on what a header may hold (docs/VIEWS.md, "Limits"). Real checkpoints hold a
// few thousand tensors per file, shapes of at most a handful of dimensions and
// a few bytes of metadata; these are far above that.
inline constexpr size_t kMaxTensorsPerHeader = 1'000'000;
inline constexpr size_t kMaxShapeDims = 64;  // NumPy's own limit (NPY_MAXDIMS)
inline constexpr uint64_t kMaxMetadataBytes = 16ull << 20;  // "__metadata__" keys plus values
inline constexpr size_t kMaxMetadataEntries = 100'000;
// serde_json, which the reference uses, refuses JSON nested deeper than this.
inline constexpr int kMaxHeaderJsonDepth = 128;
// The reserved key for free-form string metadata.
inline constexpr std::string_view kMetadataKey = "__metadata__";

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::F32;
  std::vector<uint64_t> shape;  // empty for a scalar
  uint64_t begin = 0;           // relative to the start of the data section
  uint64_t end = 0;             // exclusive

  uint64_t size() const { return end - begin; }
  bool operator==(const TensorInfo&) const = default;
};

struct SafetensorsHeader {
  uint64_t header_length = 0;       // N: the JSON bytes, padding included
  std::vector<TensorInfo> tensors;  // storage order: by begin offset (then end, then name)
  std::map<std::string, std::string> metadata;

  // Absolute offset of the data section in the file.
  uint64_t data_start() const { return kHeaderLengthBytes + header_length; }
  // Bytes in the data section (where the last tensor ends).
  uint64_t data_size() const { return tensors.empty() ? 0 : tensors.back().end; }
  // The tensor named `name`, or nullptr. Linear in the number of tensors.
  const TensorInfo* Find(std::string_view name) const;
};

// Bytes that a tensor of `dtype` and `shape` occupies. nullopt when the count
// overflows 64 bits or, for sub-byte dtypes (F4, F6_*), when the total number
// of bits is not a multiple of 8.
std::optional<uint64_t> TensorByteSize(Dtype dtype, std::span<const uint64_t> shape);

// "[10, 20]"; "[]" for a scalar.
std::string FormatShape(std::span<const uint64_t> shape);

// Decodes N from the first bytes of a file of `file_size` bytes and checks it
// against the format's limit and the file size. `first_bytes` holds the first
// min(8, file_size) bytes of the file (more are ignored). `file_name` is only
// used in messages.
StatusOr<uint64_t> ParseHeaderLength(std::string_view file_name,
                                     std::span<const std::byte> first_bytes, uint64_t file_size);

// Parses and validates the N header bytes (those after the 8-byte length) of a
// file of `file_size` bytes. N is header_json.size().
StatusOr<SafetensorsHeader> ParseHeader(std::string_view file_name,
                                        std::span<const std::byte> header_json,
                                        uint64_t file_size);

// Convenience for whole files held in memory: ParseHeaderLength + ParseHeader.
StatusOr<SafetensorsHeader> ParseSafetensorsFile(std::string_view file_name,
                                                 std::span<const std::byte> file);

// The first data_start() bytes of a safetensors file: the 8-byte length, then
// compact JSON ("__metadata__" first when not empty, then the tensors in the
// given order) padded with spaces so that the data section starts at a
// multiple of 8, as the reference writer does.
// Preconditions: names are unique and none is "__metadata__" (checked:
// aborts); the offsets of `tensors` tile [0, total) in the given order (see
// LayOutContiguously; not checked, they are written as given).
std::string SerializeHeader(const std::vector<TensorInfo>& tensors,
                            const std::map<std::string, std::string>& metadata);

// Sets begin/end of each tensor so that they follow one another, in the given
// order, from offset 0. Returns the data section size. InvalidArgument when a
// shape overflows or a sub-byte tensor is not a whole number of bytes.
StatusOr<uint64_t> LayOutContiguously(std::vector<TensorInfo>& tensors);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_SAFETENSORS_HEADER_H_
