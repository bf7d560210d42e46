// libFuzzer target: the safetensors header parser over arbitrary file bytes.
// Whatever the bytes, parsing returns (no crash, no sanitizer report, bounded
// memory), and an accepted header satisfies the invariants the catalog and
// the read plan rely on: tensors tile the data section in storage order, each
// holding its shape's bytes, within the limits of header.h.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>

#include "core/safetensors/header.h"

namespace tensorfs {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckAccepted(const SafetensorsHeader& h, uint64_t file_size) {
  Check(h.tensors.size() <= kMaxTensorsPerHeader);
  Check(h.metadata.size() <= kMaxMetadataEntries);
  uint64_t at = 0;
  for (const TensorInfo& t : h.tensors) {
    Check(t.shape.size() <= kMaxShapeDims);
    Check(t.begin == at && t.end >= t.begin);
    Check(TensorByteSize(t.dtype, t.shape) == t.size());
    Check(h.Find(t.name) != nullptr);
    at = t.end;
  }
  Check(h.data_start() + h.data_size() == file_size);
}

}  // namespace
}  // namespace tensorfs

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorfs;
  const auto bytes = std::as_bytes(std::span<const uint8_t>(data, size));
  // As a whole file: the 8-byte length, the header, the data section.
  StatusOr<SafetensorsHeader> file = ParseSafetensorsFile("fuzz.safetensors", bytes);
  if (file.ok()) CheckAccepted(*file, size);
  // As header JSON alone, in a file as long as the JSON plus a data section
  // the first 8 bytes (when any) say: exercises the tiling checks with JSON
  // that does not have to carry a matching length prefix.
  uint64_t data_bytes = 0;
  for (size_t i = 0; i < size && i < 2; ++i) data_bytes |= static_cast<uint64_t>(data[i]) << (8 * i);
  if (size <= kMaxHeaderLength) {
    StatusOr<SafetensorsHeader> header = ParseHeader("fuzz.safetensors", bytes, kHeaderLengthBytes + size + data_bytes);
    if (header.ok()) CheckAccepted(*header, kHeaderLengthBytes + size + data_bytes);
  }
  return 0;
}
