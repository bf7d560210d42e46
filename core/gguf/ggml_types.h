// The ggml tensor types a GGUF file written by tensorfs may hold: their ids (as
// llama.cpp's ggml.h numbers them, written into each tensor record), block
// geometry and names.
//
// A quantized type stores a row as whole blocks: BlockElements(type) elements
// in BlockBytes(type) bytes. A row of ne0 elements is RowBytes(type, ne0)
// bytes, and llama.cpp refuses a tensor whose ne0 is not a multiple of the
// block (which is why type_choice.h falls back to a smaller block).
//
// Thread-safety: pure functions over constants; safe from any thread.
#ifndef TENSORFS_CORE_GGUF_GGML_TYPES_H_
#define TENSORFS_CORE_GGUF_GGML_TYPES_H_

#include <cstdint>
#include <optional>
#include <string_view>

namespace tensorfs {

enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// Elements per block: 1 for F32, F16 and BF16; 32 for Q4_0, Q5_0, Q5_1 and Q8_0; 256
// for the K types.
uint64_t BlockElements(GgmlType type);
// Bytes per block: F32 4, F16 2, BF16 2, Q4_0 18, Q5_0 22, Q5_1 24, Q8_0 34,
// Q4_K 144, Q5_K 176, Q6_K 210.
uint64_t BlockBytes(GgmlType type);
// Bytes of one row of ne0 elements. Precondition (TENSORFS_CHECK):
// ne0 % BlockElements(type) == 0.
uint64_t RowBytes(GgmlType type, uint64_t ne0);
// ggml's name of the type: "F32", "F16", "BF16", "Q4_0", "Q5_0", "Q8_0",
// "Q5_1", "Q4_K", "Q5_K", "Q6_K".
std::string_view GgmlTypeName(GgmlType type);
// The type with this ggml id, if it is one of the above.
std::optional<GgmlType> GgmlTypeFromId(uint32_t id);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_GGUF_GGML_TYPES_H_
