// ReadTogether: what all the readers of one object read, taken together.
//
// Each reader is classified from its own reads (access_model.h), and what
// each one needs is fetched for it. Several readers of one object may each
// read a part of its tensors while together they read all of it: the ranks of
// a tensor-parallel job on one host (process r copies rows r/N of every
// tensor), a loader's threads copying different tensors out of one mapping,
// a whole-tensor loader beside a slice reader of the same checkpoint. Fetched
// for each reader, such an object comes as each reader's pieces: many small
// requests for bytes that one loader would get in a few large ones.
//
// This records the union of the kernel's reads of each of the object's
// tensors of at least Tuning::whole_min bytes, whoever made them, and the
// readers that made them lately. Once one such tensor was read nearly whole
// (as the access model takes a reader's nearly whole tensor: all but a tenth)
// while two readers or more read the object, the object is read whole by its
// readers together, and the engine serves it as it serves a whole-
// tensor loader: every read's chunk whole, the object prefetched in storage
// order. A reader alone with its slice never makes its tensors nearly whole,
// nor do slice readers whose slices together leave rows unread (two hosts of
// a job of eight); nor does one reader on its own (the access model tells
// whether it reads whole tensors). The state is bounded: the partial unions
// of at most kTensors tensors (the least covered go), at most kReaders
// readers, each forgotten after Tuning::whole_memory reads of the object
// without a read of its own.
//
// Pure logic. Thread-safety: none of its own; ReadEngine calls it under its
// mutex.
#ifndef TENSORFS_CORE_ENGINE_READ_TOGETHER_H_
#define TENSORFS_CORE_ENGINE_READ_TOGETHER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "core/engine/chunk_plan.h"
#include "core/engine/tuning.h"
#include "core/util/types.h"

namespace tensorfs {

class ReadTogether {
 public:
  // A reader of the object: its ReaderId's value, process and thread.
  using Reader = std::tuple<uint64_t, uint64_t, uint64_t>;

  // A kernel read of `range` of the object planned as `plan`, by `reader`,
  // the engine tuned by `tuning`. Returns true when this read made the
  // object read whole together.
  bool Note(const ChunkPlan& plan, ByteRange range, const Reader& reader, const Tuning& tuning);
  // Where the run of reads of its tensor that `range` (a kernel read Note
  // was told of) is part of most likely ends, when two runs or more of that
  // tensor tell (UINT64_MAX when they do not): readers of one tensor that each
  // read on from a different place split it among them, the rows of each
  // ending where the next reader's began (a tensor-parallel rank's end is the
  // next rank's start; the last one's, the tensor's end). Slices of rows are
  // alike in size and begin at the tensor's start, so a run goes no further
  // than the least distance between the runs' starts (or a run's and the
  // tensor's) past the read: the next run may be several readers' rows away
  // (readers in between not begun yet, or not on this mount).
  uint64_t SplitEnd(const ChunkPlan& plan, ByteRange range) const;
  // The open file `value` of `process` was closed: its readers (the file's,
  // its threads') are no longer among the object's.
  void Release(uint64_t value, uint64_t process);
  // Its readers together read it whole (Note), or the readers of the object
  // before it in its checkpoint did (Inherit).
  bool whole() const { return whole_; }
  // The object is one its readers will read as they read the one before it
  // in their checkpoint, which they read whole together.
  void Inherit() { whole_ = true; }
  // True once, the first time it is asked after the object became read whole
  // together (by Note or Inherit): the engine then starts serving it so.
  bool TakeNew() {
    const bool fresh = whole_ && !taken_;
    taken_ = taken_ || whole_;
    return fresh;
  }

  static constexpr size_t kTensors = 64;
  static constexpr size_t kReaders = 64;
  size_t tracked_tensors() const { return partial_.size(); }
  size_t tracked_readers() const { return readers_.size(); }

 private:
  std::map<int, std::vector<ByteRange>> partial_;  // tensor -> the ranges read of it, merged, in order
  std::map<Reader, uint64_t> readers_;             // -> `reads_` at its last read of a tensor
  uint64_t reads_ = 0;                             // reads of the object's tensors noted
  bool whole_ = false;
  bool taken_ = false;  // TakeNew answered true
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_READ_TOGETHER_H_
