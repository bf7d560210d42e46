// AccessModel: what a reader is doing, from the kernel's reads alone.
//
// It sees each kernel read of a safetensors file's data, with the state of
// the reader that made it (an open file: its Trail in the object, its
// ReaderClock, its SliceLearner), and answers which kind of reader this is:
// one reading whole tensors, a slice (the same fraction of rows of every
// tensor, learned from the tensors it left; see slice_pattern.h), the kernel
// reading around a slice or a copy, or not known yet. It keeps the slice
// patterns learned, each seen by the readers of the process that learned it
// (a host's next file is read by a new reader of that process; Sees): a
// reader of another process, a whole-tensor loader reading the same tensors
// say, is classified from its own reads as if the pattern were not there.
// -o shard's pattern is every reader's.
//
// Pure logic: no I/O, no cache, no lock of its own (ReadEngine calls it under
// its mutex). What a read calls for at once (the rest of a tensor a
// whole-tensor copy began, the bytes between a copy's first and last pages,
// the end of a pattern forgotten) comes back as PlannerCalls, which the fetch
// planner carries out.
#ifndef TENSORFS_CORE_ENGINE_ACCESS_MODEL_H_
#define TENSORFS_CORE_ENGINE_ACCESS_MODEL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/chunk_plan.h"
#include "core/engine/slice_pattern.h"
#include "core/engine/tuning.h"
#include "core/util/types.h"

namespace tensorfs {

// Whether two readers' processes (ReaderId::process, 0: not known) may be
// one: the same, or either not known. A reader takes what readers of its own
// process learned or prepared for it, never what another process's did.
inline bool MaybeOneProcess(uint64_t a, uint64_t b) { return a == 0 || b == 0 || a == b; }

class AccessModel {
 public:
  // kWhole: a whole-tensor reader (or a read before any tensor). kSlice: in
  // a slice pattern's window. kNearSlice: just outside one (the kernel reading
  // around it); kAround: at a copy's likely last page, or past the end of a
  // copy whose extent is known. Only the bytes read are fetched for either.
  // kWholeEnd: the last page of a tensor read right after its first (a fault
  // on one of its pages, not the kernel reading around one past it), likely
  // a whole-tensor copy: its chunks come whole, nothing more.
  enum class Mode { kWhole, kSlice, kNearSlice, kAround, kWholeEnd, kUnknown };
  // What a read calls for at once, for the planner (in this order): request
  // the rest of a tensor a whole-tensor copy began (kWholeTensor), or the
  // bytes between a copy's first and last pages (kCopyGap); stop the sweeps
  // of a slice pattern the model forgot (kPatternDropped).
  struct PlannerCall {
    enum class Kind { kWholeTensor, kCopyGap, kPatternDropped } kind;
    size_t tensor = 0;   // kWholeTensor
    ByteRange range;     // kCopyGap
    int pattern_id = 0;  // kPatternDropped
  };
  struct ActivePattern {
    int id = 0;
    // The pattern and the observations it was learned from (none for -o
    // shard's, which is given).
    LearnedPattern learned;
    // The reader that learned it (Reader::id) and that reader's process (0:
    // not known); no reader for -o shard's. That reader, or another of its
    // process (which reads its rows of every shard, a file each), may narrow
    // it, the observations it was learned from voting again.
    std::optional<uint64_t> reader;
    uint64_t process = 0;
  };
  // A touched range of one tensor (absolute offsets), kept until the reader
  // has left it for Tuning::settle_reads reads, then taught to the learner.
  struct Touch {
    int tensor = 0;
    ByteRange range;
    uint64_t last_read = 0;
    uint64_t first_read = 0;
    // Made by a read across a tensor boundary, at the end of the tensor it
    // began in: the kernel reading around the next one's start. No more so
    // once it has grown into another touch (the reader's slice up to the
    // edge, the last rank's).
    bool around_next = false;
    // Made by a read across a tensor boundary past a slice the reader read
    // up to it: the kernel's readahead spilling over.
    bool spilled = false;
    // Made, at the end of the tensor, by a read whose fault lay past it
    // (FaultFrom): the kernel reading around a page of a tensor after it,
    // nothing the reader touched here. Never the last page of a copy of this
    // tensor, which faults on its own pages only. No more so once it has
    // grown into another touch.
    bool neighbours_fault = false;
    uint64_t grown_at = 0;  // the read that last made it larger
    uint64_t copy_end = 0;  // where the copy reading it ends, once known; 0 before
    uint64_t read_before = 0;  // when it appeared: the largest touch of its tensor before it
  };
  // What one reader did lately in one object.
  struct Trail {
    std::vector<Touch> touches;
    // This reader's reads of the object: one tick per read classified, and
    // one per read the fetch planner's streams count.
    uint64_t clock = 0;
    // The touches it left last, oldest first: Tuning::left_remembered of
    // them that are not near a tensor's edge, and as many small ones near an
    // edge that reach neither edge (`edge`: a slice reader's rows there, an
    // early or a late rank's of a tensor of a few MiB; the kernel reading
    // around a neighbour, or on from it, comes in across an edge, and those
    // touches are not kept). A reader that comes back to the tensor of one
    // that is not an edge at another place reads scattered, not a slice:
    // until `clock` reaches `scattered_until` it teaches the slice learner
    // nothing. The edges tell where the reader's rows likely end in the next
    // tensor it reads (FetchPlanner::LikelySliceEnd), not whether it came
    // back.
    struct Left {
      int tensor = 0;
      ByteRange range;
      bool edge = false;
    };
    std::vector<Left> left;
    uint64_t scattered_until = 0;
  };
  // A reader's reads of every object, and whether it was seen reading whole
  // tensors lately.
  struct ReaderClock {
    uint64_t reads = 0;        // kernel reads of safetensors data
    uint64_t whole_until = 0;  // whole-tensor reads seen: until `reads` reaches this
    // Its file was opened at the whole-tensor readahead (a whole-tensor reader
    // was seen on the mount): the kernel reads a whole readahead around its
    // faults, so its reads of kinds not known yet fetch whole chunks rather
    // than pieces of them, until its reads fall in a slice pattern's windows.
    bool presumed_whole = false;
    // Presumed so for its file's readers before it, its own process not seen
    // reading whole tensors: its touches still teach the slice learner.
    bool presumed_by_file = false;
  };
  // The reader a read is for: an open file (`id`, its ReaderId::value), or
  // the reads that name no reader (`id` 0: one state for all of them, which
  // several slice readers may share).
  struct Reader {
    Trail& trail;
    ReaderClock& clock;
    SliceLearner& learner;
    uint64_t id = 0;
    // The readahead the object's files were opened with (ObjectState::
    // file_readahead); 0: the files opened now get.
    uint64_t file_readahead = 0;
    // The process that opened the file (ReaderId::process); 0: not known.
    uint64_t process = 0;

    bool named() const { return id != 0; }
  };
  struct Answer {
    Mode mode = Mode::kWhole;
    const ActivePattern* pattern = nullptr;  // kSlice, kNearSlice; valid until the next Classify
    uint64_t copy_end = UINT64_MAX;          // where the copy this read is part of ends, if known
    std::vector<PlannerCall> calls;
  };

  // `shard`: the slice pattern of -o shard=R/N, kept first and never dropped.
  AccessModel(const Tuning& tuning, std::optional<SlicePattern> shard);

  // Records a kernel read of `range` of the object planned as `plan` (named
  // `name`, for the log) by `reader`, and says what the reader is doing.
  Answer Classify(const ChunkPlan& plan, const std::string& name, const Reader& reader, ByteRange range);

  // The files of the mount are now opened at `readahead` (0: the kernel's
  // default).
  void SetReadahead(uint64_t readahead) { readahead_ = readahead; }
  // The readahead of a file opened at `file_readahead` (0: at the one files
  // are opened with now); 0 when that is the kernel's default, left as it is.
  uint64_t FileReadahead(uint64_t file_readahead) const { return file_readahead != 0 ? file_readahead : readahead_; }
  // The window of `pattern` in tensor `index` of `plan`, for files opened at
  // `file_readahead` (0: at the readahead files are opened with now): below
  // the readahead the engine learns at (a slice readahead), its margins are
  // no wider than what the kernel reads around a fault there.
  ByteRange WindowOf(const ChunkPlan& plan, const SlicePattern& pattern, size_t index,
                     uint64_t file_readahead = 0) const;
  // Half the kernel's read-around for files opened at `file_readahead` (0:
  // at the readahead files are opened with now), as the engine tunes it: at
  // most Tuning::read_around_half.
  uint64_t ReadAroundHalf(uint64_t file_readahead) const;
  const std::vector<ActivePattern>& patterns() const { return patterns_; }
  // The pattern with id `id`, or null.
  const ActivePattern* Pattern(int id) const;
  // Whether `reader` takes pattern `p` into account: -o shard's, or one
  // learned by a reader of its own process (either not known: any).
  static bool Sees(const Reader& reader, const ActivePattern& p);

 private:
  // Takes `found`, a pattern the learner of `reader` completed, unless one
  // of the same slice is known: in place of pattern `narrowing` where that is
  // wider (its reader was seen leaving rows of it unread), else as one more.
  void Learned(const std::string& name, LearnedPattern found, int narrowing, const Reader& reader,
               std::vector<PlannerCall>* calls);
  // The first page the fault that made the kernel read `range` can be on,
  // for a reader of a file opened at `file_readahead`: the kernel reads
  // around a faulting page by the file's readahead, half of it past the page
  // (a read longer than that is bounded by its own length).
  uint64_t FaultFrom(ByteRange range, uint64_t file_readahead) const;
  // Whether `range` lies within Tuning::near_window of `window` (a slice
  // reader's kernel reading around its slice).
  bool IsNear(ByteRange window, ByteRange range) const;
  // Whether `range` of tensor `index` is near the window of a pattern
  // `reader` sees.
  bool NearKnownWindow(const ChunkPlan& plan, size_t index, ByteRange range, const Reader& reader) const;
  // Whether, for a pattern `reader` sees, `head` (a touch of tensor `index`)
  // is near its window of that tensor and `tail` (a touch at the tensor's
  // end) near its window of a tensor that follows.
  bool NextWindowsFirstPage(const ChunkPlan& plan, size_t index, ByteRange head, ByteRange tail,
                            const Reader& reader) const;

  const Tuning& tuning_;
  const bool shard_;  // patterns_ begins with -o shard's
  uint64_t readahead_ = 0;  // the files opened now get (SetReadahead)
  std::vector<ActivePattern> patterns_;
  int next_pattern_id_ = 0;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_ACCESS_MODEL_H_
