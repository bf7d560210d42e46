#include "core/safetensors/dtype.h"

#include <array>

namespace tensorfs {
namespace {

struct DtypeDesc {
  Dtype dtype;
  std::string_view name;
  uint32_t bits;
  bool is_float;
};

// Indexed by the enum's value; the static_asserts below keep it in step.
constexpr std::array<DtypeDesc, 22> kDtypes = {{
    {Dtype::BOOL, "BOOL", 8, false},
    {Dtype::U8, "U8", 8, false},
    {Dtype::I8, "I8", 8, false},
    {Dtype::F8_E5M2, "F8_E5M2", 8, true},
    {Dtype::F8_E4M3, "F8_E4M3", 8, true},
    {Dtype::I16, "I16", 16, false},
    {Dtype::U16, "U16", 16, false},
    {Dtype::F16, "F16", 16, true},
    {Dtype::BF16, "BF16", 16, true},
    {Dtype::I32, "I32", 32, false},
    {Dtype::U32, "U32", 32, false},
    {Dtype::F32, "F32", 32, true},
    {Dtype::F64, "F64", 64, true},
    {Dtype::I64, "I64", 64, false},
    {Dtype::U64, "U64", 64, false},
    {Dtype::C64, "C64", 64, false},
    {Dtype::F4, "F4", 4, true},
    {Dtype::F6_E2M3, "F6_E2M3", 6, true},
    {Dtype::F6_E3M2, "F6_E3M2", 6, true},
    {Dtype::F8_E8M0, "F8_E8M0", 8, true},
    {Dtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8, true},
    {Dtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8, true},
}};

constexpr bool TableMatchesEnum() {
  for (size_t i = 0; i < kDtypes.size(); ++i) {
    if (static_cast<size_t>(kDtypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(TableMatchesEnum(), "kDtypes must list every Dtype in enum order");
static_assert(static_cast<size_t>(Dtype::F8_E5M2FNUZ) + 1 == kDtypes.size(),
              "kDtypes must cover the whole enum");

constexpr std::array<Dtype, kDtypes.size()> MakeAll() {
  std::array<Dtype, kDtypes.size()> all{};
  for (size_t i = 0; i < kDtypes.size(); ++i) all[i] = kDtypes[i].dtype;
  return all;
}
constexpr std::array<Dtype, kDtypes.size()> kAllDtypes = MakeAll();

const DtypeDesc& Desc(Dtype dtype) { return kDtypes[static_cast<size_t>(dtype)]; }

}  // namespace

std::span<const Dtype> AllDtypes() { return kAllDtypes; }

std::optional<Dtype> ParseDtype(std::string_view name) {
  for (const DtypeDesc& d : kDtypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

std::string_view DtypeName(Dtype dtype) { return Desc(dtype).name; }

uint32_t DtypeBits(Dtype dtype) { return Desc(dtype).bits; }

bool IsFloatDtype(Dtype dtype) { return Desc(dtype).is_float; }

}  // namespace tensorfs
