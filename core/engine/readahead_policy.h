// ReadaheadPolicy: the kernel readahead a mount's files are opened with.
//
// The kernel reads ahead of a reader, and around each mmap fault, by the
// readahead of its open file, and a file takes the mount's readahead (its
// bdi's read_ahead_kb) when it is opened: a later change of the bdi leaves the
// files already open as they are. A mount therefore has one readahead at a
// time, and the way to give one kind of reader a readahead of its own is to
// set the mount's before that reader opens its next file.
//
// Four values (see the defaults below for how they were chosen):
//   - `unknown`, for files opened before anything is known of the mount's
//     readers: the kernel's default, at which the engine tells readers apart
//     and learns slices (a larger read-around hides a slice of a few hundred
//     KiB among its neighbours' bytes); and `unknown_shard`, half of it, for
//     such a file when it is one shard of several (model-0000i-of-0000n): a
//     whole reader reads only that share of its checkpoint at it, a slice
//     reader's kernel reads a third less around each slice there;
//   - `whole`, once a reader of whole tensors is seen: large enough that the
//     kernel keeps enough 1 MiB FUSE requests in flight for the bytes the
//     engine prefetched to flow;
//   - `slice`, once a slice reader (one host of a sharded job reading a part
//     of every tensor) is learned while no whole-tensor reader has a file
//     open: each mmap fault reads little beyond the slice, so that bytes of
//     the neighbouring hosts' slices are neither fetched nor sent; and
//     `slice_small`, half of it, once the slices are known to average under
//     `small_slice` (the kernel reads about twice its readahead around each
//     slice, a share of the slice that grows as slices shrink).
// `-o read_ahead=` given: that value for every file, never changed. `-o
// shard=R/N` given: `slice` from the start (the process says it reads slices);
// `-o shard=0/1`: `whole` from the start (the one host reads every tensor whole).
// The last kind seen stays in force after its readers' files are closed (a
// loader's next file is opened by a new reader once the last one is closed).
// Only files opened after a change get the new value: a loader's first file
// is read at `unknown` (or `unknown_shard`). Limits: one value for the whole
// mount at a time, so a whole-tensor reader and a slice reader reading at
// once both get `whole`; a slice reader coming to a mount set for whole
// readers has its first file read at `whole`, where slices smaller than half
// of it are not learned (give it -o shard=).
//
// Pure logic: ReadEngine tells it what its readers are and applies Wanted(),
// or WantedFor() as a safetensors file is opened, through a sink (the FUSE
// adapter writes the bdi).
//
// Thread-safety: none of its own; ReadEngine calls it under its mutex.
#ifndef TENSORFS_CORE_ENGINE_READAHEAD_POLICY_H_
#define TENSORFS_CORE_ENGINE_READAHEAD_POLICY_H_

#include <cstdint>

namespace tensorfs {

class ReadaheadPolicy {
 public:
  // What a reader (one open file) is known to be doing.
  enum class Kind { kUnknown, kWhole, kSlice };

  struct Options {
    uint64_t unknown = 0;  // bytes; 0: the kernel's, left as it is
    uint64_t unknown_shard = 0;  // for one shard of several while `unknown`; 0: `unknown`
    uint64_t whole = 0;
    uint64_t slice = 0;
    uint64_t slice_small = 0;  // for slices averaging under `small_slice`
    uint64_t small_slice = 0;
    bool fixed = false;  // read_ahead= given: `unknown` is that value, always
    // What -o shard= says the readers do: kSlice (R/N, N > 1) or kWhole (0/1)
    // from the start and always; kUnknown when not given (learned).
    Kind declared = Kind::kUnknown;
  };

  // The values by measurement (bench/README.md, "Readahead"): for whole
  // readers the one at which mmap copies, `cat` and concurrent readers were
  // fastest through the mount; for slice readers the smallest that cost
  // their loads no time, as a fault then reads little past the slice.
  static constexpr uint64_t kUnknownDefault = 128 << 10;  // the kernel's own
  // A whole reader's mmap copy of a single-file checkpoint read at half of it
  // took 0.95 against 1.03 GB/s on 2 CPUs, `cat` 2.02 against 2.45: paid on
  // one shard of several only.
  static constexpr uint64_t kUnknownShardDefault = 64 << 10;
  static constexpr uint64_t kWholeDefault = 1 << 20;
  static constexpr uint64_t kSliceDefault = 32 << 10;
  static constexpr uint64_t kSliceSmallDefault = 16 << 10;
  // Slices averaging under this get kSliceSmallDefault: at kSliceDefault the
  // kernel's reads around them would add more than a tenth.
  static constexpr uint64_t kSmallSliceDefault = 640 << 10;

  // `read_ahead`: the value given with -o read_ahead (explicit: whether it
  // was given at all); `shard_world`: N of -o shard=R/N, 0 when not given.
  static Options ForMount(bool explicit_read_ahead, uint64_t read_ahead, uint64_t shard_world);

  explicit ReadaheadPolicy(Options options) : options_(options) {}

  // The readahead files opened now should get; 0 when the policy leaves the
  // kernel's as it is.
  uint64_t Wanted() const;
  // The same for one file opened now; `shard`: it is one shard of a
  // checkpoint of several (IsOneOfSeveralShards).
  uint64_t WantedFor(bool shard) const;

  // A reader's kind went from `before` to `after` (kUnknown for a reader
  // opened or closed).
  void Change(Kind before, Kind after);

  // The slice readers' slices average `bytes` (the first file they read
  // tells; later calls change nothing).
  void SetSliceSize(uint64_t bytes) {
    if (slice_size_ == 0) slice_size_ = bytes;
  }
  bool slice_size_known() const { return slice_size_ != 0; }

 private:
  // The kind whose value files get now: the declared one, else the one
  // learned last (kUnknown before anything is).
  Kind InForce() const { return options_.declared != Kind::kUnknown ? options_.declared : mode_; }

  const Options options_;
  int whole_open_ = 0;  // readers known to read whole tensors, with a file open
  Kind mode_ = Kind::kUnknown;  // the kind whose value is in force
  uint64_t slice_size_ = 0;     // bytes; 0 until known
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_READAHEAD_POLICY_H_
