// Gather: the pieces of one read collected from several sources that complete
// on any thread, in any order, handed on once, in order.
//
// A read that spans several extents (a view file's header, source ranges, a
// transform's segments) gets one slot per piece, counted before the first is
// issued, since pieces may complete while later ones are still being issued.
// Each slot is filled by exactly one Fill or Fail; Start adds the slots and
// holds one count of its own, released by Issued once every piece has been
// issued, so `done` runs exactly once, after the last piece, on the thread
// that delivered it (or in Issued). A failure of any piece fails the read with
// the first failure's status.
//
// Thread-safety: Fill, Fail and Issued may be called concurrently, each slot
// once; the pieces handed on stay valid as long as the result's owner.
#ifndef TENSORFS_CORE_VIEWS_GATHER_H_
#define TENSORFS_CORE_VIEWS_GATHER_H_

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "core/engine/read_result.h"
#include "core/util/status.h"

namespace tensorfs {

class Gather {
 public:
  // `keep`, when set, is kept alive with the result (the view file whose
  // header bytes pieces point into).
  static std::shared_ptr<Gather> Start(size_t slots, ReadDone done, std::shared_ptr<const void> keep = nullptr);

  // Slot `slot` holds `result` (its pieces and their owner).
  void Fill(size_t slot, ReadResult result);
  // Slot `slot` failed.
  void Fail(const Status& status);
  // Every slot has been issued.
  void Issued() { Arrive(); }

 private:
  Gather(size_t slots, ReadDone done, std::shared_ptr<const void> keep)
      : slots_(slots), pending_(static_cast<int>(slots) + 1), done_(std::move(done)), keep_(std::move(keep)) {}
  void Arrive();

  std::vector<ReadResult> slots_;
  std::atomic<int> pending_;
  std::atomic<bool> failed_{false};
  Status error_;  // written once, by the piece that sets `failed_`
  ReadDone done_;
  std::shared_ptr<const void> keep_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_GATHER_H_
