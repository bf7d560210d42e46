// The transforms of the safetensors views (transform.h): bitsandbytes' NF4
// and dynamic 8-bit blockwise quantizations (splitted_model.4bit/.8bit,
// @bnb-nf4), LLM.int8 rows (@bnb-int8) and the BF16 / F16 casts (@bf16,
// @f16). The kernels are quantize.h's; these say how a tensor's output is
// laid out in parts and tiled by units.
//
// Thread-safety: the factories are free functions; what they make is
// immutable.
#ifndef TENSORFS_CORE_VIEWS_VIEW_TRANSFORMS_H_
#define TENSORFS_CORE_VIEWS_VIEW_TRANSFORMS_H_

#include <cstdint>
#include <memory>

#include "core/safetensors/dtype.h"
#include "core/views/transform.h"

namespace tensorfs {

// Part 0: NF4 codes packed two per byte, high nibble first; part 1: F32
// absmax per block of `blocksize` elements.
std::shared_ptr<const Transform> MakeNf4Transform(TransformSource source, uint64_t blocksize,
                                                  uint64_t segment_source_bytes);
// Part 0: dynamic 8-bit codes; part 1: F32 absmax per block.
std::shared_ptr<const Transform> MakeBlockwise8Transform(TransformSource source, uint64_t blocksize,
                                                         uint64_t segment_source_bytes);
// Part 0: I8 rows of `row_elements`, scaled by the row's absmax; part 1: F32
// absmax per row (SCB).
std::shared_ptr<const Transform> MakeInt8RowsTransform(TransformSource source, uint64_t row_elements,
                                                       uint64_t segment_source_bytes);
// Part 0: every element as `to` (BF16 or F16), rounded to nearest even.
std::shared_ptr<const Transform> MakeCastTransform(TransformSource source, Dtype to, uint64_t segment_source_bytes);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_VIEW_TRANSFORMS_H_
