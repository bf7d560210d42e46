#include "core/gguf/ggml_types.h"

#include <array>

#include "core/util/status.h"

namespace tensorfs {
namespace {

struct TypeInfo {
  GgmlType type;
  uint64_t block_elements;
  uint64_t block_bytes;
  std::string_view name;
};

// ggml-common.h: block_q4_0 {d; qs[16]}, block_q5_0 {d; qh[4]; qs[16]},
// block_q5_1 {d; m; qh[4]; qs[16]}, block_q8_0 {d; qs[32]}, block_q4_K {d; dmin; scales[12]; qs[128]},
// block_q5_K {d; dmin; scales[12]; qh[32]; qs[128]},
// block_q6_K {ql[128]; qh[64]; scales[16]; d}.
constexpr std::array<TypeInfo, 10> kTypes = {{
    {GgmlType::kF32, 1, 4, "F32"},
    {GgmlType::kF16, 1, 2, "F16"},
    {GgmlType::kQ4_0, 32, 18, "Q4_0"},
    {GgmlType::kQ5_0, 32, 22, "Q5_0"},
    {GgmlType::kQ5_1, 32, 24, "Q5_1"},
    {GgmlType::kQ8_0, 32, 34, "Q8_0"},
    {GgmlType::kQ4_K, 256, 144, "Q4_K"},
    {GgmlType::kQ5_K, 256, 176, "Q5_K"},
    {GgmlType::kQ6_K, 256, 210, "Q6_K"},
    {GgmlType::kBF16, 1, 2, "BF16"},
}};

const TypeInfo& Info(GgmlType type) {
  for (const TypeInfo& info : kTypes) {
    if (info.type == type) return info;
  }
  InternalFatal("ggml type id " + std::to_string(static_cast<uint32_t>(type)) + " is not one tensorfs writes");
}

}  // namespace

uint64_t BlockElements(GgmlType type) { return Info(type).block_elements; }

uint64_t BlockBytes(GgmlType type) { return Info(type).block_bytes; }

uint64_t RowBytes(GgmlType type, uint64_t ne0) {
  const TypeInfo& info = Info(type);
  TENSORFS_CHECK(ne0 % info.block_elements == 0);
  return ne0 / info.block_elements * info.block_bytes;
}

std::string_view GgmlTypeName(GgmlType type) { return Info(type).name; }

std::optional<GgmlType> GgmlTypeFromId(uint32_t id) {
  for (const TypeInfo& info : kTypes) {
    if (static_cast<uint32_t>(info.type) == id) return info.type;
  }
  return std::nullopt;
}

}  // namespace tensorfs
