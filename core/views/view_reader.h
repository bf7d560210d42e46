// ViewReader: serves reads of view files (view_file.h) from the ReadEngine.
//
//   Read(file, offset, size)
//     -> the extents the range overlaps
//        header bytes: a slice of the file's own string
//        a source range: ReadEngine::Read of exactly that range, without the
//          engine's stream prefetch (the reader prefetches for the view)
//        a transform part: Transform::Read of that range (transform.h),
//          which reads its derived chunks and their sources from the engine
//          and computes them on the reader's ComputePool (a thread per core)
//     -> done(pieces) once all are in, in file order (gather.h).
//   Compute ahead: after each read of a file whose transforms compute ahead
//   (the GGUF view's), the next compute_ahead segments after the read are
//   computed on the pool as their source bytes come in, so a reader going
//   through the file in order finds them done and the machine's cores
//   quantize side by side while the link brings the next.
//   Prefetch: a reader past a file's header gets the sources of the next
//   prefetch_window bytes of the file requested ahead of it, topped up as it
//   reads. When the file before this one in its directory's order was read
//   too, or half of the directory's first file has been read (a loader going
//   through the layers one after another), the window runs on into the
//   following files; any other file read on its own fetches only its own
//   sources.
//
// Thread-safety: all methods may be called concurrently. prefetch_mu_ is taken
// before the engine's mutex (see core/util/thread_annotations.h).
#ifndef TENSORFS_CORE_VIEWS_VIEW_READER_H_
#define TENSORFS_CORE_VIEWS_VIEW_READER_H_

#include <cstdint>
#include <memory>

#include "core/engine/read_engine.h"
#include "core/engine/read_result.h"
#include "core/util/thread_annotations.h"
#include "core/views/compute_pool.h"
#include "core/views/view_file.h"

namespace tensorfs {

class ViewReader {
 public:
  // `engine` must outlive the reader.
  ViewReader(ReadEngine& engine, uint64_t prefetch_window, uint64_t compute_ahead = 0)
      : engine_(engine),
        window_(prefetch_window),
        compute_ahead_(compute_ahead),
        pool_(std::make_shared<ComputePool>()) {}

  // Reads up to `size` bytes at `offset` of `file` (fewer at its end) and calls
  // `done` exactly once, on any thread, maybe before returning.
  void Read(std::shared_ptr<const ViewFile> file, uint64_t offset, size_t size, ReadDone done) EXCLUDES(prefetch_mu_);

 private:
  // Called with every read of `file`, [read_begin, read_end).
  void MaybePrefetch(const ViewFile& file, uint64_t read_begin, uint64_t read_end) EXCLUDES(prefetch_mu_);
  // Requests the sources of `file` from view offset `from` on, up to
  // `source_budget` source bytes, which it lowers by what it requested;
  // returns the view offset reached.
  uint64_t PrefetchSources(const ViewFile& file, uint64_t from, uint64_t& source_budget) REQUIRES(prefetch_mu_);
  // Has the segments after view offset `from` computed (see the top).
  void ComputeAhead(const ViewFile& file, uint64_t from);

  ReadEngine& engine_;
  const uint64_t window_;
  const uint64_t compute_ahead_;  // segments
  // Kept alive by the computations posted to it, which may end after the
  // reader (the engine outlives it).
  const std::shared_ptr<ComputePool> pool_;
  Mutex prefetch_mu_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_VIEW_READER_H_
