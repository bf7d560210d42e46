// A virtual file of a view: an exact size and a list of extents that tile it.
// Each extent is synthesized bytes (a safetensors header, a JSON file), a byte
// range of a source object (a tensor passed through), or one part of a
// transform (transform.h: NF4 codes, their absmax, int8 rows, a cast) computed
// from a source tensor's bytes.
//
// Built by the view builders (views.h) from the checkpoint catalog alone, so
// the size is known before any tensor data is fetched. Read by ViewReader
// (view_reader.h) through the ReadEngine: a range of a view file turns into
// reads of exactly the source chunks it needs, and of the transforms' output,
// which they compute per segment (a run of whole quantization blocks or rows)
// and cache as derived chunks in the engine's cache.
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
#include <string>
#include <vector>

#include "core/store/object_store.h"
#include "core/util/status.h"
#include "core/util/types.h"
#include "core/views/transform.h"

namespace tensorfs {

struct Extent {
  enum class Kind { kBytes, kSource, kTransform };

  Kind kind = Kind::kBytes;
  uint64_t offset = 0;  // in the view file
  uint64_t length = 0;
  std::shared_ptr<const std::string> bytes;  // kBytes: bytes[0, length)
  ObjectInfo source;                         // kSource
  uint64_t source_offset = 0;                // kSource: absolute, in `source`
  std::shared_ptr<const Transform> transform;  // kTransform: the whole of part `part`
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
  void AddTransform(std::shared_ptr<const Transform> transform, int part);

  uint64_t size() const { return size_; }
  // Source bytes the file is made from (each transformed tensor counted once).
  uint64_t source_bytes() const { return source_bytes_; }
  // Some transform of the file computes ahead of its readers (transform.h).
  bool computes_ahead() const { return computes_ahead_; }
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
  bool computes_ahead_ = false;
  std::vector<Extent> extents_;
  void AddRun(const std::string& object, ByteRange range);
  std::map<std::string, std::vector<ByteRange>, std::less<>> runs_;  // per source object, in file order
  Status error_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_VIEW_FILE_H_
