// Element types of safetensors tensors, named as the format names them.
//
// The set mirrors the dtypes of the reference implementation (huggingface/
// safetensors) plus the FNUZ 8-bit float variants that some checkpoints carry.
// Sizes are in bits because F4 and the F6 types pack several elements per byte;
// a tensor of such a type is valid only when its total bit count is a multiple
// of 8.
//
// Thread-safety: pure functions over constants; safe from any thread.
#ifndef TENSORFS_CORE_SAFETENSORS_DTYPE_H_
#define TENSORFS_CORE_SAFETENSORS_DTYPE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace tensorfs {

enum class Dtype {
  BOOL,
  U8,
  I8,
  F8_E5M2,
  F8_E4M3,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  F64,
  I64,
  U64,
  C64,
  F4,
  F6_E2M3,
  F6_E3M2,
  F8_E8M0,
  F8_E4M3FNUZ,
  F8_E5M2FNUZ,
};

// Every Dtype, in declaration order.
std::span<const Dtype> AllDtypes();

// The Dtype named exactly `name` ("BF16", "F8_E4M3"); nullopt for anything else.
// Names are case-sensitive, as in the format.
std::optional<Dtype> ParseDtype(std::string_view name);

// The format's name of `dtype` ("BF16").
std::string_view DtypeName(Dtype dtype);

// Bits per element: 4 for F4, 6 for the F6 types, 64 for C64 (two F32s), ...
uint32_t DtypeBits(Dtype dtype);

// True for the floating-point types (F4 ... F64); false for BOOL, the integer
// types and C64.
bool IsFloatDtype(Dtype dtype);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_SAFETENSORS_DTYPE_H_
