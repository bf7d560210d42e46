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
//   - `unknown`, for files opened before anything is known of the process's
//     readers (see "Per process" below): the kernel's default, at which the engine tells readers apart
//     and learns slices (a larger read-around hides a slice of a few hundred
//     KiB among its neighbours' bytes); and `unknown_shard`, half of it, for
//     such a file when it is one shard of several (model-0000i-of-0000n): a
//     whole reader reads only that share of its checkpoint at it, a slice
//     reader's kernel reads a third less around each slice there;
//   - `whole`, once a reader of whole tensors is seen: large enough that the
//     kernel keeps enough 1 MiB FUSE requests in flight for the bytes the
//     engine prefetched to flow;
//   - `slice`, once a slice reader (one host of a sharded job reading a part
//     of every tensor) is learned while no whole-tensor reader of its process
//     has a file open: each mmap fault reads little beyond the slice, so that bytes of
//     the neighbouring hosts' slices are neither fetched nor sent; and
//     `slice_small`, half of it, once the slices are known to average under
//     `small_slice` (the kernel reads about twice its readahead around each
//     slice, a share of the slice that grows as slices shrink).
// `-o read_ahead=` given: that value for every file, never changed. `-o
// shard=R/N` given: `slice` from the start (the process says it reads slices);
// `-o shard=0/1`: `whole` from the start (the one host reads every tensor whole).
//
// Per process. Which of them a file gets depends on the process opening it
// (the one whose thread the FUSE open names; 0 where not known, one more
// "process" shared by all such opens): what its own readers were seen to do.
// A whole-tensor loader and a slice reader of two processes on one mount each
// keep their own value: the slice reader's files are not opened at `whole`
// because another process reads whole tensors (its faults would read a whole
// readahead around each slice, and its slices could no longer be told apart).
// A process not known yet opens a file by what that file's own readers were
// (per file, whatever process they were of): `whole` when every reader of it
// that was told apart read whole tensors (a loader run again, `cat` or a
// pool of readers of one checkpoint, each a new process on a mount that
// stays up), else `unknown`: a file never read, or one a slice reader read.
// A file's readers are the same job far more often than not; the one guess
// that can cost bytes, a new slice reader opening a file that only whole
// readers read before, costs at most that file's read-around, and the
// loader's pages of it are then likely in the page cache already. Within a process the last kind seen stays in force
// after its readers' files are closed (a loader's next file is opened by a new
// reader once the last one is closed), and `whole` wins while one of its
// readers reads whole tensors. Only files opened after a change get the new
// value: a process's first file is read at `unknown` (or `unknown_shard`),
// unless that file's readers were all whole readers.
// Limits: the kernel has one value per mount at a time, set just before each
// open (WantedFor); two processes opening files that want different values at
// the same instant may both get the second. A slice reader of a process set
// for whole readers has its next file read at `whole`, where slices smaller
// than half of it are not learned (give it -o shard=). Files no process's kind
// decides (other files, views) take Wanted(): the value of the process whose
// value changed last.
//
// Pure logic: ReadEngine tells it what its readers are and applies
// WantedFor() as a safetensors file is opened, and Wanted() when it changes,
// through a sink (the FUSE adapter writes the bdi). State is bounded
// (kProcesses).
//
// Thread-safety: none of its own; ReadEngine calls it under its mutex.
#ifndef TENSORFS_CORE_ENGINE_READAHEAD_POLICY_H_
#define TENSORFS_CORE_ENGINE_READAHEAD_POLICY_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

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

  explicit ReadaheadPolicy(Options options);

  // The readahead file `file` (its object name; "" for none) opened now by
  // `process` (0: not known) should get; `shard`: it is one shard of a
  // checkpoint of several (IsOneOfSeveralShards). 0 when the policy leaves
  // the kernel's as it is.
  uint64_t WantedFor(uint64_t process, bool shard, std::string_view file = {}) const;
  // The readahead of the files no process's kind decides (files other than
  // safetensors ones, views): the value of the process whose value changed
  // last; before any did, a new process's.
  uint64_t Wanted() const { return resting_; }

  // A reader of `process` reading `file` (its object name) went from
  // `before` to `after` (kUnknown for a reader opened or closed).
  void Change(uint64_t process, Kind before, Kind after, std::string_view file = {});

  // The slices `process`'s slice readers read average `bytes` (the first
  // file they read tells; later calls change nothing). With -o shard=R/N
  // the slices are the mount's, whichever process tells.
  void SetSliceSize(uint64_t process, uint64_t bytes);
  // The kind whose value `process`'s files get now (kUnknown for a process
  // not seen, or with -o read_ahead= given); -o shard='s where given.
  Kind KindOf(uint64_t process) const;
  bool slice_size_known(uint64_t process) const;

  // Processes remembered: the least recently seen with no whole-tensor reader
  // open go past it (a process seen again starts as a new one).
  static constexpr size_t kProcesses = 256;
  size_t processes() const { return processes_.size(); }
  // Files whose readers are remembered: the least recently told past it go.
  static constexpr size_t kFiles = 1024;
  size_t files() const { return files_.size(); }

 private:
  struct Process {
    int whole_open = 0;           // its readers known to read whole tensors, with a file open
    Kind mode = Kind::kUnknown;   // the kind whose value its files get
    uint64_t slice_size = 0;      // bytes; 0 until known
    uint64_t last_used = 0;
  };

  // What the readers of one file were seen to do, whatever their process.
  struct FileReaders {
    bool whole = false;  // one read whole tensors
    bool slice = false;  // one read slices
    uint64_t last_used = 0;
  };

  // The value of a file of a process in state `p` (null: one not seen yet)
  // whose readers were `f` (null: none told apart).
  uint64_t ValueOf(const Process* p, bool shard, const FileReaders* f = nullptr) const;
  const Process* Find(uint64_t process) const;
  // Its state, made if new (and the least recently used past kProcesses
  // dropped).
  Process& Of(uint64_t process);

  const Options options_;
  std::map<uint64_t, Process> processes_;
  std::map<std::string, FileReaders, std::less<>> files_;
  uint64_t clock_ = 0;
  uint64_t declared_slice_size_ = 0;  // -o shard=R/N: the mount's slices; 0 until known
  uint64_t resting_ = 0;              // Wanted()
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_READAHEAD_POLICY_H_
