// Slice patterns: how a partial-tensor reader (one host of a sharded job)
// reads a checkpoint, learned from its reads or given by `-o shard=R/N`.
//
// A multi-host job gives each process a part of every tensor: FSDP-style rank
// r of N reads rows [r*n/N, (r+1)*n/N) of each tensor (JAX's
// make_array_from_callback over a numpy.memmap, safetensors' get_slice). In
// bytes that is one contiguous range per tensor, the same fraction of each.
// A SlicePattern is that fraction (rl/N to rh/N of the rows), plus the bytes
// the kernel reads around such a range (mmap read-around and readahead), so
// that the window prefetched for a tensor is what the kernel will ask for.
//
// SliceLearner turns observations (the one range a reader touched in a tensor
// it has left) into patterns: once kMinSupport observations from different
// tensors agree on one fraction of rows, the fraction is known, with the
// observations it explains (LearnedPattern). Observations of several readers
// (two ranks on one host) form separate patterns. A reader later seen leaving
// rows of its pattern unread teaches its learner again, the pattern's
// observations voting with it, and a narrower fraction within it may come out.
//
// Thread-safety: SlicePattern is a value; SliceLearner has none of its own
// (ReadEngine calls it with its mutex held).
#ifndef TENSORFS_CORE_ENGINE_SLICE_PATTERN_H_
#define TENSORFS_CORE_ENGINE_SLICE_PATTERN_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/engine/tuning.h"
#include "core/util/types.h"

namespace tensorfs {

// A tensor's bytes in its file (absolute offsets) and the bytes of one index
// along its first dimension (the element size for a 1-D tensor).
struct TensorSpan {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t row_bytes = 1;

  uint64_t size() const { return end - begin; }
  uint64_t rows() const { return row_bytes == 0 ? 0 : size() / row_bytes; }
};

struct SliceObservation;

struct SlicePattern {
  // Rows [lo_num/den, hi_num/den) of every tensor, rounded out to whole rows.
  uint64_t lo_num = 0;
  uint64_t hi_num = 1;
  uint64_t den = 1;
  // Bytes the kernel reads before and after such a range.
  uint64_t before = 0;
  uint64_t after = 0;

  // Dim-0 slice `rank` of `world` (-o shard=R/N), with the kernel's
  // read-around at `tuning`'s readahead as margins.
  static SlicePattern Shard(uint64_t rank, uint64_t world, const Tuning& tuning = Tuning{});

  // The rows of `t` this pattern reads, in bytes (no margins).
  ByteRange Core(const TensorSpan& t) const;
  // What a reader of this pattern has the kernel read in `t`: the core with
  // its margins, rounded out to 4 KiB pages, within [lower, upper) (the
  // object's data section).
  ByteRange Window(const TensorSpan& t, uint64_t lower, uint64_t upper) const;
  // The mean size of its cores over `tensors`, counting those of a page or
  // more (a tensor of a few rows gives a few bytes, or none); 0 if none.
  uint64_t MeanCore(std::span<const TensorSpan> tensors) const;
  // Whether `other`'s rows all lie within this pattern's (as fractions).
  bool Contains(const SlicePattern& other) const {
    return lo_num * other.den <= other.lo_num * den && other.hi_num * den <= hi_num * other.den;
  }
  bool SameSlice(const SlicePattern& other) const {
    return lo_num * other.den == other.lo_num * den && hi_num * other.den == other.hi_num * den;
  }
  std::string ToString() const;  // "rows 1/8..2/8 (-64 KiB, +128 KiB)"
};

// One reader's touch of one tensor: the bytes [begin, end) (absolute) it had
// the kernel read there before moving on.
struct SliceObservation {
  TensorSpan tensor;
  uint64_t begin = 0;
  uint64_t end = 0;
  // The readahead of the file it was made in; 0: the learner's Tuning's.
  uint64_t readahead = 0;
};

// A pattern a learner found, with the observations it explains (its
// support: used up in that learner). They go with the pattern, so that a
// reader later seen reading narrower has them vote again, in its own learner
// (a process reads its rows of every shard, each file with a reader of its own).
struct LearnedPattern {
  SlicePattern pattern;
  std::vector<SliceObservation> support;
};

class SliceLearner {
 public:
  // The kernel's read-around and the largest denominator tried come from `tuning`.
  explicit SliceLearner(const Tuning& tuning = Tuning{}) : tuning_(tuning) {}

  static constexpr int kMinSupport = 3;  // agreeing tensors that make a pattern
  static constexpr size_t kRemembered = 24;

  // Whether `o` can teach anything: a tensor of a few rows and pages or more,
  // of which a part (not nearly all) was read.
  static bool Informative(const SliceObservation& o);

  // Adds an observation. Returns the pattern it completes, if any: observations
  // of kMinSupport different tensors, of sizes at least 1.5x apart, that one
  // fraction of rows explains. `narrowing`: a pattern the reader was taken to
  // read, which `o` leaves rows of unread (LeavesUnread): the observations it
  // was learned from vote again (those this learner does not remember), only
  // a narrower fraction within it is looked for, of tensors of any sizes, and
  // taken where the kernel's margins (KernelMargins) explain most of its
  // slices. Observations explained by a pattern returned are used up.
  std::optional<LearnedPattern> Observe(const SliceObservation& o, const LearnedPattern* narrowing = nullptr);
  // Whether the reader of `o` left rows of `p`'s core in `o`'s tensor
  // unread (its own slice is narrower): more than two rows and a page of it
  // before the first byte it had the kernel read there, or past the last
  // (loaders may split rows differently by that much), having read at least
  // half of it (less is the kernel reading around a neighbour); a copy's end
  // is taken half a read-around less a page before `o`'s (the kernel read at
  // least around its last page). An end of `o` within one readahead window
  // of its tensor's tells nothing (see BeginsNearItsStart).
  bool LeavesUnread(const SliceObservation& o, const SlicePattern& p) const;

 private:
  // Whether `o` is a copy: four readahead windows or more (a scattered
  // page's read-around is one).
  bool Copied(const SliceObservation& o) const;
  // Where the reader of `o` may have begun: its tensor's first byte when `o`
  // is a copy that begins within one readahead window of it (those
  // pages may have been read around a neighbour, a layer norm before it,
  // before the reader came, and the kernel reads no page twice), else where
  // `o` begins.
  uint64_t LikelyBegin(const SliceObservation& o) const;
  // Whether `o` begins within one readahead window of its tensor's start, or
  // ends within one of its end: the kernel may have read the pages between
  // around a neighbour (a layer norm, a header) before the reader came, and
  // it reads no page twice, so what `o` shows there is not the reader's.
  bool BeginsNearItsStart(const SliceObservation& o) const;
  bool EndsNearItsEnd(const SliceObservation& o) const;
  // Whether rows lo/den..hi/den of `p` explain `o`, and with which margins.
  bool Fits(const SliceObservation& o, const SlicePattern& p, uint64_t* before, uint64_t* after) const;
  // Which of the kernel's ways of reading around a slice margins `before`
  // and `after` of one in `o` are (Fits allows more, for readers that copy
  // in other orders): the read-around of its first and last pages only
  // (kReadAround), or readahead windows running on past it (kReadahead);
  // 0: neither.
  static constexpr int kReadAround = 1;
  static constexpr int kReadahead = 2;
  int KernelMargins(const SliceObservation& o, uint64_t before, uint64_t after) const;

  Tuning tuning_;
  std::deque<SliceObservation> recent_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_SLICE_PATTERN_H_
