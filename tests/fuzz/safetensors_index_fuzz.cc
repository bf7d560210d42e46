// libFuzzer target: model.safetensors.index.json parsing over arbitrary bytes.
// Parsing returns; an accepted index names only plain relative shard files.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/safetensors/index.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorfs;
  StatusOr<SafetensorsIndex> index =
      ParseIndex("model.safetensors.index.json", std::string_view(reinterpret_cast<const char*>(data), size));
  if (!index.ok()) return 0;
  for (const auto& [tensor, file] : index->weight_map) {
    if (file.empty() || file.front() == '/' || file == ".." || file.starts_with("../") ||
        file.find("/../") != std::string::npos || file.ends_with("/..")) {
      std::abort();
    }
  }
  (void)index->Files();
  return 0;
}
