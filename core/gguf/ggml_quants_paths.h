// The code paths behind QuantizeBlocks (ggml_quants.h), named so that tests can
// check each gives the same bytes and benchmarks can time each. Callers other
// than those use QuantizeBlocks, which takes the fastest path the CPU has.
//
// Thread-safety: pure functions; safe from any thread.
#ifndef TENSORFS_CORE_GGUF_GGML_QUANTS_PATHS_H_
#define TENSORFS_CORE_GGUF_GGML_QUANTS_PATHS_H_

#include <cstddef>
#include <span>

#include "core/gguf/ggml_types.h"

namespace tensorfs {

enum class QuantPath {
  kBaseline,  // x86-64's baseline (SSE2), or the compiler's generic code elsewhere
  kAvx2,      // x86-64 CPUs with AVX2
};

// Whether this build and CPU can run `path`.
bool QuantPathAvailable(QuantPath path);
// QuantizeBlocks on `path`. Precondition: QuantPathAvailable(path), and
// QuantizeBlocks's own.
void QuantizeBlocksOn(QuantPath path, GgmlType type, std::span<const float> x, std::span<std::byte> out);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_GGUF_GGML_QUANTS_PATHS_H_
