// Transform: the output of one view tensor computed from one source tensor
// (a cast, an NF4 or 8-bit quantization, int8 rows, a GGUF quantization with
// its row permutation). It is the one object that knows both where its output
// bytes come from and how to compute them, and it reads them: the view reader
// hands it a range of its output and gets that range's bytes back, once.
//
//   Read(engine, part, range)
//     -> the segments the range overlaps (runs of whole units: blocks, rows,
//        attention heads; a quantized block never straddles two segments)
//     -> each a derived chunk (ReadEngine::ReadDerived): cached, being
//        computed (joined), or computed now from the segment's source range,
//        read through the engine, on a thread of the ComputePool (or, without
//        one, on the thread that delivered those bytes)
//     -> done(pieces) once all are in, in order.
//   Prefetch(engine, part, from, budget): the source bytes of the segments
//   from `from` on that are neither computed nor being computed.
//   ComputeAhead(engine, part, from, count): for a transform made to compute
//   ahead, the next `count` segments from `from` computed now, each on the
//   pool as soon as its source bytes are in, so a reader going through the
//   output in order finds them done and the machine's cores work side by
//   side.
//
// Output and parts. A transform's output may be split into parts that a view
// file shows as separate tensors (NF4 codes, then their absmax values); a
// segment's derived chunk holds that segment's bytes of every part, part
// after part. Subclasses say how many bytes each part has for a number of
// elements (PartBytes) and how elements become output (Emit); the base class
// decodes the source (F32, F16 or BF16, widened exactly to float32) a slice
// of whole units at a time and tiles the output.
//
// Thread-safety: immutable once made; always held by a shared_ptr (a
// computation in flight keeps its transform alive). Read and Prefetch may be
// called from any thread at once.
#ifndef TENSORFS_CORE_VIEWS_TRANSFORM_H_
#define TENSORFS_CORE_VIEWS_TRANSFORM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/engine/read_engine.h"
#include "core/engine/read_result.h"
#include "core/safetensors/dtype.h"
#include "core/store/object_store.h"
#include "core/util/types.h"
#include "core/views/compute_pool.h"

namespace tensorfs {

// What a transform is computed from: one source tensor.
struct TransformSource {
  ObjectInfo object;     // the shard holding the tensor
  std::string tensor;    // its name, for messages and cache keys
  ByteRange range;       // absolute, in the shard
  Dtype dtype = Dtype::F32;  // F32, F16 or BF16
  uint64_t elements = 0;
  // Non-zero: the source is a 2-D tensor of this many rows, transformed as
  // its transpose (a Conv1D weight stored [in, out], quantized as the [out,
  // in] weight of a Linear layer). The whole tensor is then one segment.
  uint64_t transpose_rows = 0;
};

class Transform : public std::enable_shared_from_this<Transform> {
 public:
  virtual ~Transform() = default;

  const TransformSource& source() const { return source_; }
  int parts() const { return parts_; }
  uint64_t PartSize(int part) const { return PartBytes(part, source_.elements); }

  // Reads bytes [range.offset, range.end()) of part `part` (within
  // PartSize(part)) and calls `done` exactly once, on any thread, maybe before
  // returning. `within`: the run of source bytes of the view file that holds
  // this transform's source (ReadHints::within) for the source reads.
  // `pool`: where segments are computed (null: on the thread that delivers
  // their source bytes).
  void Read(ReadEngine& engine, const std::shared_ptr<ComputePool>& pool, int part, ByteRange range,
            std::optional<ByteRange> within, ReadDone done) const;

  // Requests, at prefetch priority, the source bytes of part `part` from its
  // byte `from` on, up to `source_budget` source bytes (lowered by what it
  // requested), skipping the segments computed or being computed. Returns the
  // part offset the request reaches (PartSize(part) when it covers the rest).
  // Only part 0 fetches: the other parts come from the same source.
  uint64_t Prefetch(ReadEngine& engine, int part, uint64_t from, uint64_t& source_budget,
                    std::optional<ByteRange> within) const;

  // Whether a reader should have segments computed ahead of it (see the top).
  bool compute_ahead() const { return compute_ahead_; }
  // Starts computing the segments of part `part` from the one holding byte
  // `from` on, `segments` of them at most (lowered by those it went through,
  // computed before or not). Returns the part offset reached. Does nothing
  // unless compute_ahead().
  uint64_t ComputeAhead(ReadEngine& engine, const std::shared_ptr<ComputePool>& pool, int part, uint64_t from,
                        uint64_t& segments, std::optional<ByteRange> within) const;

 protected:
  // `unit`: elements per block, row or head (a segment holds whole units);
  // segments hold about `segment_source_bytes` of source data. `kind` names
  // the computation and every parameter that changes its bytes: with the
  // source, it is what derived chunks are found by.
  Transform(TransformSource source, int parts, uint64_t unit, uint64_t segment_source_bytes, std::string kind,
            bool compute_ahead = false);

  // Bytes of part `part` for the first `n` elements (n a multiple of the
  // unit, or all).
  virtual uint64_t PartBytes(int part, uint64_t n) const = 0;
  // Writes the output of the elements `x` (whole units, starting at a unit
  // boundary) into `out[p]`, their bytes of part p.
  virtual void Emit(std::span<const float> x, std::span<const std::span<std::byte>> out) const = 0;

  uint64_t unit() const { return unit_; }

 private:
  uint64_t segment_elements() const { return unit_ * units_per_segment_; }
  uint64_t segments() const { return (source_.elements + segment_elements() - 1) / segment_elements(); }
  uint64_t SegmentFirst(uint64_t s) const { return s * segment_elements(); }
  uint64_t SegmentCount(uint64_t s) const;
  // The segment whose part `part` holds byte `offset` of that part.
  uint64_t SegmentAt(int part, uint64_t offset) const { return offset / PartBytes(part, segment_elements()); }
  // Where part `part` of segment `s` starts and ends in the part's output.
  uint64_t PartOffset(int part, uint64_t s) const { return PartBytes(part, SegmentFirst(s)); }
  uint64_t PartEnd(int part, uint64_t s) const { return PartBytes(part, SegmentFirst(s) + SegmentCount(s)); }
  // Bytes of segment `s`'s derived chunk (all parts), and where part `part`
  // starts in it.
  uint64_t SegmentBytes(uint64_t s) const;
  uint64_t OffsetInSegment(int part, uint64_t s) const;
  // The source bytes segment `s` needs (absolute).
  ByteRange SourceRange(uint64_t s) const;
  ChunkKey Key(uint64_t s) const;
  // What computes segment `s`'s derived chunk: its source read through the
  // engine, then Compute.
  DeriveFn Deriver(ReadEngine& engine, const std::shared_ptr<ComputePool>& pool, uint64_t s,
                   std::optional<ByteRange> within) const;

  // Computes segment `s` from its source bytes (in pieces as the cache holds
  // them) into `out` (SegmentBytes(s)).
  void Compute(uint64_t s, std::span<const std::span<const std::byte>> source, std::span<std::byte> out) const;
  // Emits elements [done, done + x.size()) of segment `s` into its chunk.
  void EmitInto(uint64_t s, uint64_t done, std::span<const float> x, std::span<std::byte> out) const;

  const TransformSource source_;
  const int parts_;
  const uint64_t unit_;
  uint64_t units_per_segment_ = 1;
  const std::string key_;  // kind, unit, layout, source name and offset
  const bool compute_ahead_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_TRANSFORM_H_
