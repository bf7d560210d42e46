#include "core/engine/tuning.h"

#include <algorithm>

namespace tensorfs {

Tuning Tuning::For(uint64_t chunk_size, uint64_t readahead, uint64_t slice_readahead) {
  Tuning t;
  // A readahead the kernel does not use (0: not known) is taken as its default;
  // below a page it reads a page.
  t.readahead = readahead == 0 ? kDefaultReadahead : std::max(readahead, t.page);
  const uint64_t half = t.HalfOf(t.readahead);
  t.read_around_half = half;
  const uint64_t slice = slice_readahead == 0 ? t.readahead : std::max(slice_readahead, t.page);
  t.slice_read_around_half = std::min(half, t.HalfOf(slice));
  t.touch_gap = half;
  t.coalesce_gap = half;
  t.whole_min = std::min(4 * half, 4 * t.max_request);
  t.copy_tail_max = 8 * half;
  t.spill_max = 8 * half;
  t.near_window = 8 * half;
  t.max_margin = 16 * half;
  t.max_piece = std::min<uint64_t>(chunk_size, 4 << 20);
  t.sweep_floor = chunk_size;
  return t;
}

}  // namespace tensorfs
