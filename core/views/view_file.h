// A virtual file of a view: an exact size and a list of extents that tile it.
// Each extent is synthesized bytes (a safetensors header, a JSON file), a byte
// range of a source object (a tensor passed through), or one part of a tensor
// transform (NF4 codes, their absmax, int8 rows, a cast) computed from a
// source tensor's bytes.
//
// Built by the view builders (views.h) from the checkpoint catalog alone, so
// the size is known before any tensor data is fetched. Read by ViewReader
// (view_reader.h) through the ReadEngine: a range of a view file turns into
// reads of exactly the source chunks it needs, and transforms are computed per
// segment (a run of whole quantization blocks or rows), cached as derived
// chunks in the engine's cache.
//
// Thread-safety: a ViewFile is immutable once published (shared_ptr<const>),
// except for the prefetch bookkeeping, which is atomic.
#ifndef TENSORFS_CORE_VIEWS_VIEW_FILE_H_
#define TENSORFS_CORE_VIEWS_VIEW_FILE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/safetensors/dtype.h"
#include "core/store/object_store.h"
#include "core/util/status.h"
#include "core/util/types.h"

namespace tensorfs {

// One quantization or cast of one source tensor. Its output is split into
// parts (codes, then the per-block or per-row scales) that appear in the view
// file as separate tensors, and into segments: runs of whole units (blocks or
// rows) computed together, so that a read computes only the segments it
// touches. A segment's derived chunk holds that segment's bytes of every part,
// part after part.
struct TensorTransform {
  enum class Op {
    kNf4,         // part 0: NF4 codes packed two per byte; part 1: F32 absmax per block
    kBlockwise8,  // part 0: dynamic 8-bit codes; part 1: F32 absmax per block
    kInt8Rows,    // part 0: I8 rows scaled by the row's absmax; part 1: F32 row absmax (SCB)
    kCastBf16,    // part 0: BF16
    kCastF16,     // part 0: F16
  };

  Op op = Op::kCastBf16;
  ObjectInfo source;       // the shard holding the tensor
  std::string tensor;      // its name, for messages and cache keys
  ByteRange source_range;  // absolute, in the shard
  Dtype dtype = Dtype::F32;  // F32, F16 or BF16
  uint64_t elements = 0;
  uint64_t unit = 1;       // elements per block (kNf4, kBlockwise8) or row (kInt8Rows); 1 for casts
  uint64_t units_per_segment = 1;
  // Non-zero: the source is a 2-D tensor of this many rows, transformed as
  // its transpose (a Conv1D weight stored [in, out], quantized as the [out, in]
  // weight of a Linear layer). The whole tensor is then one segment.
  uint64_t transpose_rows = 0;

  // `unit_elements` is the block size or the row length. Segments hold about
  // `segment_source_bytes` of source data.
  static std::shared_ptr<const TensorTransform> Make(Op op, ObjectInfo source, std::string tensor,
                                                      ByteRange source_range, Dtype dtype, uint64_t elements,
                                                      uint64_t unit_elements, uint64_t segment_source_bytes,
                                                      uint64_t transpose_rows = 0);

  int parts() const;
  // Bytes of part `part` for the first `n` elements (n a multiple of unit, or all).
  uint64_t PartBytes(int part, uint64_t n) const;
  uint64_t PartSize(int part) const { return PartBytes(part, elements); }
  uint64_t segment_elements() const { return unit * units_per_segment; }
  uint64_t segments() const { return (elements + segment_elements() - 1) / segment_elements(); }
  // Elements [first, first + count) of segment `s`.
  uint64_t SegmentFirst(uint64_t s) const { return s * segment_elements(); }
  uint64_t SegmentCount(uint64_t s) const;
  // Bytes of the derived chunk of segment `s` (all parts).
  uint64_t SegmentBytes(uint64_t s) const;
  // Where part `part` of segment `s` starts: in the part's output, and in the chunk.
  uint64_t PartOffset(int part, uint64_t s) const { return PartBytes(part, SegmentFirst(s)); }
  uint64_t PartEnd(int part, uint64_t s) const { return PartBytes(part, SegmentFirst(s) + SegmentCount(s)); }
  uint64_t OffsetInSegment(int part, uint64_t s) const;
  // The source bytes segment `s` needs (absolute).
  ByteRange SourceRange(uint64_t s) const;

  // Computes segment `s` from its source bytes (SourceRange(s), in pieces as
  // the cache holds them) into `out` (SegmentBytes(s)).
  void Compute(uint64_t s, std::span<const std::span<const std::byte>> source, std::span<std::byte> out) const;

 private:
  // Writes the output of elements [first + done, first + done + x.size()) of
  // segment `s` (x: those elements, decoded) into `out`, the segment's chunk.
  void Emit(uint64_t s, uint64_t done, std::span<const float> x, std::span<std::byte> out) const;
};

struct Extent {
  enum class Kind { kBytes, kSource, kTransform };

  Kind kind = Kind::kBytes;
  uint64_t offset = 0;  // in the view file
  uint64_t length = 0;
  std::shared_ptr<const std::string> bytes;  // kBytes: bytes[0, length)
  ObjectInfo source;                         // kSource
  uint64_t source_offset = 0;                // kSource: absolute, in `source`
  std::shared_ptr<const TensorTransform> transform;  // kTransform: the whole of part `part`
  int part = 0;
};

class ViewFile {
 public:
  ViewFile() = default;
  // A file that exists but cannot be read: `error` says which source is broken
  // and how.
  explicit ViewFile(Status error) : error_(std::move(error)) {}

  void AddBytes(std::string bytes);
  void AddSource(const ObjectInfo& source, ByteRange range);
  void AddTransform(std::shared_ptr<const TensorTransform> transform, int part);

  uint64_t size() const { return size_; }
  // Source bytes the file is made from (each transformed tensor counted once).
  uint64_t source_bytes() const { return source_bytes_; }
  const std::vector<Extent>& extents() const { return extents_; }
  // OK, or why the file cannot be read.
  const Status& error() const { return error_; }
  // The index of the first extent that ends after `offset`.
  size_t ExtentAt(uint64_t offset) const;
  // The run of consecutive source bytes of `object` this file reads that holds
  // `range` (for ReadHints::within): its reads stay inside it.
  ByteRange RunOf(const std::string& object, ByteRange range) const;

  // Read order within a view directory (splitted_model: forward order of the
  // layers), for prefetching the next file of a reader going through them.
  // Set once while the directory is built, before the files are published.
  const ViewFile* previous = nullptr;
  const ViewFile* next = nullptr;
  // Prefetch bookkeeping (ViewReader): how far this file's sources have been
  // requested, and how many bytes of it have been read (0: never read).
  mutable std::atomic<uint64_t> prefetched_to{0};
  static constexpr uint64_t kNever = ~uint64_t{0};
  mutable std::atomic<uint64_t> continued_at{kNever};  // read offset when the window last ran on
  mutable std::atomic<uint64_t> bytes_read{0};

 private:
  uint64_t size_ = 0;
  uint64_t source_bytes_ = 0;
  std::vector<Extent> extents_;
  void AddRun(const std::string& object, ByteRange range);
  std::map<std::string, std::vector<ByteRange>, std::less<>> runs_;  // per source object, in file order
  Status error_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_VIEW_FILE_H_
