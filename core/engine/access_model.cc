// The access model (see access_model.h): the tensors a reader touched, whether
// it reads whole tensors, a slice (taught to the slice learner) or is not
// known yet.
#include "core/engine/access_model.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace tensorfs {
namespace {

// The touch of `from`'s tensor nearest to it that lies past it (beginning
// after its start and ending after its end) or, for `after` false, before it
// (ending before its start); null if none.
const AccessModel::Touch* NearestTouch(const AccessModel::Trail& access, const AccessModel::Touch& from,
                                       bool after) {
  const AccessModel::Touch* nearest = nullptr;
  for (const AccessModel::Touch& x : access.touches) {
    if (x.tensor != from.tensor || &x == &from) continue;
    const bool beyond = after ? x.range.offset > from.range.offset && x.range.end() > from.range.end()
                              : x.range.end() < from.range.offset;
    const bool nearer = nearest == nullptr ||
                        (after ? x.range.offset < nearest->range.offset : x.range.offset > nearest->range.offset);
    if (beyond && nearer) nearest = &x;
  }
  return nearest;
}

}  // namespace

AccessModel::AccessModel(const Tuning& tuning, std::optional<SlicePattern> shard)
    : tuning_(tuning), shard_(shard.has_value()) {
  if (shard) patterns_.push_back(ActivePattern{next_pattern_id_++, LearnedPattern{*shard, {}}});
}

const AccessModel::ActivePattern* AccessModel::Pattern(int id) const {
  auto it = std::find_if(patterns_.begin(), patterns_.end(), [&](const ActivePattern& p) { return p.id == id; });
  return it == patterns_.end() ? nullptr : &*it;
}

AccessModel::Answer AccessModel::Classify(const ChunkPlan& plan, const std::string& name, const Reader& r,
                                          ByteRange range) {
  Trail& access = r.trail;
  ReaderClock& reader = r.clock;
  Answer answer;
  std::vector<PlannerCall>* calls = &answer.calls;
  auto said = [&answer](Mode mode) {
    answer.mode = mode;
    return std::move(answer);
  };
  const std::vector<TensorSpan>& tensors = plan.tensors();
  int first = plan.TensorAt(range.offset);
  if (first < 0) {  // in the header or padding: the tensor after it, if any
    auto it = std::upper_bound(tensors.begin(), tensors.end(), range.offset,
                               [](uint64_t off, const TensorSpan& t) { return off < t.begin; });
    if (it == tensors.end() || it->begin >= range.end()) return said(Mode::kWhole);
    first = static_cast<int>(it - tensors.begin());
  }
  const uint64_t now = ++reader.reads;
  ++access.clock;

  // Record the touch of every tensor the read overlaps.
  bool last_page = false;
  bool whole_end = false;
  const bool crossing = tensors[static_cast<size_t>(first)].end < range.end();
  // A read across a boundary spills over from the tensor it begins in only
  // when the reader reads a slice of that tensor that may end at the edge:
  // one that does not begin with the tensor (the last rank's, its last page
  // copied first or its readahead running on). A reader whose slices begin
  // with their tensors (rank 0) faults at the next one's first page, and the
  // kernel reads around it back across the edge: the tensor after is then
  // the reader's own.
  const uint64_t first_begin = tensors[static_cast<size_t>(first)].begin;
  const bool spills = crossing && std::any_of(access.touches.begin(), access.touches.end(), [&](const Touch& x) {
    return x.tensor == first && x.range.offset > first_begin;
  });
  // Which tensor a read across a boundary was for. The kernel reads around a
  // faulting page by the file's readahead, half of it past the page: a read
  // that runs on further than that past the end of the tensor it begins in
  // faulted on a page past that tensor (a slice reader's row of the layer
  // norm after it, say), and touches the tensor's end without the reader
  // having been there. A copy's last page is the tensor's own: the read
  // around it runs on no further than that.
  const bool neighbours_fault =
      crossing && FaultFrom(range, r.file_readahead) >= tensors[static_cast<size_t>(first)].end;
  // The tensors a read covers between its first and last tell nothing of the
  // reader's slice or copies (they are read whole, by one read): only the
  // first and the last are recorded, so a read across many small tensors
  // records two touches, not one per tensor.
  size_t last_tensor = static_cast<size_t>(first);
  while (last_tensor + 1 < tensors.size() && tensors[last_tensor + 1].begin < range.end()) ++last_tensor;
  for (size_t k = static_cast<size_t>(first); k <= last_tensor;
       k = k == last_tensor ? k + 1 : std::max(k + 1, last_tensor)) {
    const TensorSpan& t = tensors[k];
    const uint64_t begin = std::max(range.offset, t.begin);
    const uint64_t end = std::min(range.end(), t.end);
    bool grew_down = false;  // the read grew a touch at its start only
    auto it = std::find_if(access.touches.begin(), access.touches.end(), [&](const Touch& touch) {
      return touch.tensor == static_cast<int>(k) && begin <= touch.range.end() + tuning_.touch_gap &&
             end + tuning_.touch_gap >= touch.range.offset;
    });
    if (it == access.touches.end()) {
      // A read of a tensor past where the reader is in it: likely a copy's
      // last page, read before the rest (see below).
      uint64_t read_before = 0;
      for (const Touch& x : access.touches) {
        if (x.tensor == static_cast<int>(k) && x.range.end() <= begin) {
          read_before = std::max(read_before, x.range.length);
        }
      }
      if (k == static_cast<size_t>(first)) last_page = read_before > 0;
      access.touches.push_back(Touch{static_cast<int>(k), ByteRange{begin, end - begin}, access.clock, access.clock});
      it = std::prev(access.touches.end());
      it->grown_at = access.clock;
      it->read_before = read_before;
      it->around_next = crossing && k == static_cast<size_t>(first);
      it->spilled = spills && k != static_cast<size_t>(first);
      it->neighbours_fault = neighbours_fault && k == static_cast<size_t>(first);
    } else {
      const uint64_t b = std::min(begin, it->range.offset);
      const uint64_t e = std::max(end, it->range.end());
      if (b < it->range.offset || e > it->range.end()) it->grown_at = access.clock;
      grew_down = b < it->range.offset && e == it->range.end();
      it->range = ByteRange{b, e - b};
    }
    // A copy (memcpy touches the first page of what it copies, then its last
    // page, then the rest from the start): the touch this read grew began
    // before the next touch of the tensor, a small one, appeared, and has
    // grown since (maybe into it), and was no more than the read-around of
    // a first page when it did (else the later touch is the kernel reading
    // around the start of the next tensor, and the growth its readahead
    // arriving late). The copy runs to the end of that touch. glibc's
    // memcpy copies large blocks backward when the destination's offset
    // from the source would make them alias in 4 KiB (which loaders do not
    // choose): first page, last page, then the rest down from the last. Then
    // the touch this read grew at its start is the last page's, and the
    // first page's is the nearest touch before it, read before it and still
    // no more than a first page's read-around.
    // The two pages are the copy's own. A touch at the tensor's end made by
    // the kernel reading around a fault past it (Touch::neighbours_fault) is
    // no last page of a copy of this tensor. Nor is the touch taken for the
    // other page one that grew before this one did: a copy reads its last
    // page once and goes back to its first (or, backward, its first page once
    // and goes on down from its last); a touch read on from its first page
    // is where a reader began its rows (the last rank's, which end with the
    // tensor), the kernel's readahead of a neighbour's page running on into
    // the tensor's start afterwards.
    // A copy of the whole tensor makes a whole-tensor reader. Of a part (one
    // host's slice, before its pattern is known) the bytes in between are
    // fetched now and nothing past the copy is read ahead, so that learning
    // the pattern costs little more than the slices read meanwhile.
    // The last page of a tensor read right after its first, nothing of it
    // read in between: likely the start of a copy of the whole tensor (told
    // for sure once the first touch grows; a reader of the first slice of the
    // next tensor makes the same read), so this read's chunk comes whole.
    // Unless a known pattern's windows hold both touches: then it is that
    // reader (rank 0) at the next tensor's window, after the header's
    // read-around touched this one's start. Or unless this read faulted past
    // the tensor: the kernel reading around a page after it.
    if (k == static_cast<size_t>(first) && t.size() >= tuning_.copy_min && it->first_read == access.clock &&
        it->range.end() == t.end && !it->neighbours_fault) {
      int others = 0;
      const Touch* head = nullptr;
      for (const Touch& x : access.touches) {
        if (x.tensor != static_cast<int>(k) || &x == &*it) continue;
        ++others;
        head = &x;
      }
      whole_end = others == 1 && head->range.offset == t.begin && head->first_read + 2 >= access.clock &&
                  head->range.length <= tuning_.copy_tail_max &&
                  !NextWindowsFirstPage(plan, k, head->range, it->range, r);
    }
    if (t.size() >= tuning_.copy_min && reader.whole_until <= now && it->grown_at == access.clock) {
      // Whether `head` and `tail` are a copy's first and last pages, the copy
      // now back at its first. A later touch at a known slice reader's window
      // is that reader's first page, not a copy's last (the first touch was
      // then the kernel reading around the header, its readahead arriving
      // late). Nor is one at the tensor's end next to the following tensor's
      // window while the first touch is still in that pattern's window here:
      // that is a slice reader (rank 0) at its next window, its readahead of
      // this one arriving late.
      auto copy = [&](const Touch* head, const Touch* tail) {
        const Touch* other = tail == &*it ? head : tail;
        return head != nullptr && tail != nullptr && tail->first_read > head->first_read && !tail->neighbours_fault &&
               other->grown_at == other->first_read && tail->read_before <= tuning_.copy_tail_max &&
               !NearKnownWindow(plan, k, tail->range, r) && !NextWindowsFirstPage(plan, k, head->range, tail->range, r);
      };
      // A last page's touch is no longer than its read-around.
      const uint64_t tail_max = std::max<uint64_t>(2 * range.length, tuning_.copy_tail_max);
      const Touch* head = &*it;
      const Touch* tail = NearestTouch(access, *it, /*after=*/true);
      if (tail != nullptr && tail->range.length > tail_max) tail = nullptr;
      if (tail == nullptr && grew_down) {  // backward: this touch is the copy's last page
        tail = &*it;
        head = NearestTouch(access, *it, /*after=*/false);
        if (head != nullptr && head->range.length > tuning_.copy_tail_max) head = nullptr;
      }
      // The tensor's first page grown back to after its last page was read: a
      // whole-tensor copy, also where the kernel's reads of the copy's
      // readahead came out of order (a readahead is several reads, which the
      // mount's threads take up at once), so that pieces of it lie between the
      // two touches as touches of their own (the nearest of which is then no
      // copy's end).
      const Touch* last = nullptr;
      if (it->range.offset == t.begin) {
        for (const Touch& x : access.touches) {
          if (x.tensor == static_cast<int>(k) && &x != &*it && x.range.end() == t.end && x.range.length <= tail_max) {
            last = &x;
          }
        }
      }
      const bool whole_copy = last != nullptr && copy(&*it, last);
      if (whole_copy) {
        head = &*it;
        tail = last;
      }
      if (whole_copy || copy(head, tail)) {
        if (head->range.offset == t.begin && tail->range.end() == t.end) {
          spdlog::debug("{}: tensor {} copied from its start after its end: a whole-tensor reader", name, k);
          reader.whole_until = now + tuning_.whole_memory;
          calls->push_back(PlannerCall{.kind = PlannerCall::Kind::kWholeTensor, .tensor = k});
        } else if (it->copy_end == 0) {
          it->copy_end = tail->range.end();
          if (tail->range.offset > head->range.end()) {
            calls->push_back(PlannerCall{.kind = PlannerCall::Kind::kCopyGap,
                                       .range = ByteRange{head->range.end(), tail->range.offset - head->range.end()}});
          }
        }
      }
    }
    // Touches that have grown into each other are one (a memcpy reads a
    // slice's first page, its last, then the rest in between).
    size_t grown = static_cast<size_t>(it - access.touches.begin());
    for (size_t j = 0; j < access.touches.size();) {
      Touch& t1 = access.touches[grown];
      const Touch& t2 = access.touches[j];
      if (j != grown && t2.tensor == t1.tensor && t2.range.offset <= t1.range.end() + tuning_.touch_gap &&
          t1.range.offset <= t2.range.end() + tuning_.touch_gap) {
        const uint64_t b = std::min(t1.range.offset, t2.range.offset);
        const uint64_t e = std::max(t1.range.end(), t2.range.end());
        t1.range = ByteRange{b, e - b};
        t1.around_next = t1.around_next && t2.around_next;
        t1.neighbours_fault = t1.neighbours_fault && t2.neighbours_fault;
        t1.spilled = t1.spilled || t2.spilled;
        t1.first_read = std::min(t1.first_read, t2.first_read);
        t1.grown_at = std::max(t1.grown_at, t2.grown_at);
        t1.copy_end = std::max(t1.copy_end, t2.copy_end);
        access.touches.erase(access.touches.begin() + static_cast<std::ptrdiff_t>(j));
        if (j < grown) --grown;
        continue;
      }
      ++j;
    }
    it = access.touches.begin() + static_cast<std::ptrdiff_t>(grown);
    // A touch settles once its tensor is left, not just the touch.
    for (Touch& other : access.touches) {
      if (other.tensor == static_cast<int>(k)) other.last_read = access.clock;
    }
    // Nearly all of a tensor several reads long: a whole-tensor reader.
    if (t.size() >= std::max(4 * range.length, tuning_.whole_min) && it->range.length >= t.size() - t.size() / 10) {
      if (reader.whole_until <= now) {
        spdlog::debug("{}: tensor {} read nearly whole: a whole-tensor reader", name, k);
      }
      reader.whole_until = now + tuning_.whole_memory;
    }
  }

  // Touches the reader has left teach the learner.
  for (size_t i = 0; i < access.touches.size();) {
    Touch& touch = access.touches[i];
    if (access.clock - touch.last_read < tuning_.settle_reads && access.touches.size() <= tuning_.max_touches) {
      ++i;
      continue;
    }
    const SliceObservation o{tensors[static_cast<size_t>(touch.tensor)], touch.range.offset, touch.range.end(),
                             FileReadahead(r.file_readahead)};
    // The kernel reading on past the end of one tensor (or around the start
    // of the next) into a neighbour tells nothing about the reader's slice.
    // A small touch at a tensor's edge, or near it, is the kernel reading
    // around a neighbour (a header parsed, the tensor before), not a place the
    // reader chose: the readahead after a slice that ends with its tensor (the
    // last rank's) goes on into the next tensor, its first read across the
    // edge and the next ones inside. Made by such a read (Touch::spilled), or
    // by the read-around of the next tensor's first page and not grown into
    // the reader's own touch since (Touch::around_next), it tells nothing.
    const bool edge = touch.range.length < tuning_.spill_max &&
                      (o.begin < o.tensor.begin + tuning_.spill_max || o.end + tuning_.spill_max > o.tensor.end);
    const bool spill = (touch.around_next || touch.spilled) && edge;
    // A reader of a known pattern: its reads lie mostly inside the window.
    const auto known_by = std::find_if(patterns_.begin(), patterns_.end(), [&](const ActivePattern& p) {
      if (!Sees(r, p)) return false;
      const ByteRange w = WindowOf(plan, p.learned.pattern, static_cast<size_t>(touch.tensor), r.file_readahead);
      const uint64_t b = std::max(o.begin, w.offset), e = std::min(o.end, w.end());
      return e > b && 2 * (e - b) >= o.end - o.begin;
    });
    const bool known = spill || known_by != patterns_.end();
    // A whole-tensor reader's touches are the kernel reading around its
    // copies' first and last pages, at its readahead: nothing to learn.
    const bool whole_reader = now < reader.whole_until || (reader.presumed_whole && !reader.presumed_by_file);
    // A reader back at a tensor it left, at another place (farther than the
    // kernel reads around a slice, its readahead arriving late), reads
    // scattered pages: the places fit some fraction of rows by chance, not as
    // a slice reader's do. Edges do not count, nor do the reads of no one
    // reader (several slice readers share that state).
    // Of the small touches near an edge, those that reach neither edge of
    // their tensor are places the reader chose (the kernel reading around a
    // neighbour, or on from it, comes in across an edge): a slice reader's
    // rows (an early or a late rank's, in a tensor of a few MiB). They are
    // remembered as such (Trail::left).
    const bool rows_near_edge = edge && o.begin > o.tensor.begin && o.end < o.tensor.end;
    if (r.named() && (!edge || rows_near_edge)) {
      const bool back = !edge && std::any_of(access.left.begin(), access.left.end(), [&](const Trail::Left& x) {
        return !x.edge && x.tensor == touch.tensor &&
               (touch.range.end() + tuning_.max_margin < x.range.offset ||
                x.range.end() + tuning_.max_margin < touch.range.offset);
      });
      if (back) {
        if (access.scattered_until <= access.clock && !whole_reader) {
          spdlog::debug("{}: a reader came back to tensor {} at another place: a scattered reader, no slice",
                        name, touch.tensor);
        }
        access.scattered_until = access.clock + tuning_.whole_memory;
      } else {
        access.left.push_back(Trail::Left{touch.tensor, touch.range, edge});
        // The oldest of its kind goes past Tuning::left_remembered of them.
        if (static_cast<size_t>(std::count_if(access.left.begin(), access.left.end(), [&](const Trail::Left& x) {
              return x.edge == edge;
            })) > tuning_.left_remembered) {
          access.left.erase(std::find_if(access.left.begin(), access.left.end(),
                                         [&](const Trail::Left& x) { return x.edge == edge; }));
        }
      }
    }
    const bool scattered = access.clock < access.scattered_until;
    // The reader that learned a pattern, or another reader of the same
    // process (its next file: a process reads its rows of every shard),
    // leaving rows of its core unread, reads a narrower slice: the kernel's
    // margins around the first slices may fit near fractions alike (rank 0
    // of 16 read as 0/15), and a larger tensor tells them apart. Such touches
    // teach the reader's learner, with the ones the pattern was learned from;
    // a narrower fraction they all fit replaces the pattern (only a learned
    // one: no reader learned -o shard's).
    const bool own = known_by != patterns_.end() && known_by->reader.has_value() &&
                     (*known_by->reader == r.id || (r.process != 0 && r.process == known_by->process));
    const bool narrower = !spill && own && r.learner.LeavesUnread(o, known_by->learned.pattern);
    if ((!known || narrower) && !whole_reader && !scattered) {
      spdlog::debug("{}: a reader left tensor {} ({} bytes, rows of {}) having read {}..{} of it{}", name,
                    touch.tensor, o.tensor.size(), o.tensor.row_bytes, o.begin - o.tensor.begin,
                    o.end - o.tensor.begin, narrower ? ", less than the rows it is taken to read" : "");
      std::optional<LearnedPattern> found = r.learner.Observe(o, narrower ? &known_by->learned : nullptr);
      if (found) Learned(name, std::move(*found), narrower ? known_by->id : -1, r, calls);
    }
    access.touches.erase(access.touches.begin() + static_cast<std::ptrdiff_t>(i));
  }

  // A read inside a known pattern's window of its tensor is that pattern's.
  const size_t k = static_cast<size_t>(first);
  const uint64_t begin = std::max(range.offset, tensors[k].begin);
  const uint64_t end = std::min(range.end(), tensors[k].end);
  for (const ActivePattern& p : patterns_) {
    if (!Sees(r, p)) continue;
    const ByteRange w = WindowOf(plan, p.learned.pattern, k, r.file_readahead);
    if (begin < w.end() && end > w.offset) {
      answer.pattern = &p;
      return said(Mode::kSlice);
    }
  }
  if (now < reader.whole_until) return said(Mode::kWhole);
  // At a copy's likely last page, or past the end of a copy whose extent is
  // known: the kernel reading around it.
  if (whole_end) return said(Mode::kWholeEnd);
  if (last_page) return said(Mode::kAround);
  for (const Touch& x : access.touches) {
    if (x.tensor != first || x.copy_end == 0 || begin > x.range.end() + tuning_.touch_gap || end < x.range.offset) continue;
    if (begin >= x.copy_end) return said(Mode::kAround);
    answer.copy_end = x.copy_end;
  }
  // Near a window of this tensor or of its neighbours: a slice reader's kernel
  // reading around its slice.
  for (const ActivePattern& p : patterns_) {
    if (!Sees(r, p)) continue;
    for (size_t j = k > 0 ? k - 1 : 0; j <= k + 1 && j < tensors.size(); ++j) {
      if (IsNear(WindowOf(plan, p.learned.pattern, j, r.file_readahead), range)) {
        answer.pattern = &p;
        return said(Mode::kNearSlice);
      }
    }
  }
  return said(Mode::kUnknown);
}

void AccessModel::Learned(const std::string& name, LearnedPattern found, int narrowing, const Reader& reader,
                          std::vector<PlannerCall>* calls) {
  if (std::any_of(patterns_.begin(), patterns_.end(), [&](const ActivePattern& p) {
        return Sees(reader, p) && p.learned.pattern.SameSlice(found.pattern);
      })) {
    return;
  }
  ActivePattern active{next_pattern_id_++, std::move(found), reader.id, reader.process};
  const auto wider = std::find_if(patterns_.begin(), patterns_.end(), [&](const ActivePattern& p) {
    return p.id == narrowing && p.learned.pattern.Contains(active.learned.pattern);
  });
  if (wider != patterns_.end()) {
    spdlog::info("{}: a reader takes {}, not {}: prefetching only those", name, active.learned.pattern.ToString(),
                 wider->learned.pattern.ToString());
    calls->push_back(PlannerCall{.kind = PlannerCall::Kind::kPatternDropped, .pattern_id = wider->id});
    *wider = std::move(active);
    return;
  }
  spdlog::info("{}: a reader takes {}: prefetching only those", name, active.learned.pattern.ToString());
  patterns_.push_back(std::move(active));
  if (patterns_.size() > 8) {  // the oldest goes (-o shard's own stays first)
    const auto dropped = patterns_.begin() + (shard_ ? 1 : 0);
    calls->push_back(PlannerCall{.kind = PlannerCall::Kind::kPatternDropped, .pattern_id = dropped->id});
    patterns_.erase(dropped);
  }
}

uint64_t AccessModel::FaultFrom(ByteRange range, uint64_t file_readahead) const {
  const uint64_t half = std::max(tuning_.MarginsAt(FileReadahead(file_readahead)).window, range.length) / 2;
  const uint64_t from = range.end() > half ? range.end() - half : 0;
  return (from + tuning_.page - 1) & ~(tuning_.page - 1);
}

bool AccessModel::IsNear(ByteRange window, ByteRange range) const {
  return range.offset < window.end() + tuning_.near_window && range.end() + tuning_.near_window > window.offset;
}

bool AccessModel::Sees(const Reader& reader, const ActivePattern& p) {
  return !p.reader.has_value() || MaybeOneProcess(p.process, reader.process);
}

bool AccessModel::NearKnownWindow(const ChunkPlan& plan, size_t index, ByteRange range, const Reader& reader) const {
  return std::any_of(patterns_.begin(), patterns_.end(), [&](const ActivePattern& p) {
    return Sees(reader, p) && IsNear(WindowOf(plan, p.learned.pattern, index, reader.file_readahead), range);
  });
}

bool AccessModel::NextWindowsFirstPage(const ChunkPlan& plan, size_t index, ByteRange head, ByteRange tail,
                                       const Reader& reader) const {
  const std::vector<TensorSpan>& tensors = plan.tensors();
  return std::any_of(patterns_.begin(), patterns_.end(), [&](const ActivePattern& p) {
    if (!Sees(reader, p) || !IsNear(WindowOf(plan, p.learned.pattern, index, reader.file_readahead), head)) {
      return false;
    }
    for (size_t k = index + 1; k < tensors.size() && tensors[k].begin < tail.end() + tuning_.near_window; ++k) {
      if (IsNear(WindowOf(plan, p.learned.pattern, k, reader.file_readahead), tail)) return true;
    }
    return false;
  });
}

uint64_t AccessModel::ReadAroundHalf(uint64_t file_readahead) const {
  // A file opened at more than the mount's readahead (a whole reader's) is
  // read around no wider than the mount's: the windows learned there hold.
  return std::min(tuning_.MarginsAt(FileReadahead(file_readahead)).half, tuning_.read_around_half);
}

ByteRange AccessModel::WindowOf(const ChunkPlan& plan, const SlicePattern& pattern, size_t index,
                                uint64_t file_readahead) const {
  const TensorSpan& t = plan.tensors()[index];
  const uint64_t half = ReadAroundHalf(file_readahead);
  SlicePattern narrow = pattern;
  if (half < tuning_.read_around_half) {
    // Files opened at a slice readahead: the kernel reads no further around
    // a slice than that, whatever margins were learned at the larger one.
    narrow.before = std::min(narrow.before, half);
    narrow.after = std::min(narrow.after, 2 * half);
  }
  // The kernel marks for readahead the page a quarter of a read-around past
  // a fault: a slice that ends before it (a layer norm's few rows) is copied
  // without reaching it, and nothing is read past the read-around of its
  // first page.
  const ByteRange core = pattern.Core(t);
  const uint64_t first_page = core.offset & ~(tuning_.page - 1);
  if (core.end() <= first_page + half / 2) {
    narrow.after = std::min(narrow.after, first_page + half - core.end());
  }
  return narrow.Window(t, plan.data_start(), plan.data_end());
}

}  // namespace tensorfs
