// Tuning: every constant the read engine and its slice learner go by, in one
// place, derived where it can be from what it stands for: the kernel's
// readahead in force on the mount (how far the kernel reads around an mmap
// fault and ahead of a sequential reader), the chunk size, the page size.
//
// Most of the engine's margins are "one kernel read-around" in disguise: the
// kernel answers a page fault with a read of `readahead` bytes centred on it,
// and a sequential reader's readahead runs up to `readahead` past it. At the
// kernel's default (128 KiB) these come to the values the engine was tuned
// with (64 KiB, 512 KiB); at another readahead they follow it.
//
// Built once by ReadEngine from EngineOptions (Tuning::For) and never changed:
// a value, safe to share between threads.
#ifndef TENSORFS_CORE_ENGINE_TUNING_H_
#define TENSORFS_CORE_ENGINE_TUNING_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace tensorfs {

struct Tuning {
  // The kernel's readahead when the mount does not say (its default, 128 KiB).
  static constexpr uint64_t kDefaultReadahead = 128 << 10;

  // `readahead`: the readahead in force on the mount, in bytes; 0 when unknown.
  // `slice_readahead`: the one slice readers' files get (readahead_policy.h);
  // 0: the same.
  static Tuning For(uint64_t chunk_size, uint64_t readahead, uint64_t slice_readahead = 0);

  // Half the read-around of an mmap fault in a file opened at `readahead`,
  // in whole pages (at least one).
  uint64_t HalfOf(uint64_t readahead) const { return readahead / 2 > page ? (readahead / 2) & ~(page - 1) : page; }

  // What the kernel reads around a slice copied out of an mmap of a file
  // opened at a readahead: before it, the read-around's half (its first
  // page's read-around); past it, the read-around's half (its last page
  // faulted first, the pages before then found cached) or one to two
  // readahead windows (the copy entering the window its first fault read has
  // the kernel ask for the next).
  struct SliceMargins {
    uint64_t half = kDefaultReadahead / 2;  // the read-around's half
    uint64_t window = kDefaultReadahead;    // one readahead window
    // Past a slice, as a copy in page order usually has it: its last page's
    // read-around and one window.
    uint64_t UsualAfter() const { return half + window; }
    // The most the kernel reads past a slice: its last page's read-around
    // and two windows.
    uint64_t MostAfter() const { return half + 2 * window; }
  };
  // For files opened at `file_readahead` (0: the mount's).
  SliceMargins MarginsAt(uint64_t file_readahead) const {
    const uint64_t window = file_readahead != 0 ? std::max(file_readahead, page) : readahead;
    return SliceMargins{.half = HalfOf(window), .window = window};
  }

  // --- What the kernel does.
  uint64_t page = 4096;
  uint64_t readahead = kDefaultReadahead;  // in force on the mount
  // Half the read-around of an mmap fault: bytes the kernel reads on either
  // side of a faulting page (64 KiB at the default readahead).
  uint64_t read_around_half = kDefaultReadahead / 2;
  // The same for files opened at the slice readahead: a slice's margins.
  uint64_t slice_read_around_half = kDefaultReadahead / 2;
  // The most one kernel read request carries: the mount's max_read (checked
  // against fs/fuse_server.h's). A larger readahead comes in requests of this.
  uint64_t max_request = 1 << 20;

  // --- Access model (per reader): how its reads are told apart.
  // Reads closer than this to a touched range extend it (readahead requests
  // arrive out of order and with holes): half a read-around.
  uint64_t touch_gap = 64 << 10;
  // A touched range not grown for this many of the reader's reads of the
  // object is one the reader has left: taught to the slice learner.
  uint64_t settle_reads = 8;
  // Touches kept per reader and object, beyond which the oldest settle early.
  size_t max_touches = 64;
  // Touches left that a reader's access state remembers: a tensor left and
  // read again within this many, farther from where it was read than the
  // kernel reads around a slice (max_margin), makes it a scattered reader (a
  // slice reader reads its rows of a tensor once), which teaches the slice
  // learner nothing for `whole_memory` of its reads.
  size_t left_remembered = 16;
  // After a tensor is seen read whole, the reader's reads of unknown kind are
  // taken as whole-tensor reads for this many of its reads.
  uint64_t whole_memory = 4096;
  // Tensors at least this large are judged by how a reader copies them.
  uint64_t copy_min = 1 << 20;
  // A tensor read nearly whole makes a whole-tensor reader only if it is at
  // least this large (and four of the reader's reads): four half read-arounds,
  // as one fault's read-around covers less; but no more than four of the
  // kernel's largest requests, as at a readahead past 2 MiB a whole reader's
  // tensors would else never count (a slice reader's faults there bring its
  // neighbours' rows anyway).
  uint64_t whole_min = 4 * (kDefaultReadahead / 2);
  // The most the kernel reads around the first or last page of a copy: four
  // read-arounds (the first reads of a larger readahead come in pieces).
  uint64_t copy_tail_max = 512 << 10;
  // A touch this small made by a read across a tensor boundary, at the
  // boundary, is the kernel's readahead spilling over: four read-arounds.
  uint64_t spill_max = 512 << 10;
  // Reads this close to a slice reader's window (its kernel reading past the
  // slice into the next tensor) are that reader's: four read-arounds.
  uint64_t near_window = 512 << 10;

  // --- Streams (sequential readers, per reader and object).
  size_t max_streams = 8;
  // Jumps to new places in one object after which it is read in another order
  // than storage order: the object is then prefetched whole.
  int sweep_after_jumps = 3;
  // Readahead requests arrive slightly out of order: a read this many chunks
  // behind a stream's start still belongs to it.
  size_t back_tolerance = 2;
  // A stream counts as being read while it had one of the last this many
  // stream reads, engine-wide; readers read at once share prefetch_window.
  size_t active_reads = 64;
  // The least a stream's share of the window is, in chunks.
  uint64_t min_stream_window_chunks = 4;

  // --- Planner: which ranges are requested.
  // Windows of a slice pattern closer than this are one request: half a
  // read-around (of the slice readahead, in files opened at one:
  // AccessModel::ReadAroundHalf).
  uint64_t coalesce_gap = 64 << 10;
  // An unknown reader's first request, and the least it is read ahead.
  uint64_t first_piece = 256 << 10;
  // Pieces holding less than 1/small_pieces of a chunk are fetched again with
  // it when the whole chunk is wanted.
  uint64_t small_pieces = 16;
  // Requests for an unknown reader's run are cut at this size, so the link's
  // connections each carry a share: min(chunk_size, 4 MiB).
  uint64_t max_piece = 4 << 20;

  // --- Scheduler: slice sweeps in flight (fetch_scheduler.h). A sweep's
  // request starts while the sweeps' requests running come to fewer bytes
  // than the fetches delivered in the last `sweep_horizon`, or than
  // `sweep_floor` (one chunk).
  uint64_t sweep_floor = 8 << 20;
  std::chrono::milliseconds sweep_horizon{1000};

  // --- Slice learner.
  // The most the kernel reads around a slice (both sides together): eight
  // read-arounds (1 MiB at the default readahead).
  uint64_t max_margin = 1 << 20;
  // The largest denominator of a fraction of rows tried (hosts in a job).
  uint64_t max_den = 1024;

  // --- Bounds on the state kept.
  // Idle objects whose state (plan, streams, pieces) is kept; past this many
  // the least recently used are forgotten (a later read fetches the plan again).
  size_t max_objects = 512;
  // Readers (open files) whose state is kept; past this many (files opened
  // and never released) the least recently used are forgotten.
  size_t max_readers = 4096;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_TUNING_H_
