#include "core/engine/slice_pattern.h"

#include <algorithm>
#include <array>
#include <span>

namespace tensorfs {
namespace {

constexpr uint64_t kPage = 4096;

uint64_t PageDown(uint64_t x) { return x & ~(kPage - 1); }
uint64_t PageUp(uint64_t x) { return (x + kPage - 1) & ~(kPage - 1); }

// floor(a * b / c) without overflow.
uint64_t MulDiv(uint64_t a, uint64_t b, uint64_t c) {
  return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b / c);
}
uint64_t MulDivUp(uint64_t a, uint64_t b, uint64_t c) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b + c - 1) / c);
}

std::string Kib(uint64_t bytes) { return std::to_string(bytes >> 10) + " KiB"; }

// How far a loader's slice of `t` may lie from the rows a fraction gives:
// loaders split rows differently by up to two rows, and the kernel reads
// whole pages.
uint64_t RowTolerance(const TensorSpan& t) { return 2 * t.row_bytes + kPage; }

// Whether rows lo/den..hi/den explain `o`: the reader touched the core (give or
// take two rows and a page, for loaders that split rows differently), at most
// twice the read-around's half before it and max_margin / 2 past it, and in
// all no more than the core or than the kernel reads around a slice,
// whichever is more; the kernel's margins are those of the file `o` was made
// in (Tuning::MarginsAt). A core smaller than the mount's read-around
// explains nothing: such a slice cannot be told from what the kernel reads
// around other readers' pages.
}  // namespace

bool SliceLearner::BeginsNearItsStart(const SliceObservation& o) const {
  return o.begin <= o.tensor.begin + tuning_.MarginsAt(o.readahead).window;
}

bool SliceLearner::EndsNearItsEnd(const SliceObservation& o) const {
  return o.end + tuning_.MarginsAt(o.readahead).window >= o.tensor.end;
}

bool SliceLearner::Copied(const SliceObservation& o) const {
  return o.end - o.begin >= 4 * tuning_.MarginsAt(o.readahead).window;
}

uint64_t SliceLearner::LikelyBegin(const SliceObservation& o) const {
  return Copied(o) && BeginsNearItsStart(o) ? o.tensor.begin : o.begin;
}

bool SliceLearner::Fits(const SliceObservation& o, const SlicePattern& p, uint64_t* before, uint64_t* after) const {
  const ByteRange core = p.Core(o.tensor);
  // Slices smaller than the mount's read-around are not learned, whatever
  // file they are seen in: the kernel's reads around pages near tensors'
  // edges (a header parsed, a neighbour's slice) are that small.
  if (core.length < tuning_.read_around_half) return false;
  const Tuning::SliceMargins m = tuning_.MarginsAt(o.readahead);
  const uint64_t tol = RowTolerance(o.tensor);
  // Before the slice the kernel reads the read-around of its first page (a
  // page or two more where the reader's copy did not start at the slice).
  // A slice that begins with its tensor may have had its first pages read
  // around a neighbour before the reader came (LikelyBegin).
  const uint64_t begin = core.offset == o.tensor.begin ? LikelyBegin(o) : o.begin;
  if (begin > core.offset + tol || core.offset > begin + 2 * m.half) return false;
  if (o.end + tol < core.end() || o.end > core.end() + tuning_.max_margin / 2) return false;
  *before = core.offset > o.begin ? core.offset - o.begin : 0;
  *after = o.end > core.end() ? o.end - core.end() : 0;
  // What the kernel reads around a slice: the read-around of its first page
  // before it, up to two readahead windows past its last.
  return *before + *after <= std::max(core.length, m.MostAfter());
}

bool SliceLearner::LeavesUnread(const SliceObservation& o, const SlicePattern& p) const {
  const ByteRange core = p.Core(o.tensor);
  const uint64_t tol = RowTolerance(o.tensor);
  if (2 * (o.end - o.begin) < core.length) return false;  // not this reader's slice: a neighbour's read-around
  // Past a copy's last page the kernel read at least that page's
  // read-around (KernelMargins: that, or readahead windows beyond): its slice
  // ended that far, less a page, before `o` does.
  const uint64_t half = tuning_.MarginsAt(o.readahead).half;
  const uint64_t ran_on = Copied(o) ? half - std::min(half, kPage) : 0;
  return (o.begin > core.offset + tol && !BeginsNearItsStart(o)) ||
         (o.end + tol < core.end() + ran_on && !EndsNearItsEnd(o));
}

int SliceLearner::KernelMargins(const SliceObservation& o, uint64_t before, uint64_t after) const {
  const Tuning::SliceMargins m = tuning_.MarginsAt(o.readahead);
  const uint64_t half = m.half, readahead = m.window;
  const uint64_t slack = RowTolerance(o.tensor);
  // Before a slice: the read-around of the page its first row begins in (a
  // page more where the copy began a page in), or less at a tensor's start.
  const bool head = before <= half + kPage + slack && (o.begin == o.tensor.begin || before + slack >= half);
  if (!head) return 0;
  // Past it: the read-around of its last page (where the copy faulted there
  // first and the pages after were then in the cache); or the readahead
  // windows that followed the one its first fault read: the copy entering
  // one has the kernel ask for the next, so they reach one to two windows
  // past the slice. Anything up to a tensor's end.
  if (o.end == o.tensor.end) return after <= 2 * readahead + slack ? kReadAround | kReadahead : 0;
  int tail = 0;
  if (after + slack >= half && after <= half + slack) tail |= kReadAround;
  if (after + slack >= readahead && after <= 2 * readahead + slack) tail |= kReadahead;
  return tail;
}

SlicePattern SlicePattern::Shard(uint64_t rank, uint64_t world, const Tuning& tuning) {
  // The kernel's read-around for an mmap fault is its readahead, centred on
  // the fault; readahead runs up to that far past a sequential reader.
  return SlicePattern{.lo_num = rank, .hi_num = rank + 1, .den = world, .before = tuning.slice_read_around_half,
                      .after = 2 * tuning.slice_read_around_half};
}

ByteRange SlicePattern::Core(const TensorSpan& t) const {
  const uint64_t n = t.rows();
  if (n == 0 || den == 0) return ByteRange{t.begin, t.size()};
  const uint64_t first = MulDiv(lo_num, n, den);
  const uint64_t last = std::min(n, MulDivUp(hi_num, n, den));
  const uint64_t begin = t.begin + first * t.row_bytes;
  // The last row of the tensor takes any bytes left over (never the case for
  // a well-formed tensor, whose size is rows * row_bytes).
  const uint64_t end = last == n ? t.end : t.begin + last * t.row_bytes;
  return ByteRange{begin, end > begin ? end - begin : 0};
}

ByteRange SlicePattern::Window(const TensorSpan& t, uint64_t lower, uint64_t upper) const {
  const ByteRange core = Core(t);
  uint64_t begin = core.offset > lower + before ? PageDown(core.offset - before) : lower;
  uint64_t end = std::min(upper, PageUp(core.end() + after));
  begin = std::max(begin, lower);
  return ByteRange{begin, end > begin ? end - begin : 0};
}

uint64_t SlicePattern::MeanCore(std::span<const TensorSpan> tensors) const {
  uint64_t total = 0, count = 0;
  for (const TensorSpan& t : tensors) {
    const uint64_t length = Core(t).length;
    if (length < kPage) continue;
    total += length;
    ++count;
  }
  return count == 0 ? 0 : total / count;
}

std::string SlicePattern::ToString() const {
  return "rows " + std::to_string(lo_num) + "/" + std::to_string(den) + ".." + std::to_string(hi_num) + "/" +
         std::to_string(den) + " of every tensor (-" + Kib(before) + ", +" + Kib(after) + ")";
}

bool SliceLearner::Informative(const SliceObservation& o) {
  const uint64_t size = o.tensor.size();
  if (o.tensor.rows() < 2 || size < (256u << 10) || o.end <= o.begin) return false;
  return o.end - o.begin <= size - size / 8;
}

std::optional<LearnedPattern> SliceLearner::Observe(const SliceObservation& o, const LearnedPattern* narrowing) {
  if (!Informative(o)) return std::nullopt;
  const SlicePattern* within = narrowing != nullptr ? &narrowing->pattern : nullptr;
  // A fraction within a pattern its reader was taken to read, which
  // observations show narrower: the reader is known to read slices of about
  // that size, so tensors of one size agreeing are no readahead running on.
  auto spread = [within](uint64_t smallest, uint64_t largest) {
    return within != nullptr || 2 * largest >= 3 * smallest;
  };
  // One observation is remembered per tensor and place where it begins, the latest.
  auto same_place = [](const SliceObservation& a, const SliceObservation& b) {
    return a.tensor.begin == b.tensor.begin && a.tensor.end == b.tensor.end && a.begin == b.begin;
  };
  // Narrowing a pattern: the observations it was learned from vote again.
  if (narrowing != nullptr) {
    for (const SliceObservation& u : narrowing->support) {
      const bool known = std::any_of(recent_.begin(), recent_.end(),
                                     [&](const SliceObservation& r) { return same_place(r, u); });
      if (!known && recent_.size() + 1 < kRemembered) recent_.push_back(u);
    }
  }
  std::erase_if(recent_, [&](const SliceObservation& r) { return same_place(r, o); });
  recent_.push_back(o);
  if (recent_.size() > kRemembered) recent_.pop_front();

  // The new observation (and the largest tensor that may agree with it)
  // proposes fractions; the others vote. The fraction that explains the most
  // tensors wins (the kernel's margins around a small slice fit several
  // fractions, the slices of many tensors only the reader's own); of those
  // that explain as many, the one with more slices whose margins are the
  // kernel's (KernelMargins); then the simplest (smallest denominator): a
  // fraction that explains every observation and is not the reader's own is
  // narrower than it, by a share of each tensor small enough to pass for the
  // kernel's read-around, and such near neighbours of r/N have larger
  // denominators than N. (How much the margins vary from tensor to tensor
  // does not tell them apart: the kernel's asynchronous readahead past a
  // slice varies by more than a near neighbour's error in a few tensors.)
  // Of two with one denominator, the one with the smaller margins.
  //
  // Where, as fractions of its tensor, a fraction's two ends must lie to
  // explain each remembered observation (Fits' bounds, widened by a few rows and
  // a byte for the rounding to rows): most candidates are told apart from
  // most observations by four comparisons, and only the rest go to Fits.
  // This keeps the search (up to max_den fractions, each against
  // kRemembered observations, under the engine's lock) to tens of
  // microseconds.
  struct Bounds {
    double lo_min, lo_max, hi_min, hi_max;
  };
  std::array<Bounds, kRemembered> bounds;
  for (size_t i = 0; i < recent_.size(); ++i) {
    const SliceObservation& r = recent_[i];
    const double s = static_cast<double>(r.tensor.size());
    const double slack = static_cast<double>(4 * r.tensor.row_bytes + kPage + 1);
    const double before = static_cast<double>(2 * tuning_.MarginsAt(r.readahead).half + 2 * r.tensor.row_bytes + 1);
    const double half = static_cast<double>(tuning_.max_margin / 2 + 2 * r.tensor.row_bytes + 1);
    const double rb = static_cast<double>(r.begin - r.tensor.begin);
    const double re = static_cast<double>(r.end - r.tensor.begin);
    const double likely = static_cast<double>(LikelyBegin(r) - r.tensor.begin);
    bounds[i] = Bounds{(likely - slack) / s, (rb + before) / s, (re - half) / s, (re + slack) / s};
  }
  // Every candidate explains `o` (the last one remembered): an observation
  // whose bounds share no fraction with its bounds supports none of them.
  // Those left bound the support any candidate can have; too few of them, or
  // of one size, and there is nothing to search.
  const Bounds& own = bounds[recent_.size() - 1];
  std::array<size_t, kRemembered> compatible;
  size_t n_compatible = 0;
  std::array<uint64_t, kRemembered> distinct_begins;
  size_t distinct = 0;
  uint64_t smallest_size = UINT64_MAX, largest_size = 0;
  for (size_t i = 0; i < recent_.size(); ++i) {
    const Bounds& w = bounds[i];
    if (w.lo_max < own.lo_min || w.lo_min > own.lo_max || w.hi_max < own.hi_min || w.hi_min > own.hi_max) continue;
    compatible[n_compatible++] = i;
    const SliceObservation& r = recent_[i];
    if (std::find(distinct_begins.begin(), distinct_begins.begin() + distinct, r.tensor.begin) ==
        distinct_begins.begin() + distinct) {
      distinct_begins[distinct++] = r.tensor.begin;
    }
    smallest_size = std::min(smallest_size, r.tensor.size());
    largest_size = std::max(largest_size, r.tensor.size());
  }
  if (static_cast<int>(distinct) < kMinSupport || !spread(smallest_size, largest_size)) return std::nullopt;
  std::optional<SlicePattern> best;
  size_t best_support = 0;
  uint64_t best_margins = 0;
  size_t best_plausible = 0;
  size_t best_fitted = 0;
  uint64_t den = 0;
  auto consider = [&](uint64_t rl, uint64_t rh) {
    const double x_lo = static_cast<double>(rl) / static_cast<double>(den);
    const double x_hi = static_cast<double>(rh) / static_cast<double>(den);
    if (x_lo < own.lo_min || x_lo > own.lo_max || x_hi < own.hi_min || x_hi > own.hi_max) return;
    SlicePattern p{.lo_num = rl, .hi_num = rh, .den = den};
    if (within != nullptr && (!within->Contains(p) || within->SameSlice(p))) return;
    uint64_t before = 0, after = 0;
    if (!Fits(o, p, &before, &after)) return;
    // No allocation here: this runs for every candidate fraction, under
    // the engine's lock.
    std::array<uint64_t, kRemembered> tensor_begins;  // distinct tensors that fit
    size_t tensors = 0;
    uint64_t smallest = UINT64_MAX, largest = 0;
    uint64_t max_before = 0, max_after = 0;
    size_t read_around = 0, readahead = 0;  // slices whose margins are each of the kernel's
    std::array<uint64_t, kRemembered> after_storage;
    size_t fitted = 0;
    for (size_t c = 0; c < n_compatible; ++c) {
      const size_t i = compatible[c];
      const Bounds& w = bounds[i];
      if (x_lo < w.lo_min || x_lo > w.lo_max || x_hi < w.hi_min || x_hi > w.hi_max) continue;
      const SliceObservation& r = recent_[i];
      uint64_t rb = 0, ra = 0;
      if (!Fits(r, p, &rb, &ra)) continue;
      max_before = std::max(max_before, rb);
      max_after = std::max(max_after, ra);
      const int kernel = KernelMargins(r, rb, ra);
      if (kernel & kReadAround) ++read_around;
      if (kernel & kReadahead) ++readahead;
      // Tensors do not overlap: one is known by where it begins.
      if (std::find(tensor_begins.begin(), tensor_begins.begin() + tensors, r.tensor.begin) ==
          tensor_begins.begin() + tensors) {
        tensor_begins[tensors++] = r.tensor.begin;
      }
      smallest = std::min(smallest, r.tensor.size());
      largest = std::max(largest, r.tensor.size());
      p.before = std::max(p.before, rb);
      after_storage[fitted++] = ra;
    }
    const std::span<uint64_t> afters(after_storage.data(), fitted);
    // Tensors of one size all read at the same place may just be the
    // kernel's readahead running on from the tensor before each; only one
    // fraction of rows explains reads of tensors of different sizes.
    if (static_cast<int>(tensors) < kMinSupport || !spread(smallest, largest)) return;
    // Bytes past a slice are the kernel's asynchronous readahead, which no
    // reader waits for: the window takes the usual amount, and more, when
    // the kernel asks for it, comes as it is asked for. Bytes before a
    // slice are the read-around of the first fault, which the reader waits
    // for: the window takes the most seen.
    std::nth_element(afters.begin(), afters.begin() + afters.size() / 2, afters.end());
    // The read-around of the fault on a slice's last page reaches as far
    // past it as the first fault's reaches before the slice, and the
    // reader waits for it too.
    p.after = std::max(p.before, afters.empty() ? 0 : afters[afters.size() / 2]);
    // Of fractions that explain as many tensors, the one with the more
    // slices whose margins are what the kernel reads around a slice one way
    // (KernelMargins: a reader copies its slices alike), if most are: a
    // fraction near the reader's own but of a smaller denominator explains
    // the slices of small tensors too, with margins the kernel does not read
    // (0/5 for a reader of 0/8: 15 KiB past a 2 MiB tensor's slice, where 0/8
    // has 177 KiB), or not all one way (3/12..4/12 for 4/16..5/16: 191 KiB
    // past one slice, 60 and 53 past two others, where 4/16 has 159 to 224).
    // Then the smaller denominator, or of one denominator the smaller
    // margins.
    const size_t plausible = std::max(read_around, readahead);
    const uint64_t margins = max_before + max_after;
    if (tensors > best_support ||
        (tensors == best_support &&
         ((plausible > best_plausible && 2 * plausible > fitted) ||
          (plausible == best_plausible && best->den == den && margins < best_margins)))) {
      best_support = tensors;
      best_margins = margins;
      best_plausible = plausible;
      best_fitted = fitted;
      best = p;
    }
  };
  // The candidates: fractions whose ends lie where the kernel's margins
  // around the new observation, or around the largest tensor compatible with
  // it, put them. The largest pins a fraction down finest (the margins are
  // bytes: a smaller share of a larger tensor); the new one is the one every
  // candidate must explain. A slice begins in the rows its first touched
  // byte lies in, or up to two read-around halves later (its first fault's
  // read-around); it ends in the rows of its last touched byte, or up to
  // what the kernel reads past a slice earlier. Where those margins span
  // more than four rows of a denominator, the two rows at no margin and
  // the two at the usual one (half a read-around before, that and one
  // readahead after) are tried.
  size_t lead = recent_.size() - 1;
  for (size_t c = 0; c < n_compatible; ++c) {
    if (recent_[compatible[c]].tensor.size() > recent_[lead].tensor.size()) lead = compatible[c];
  }
  // Those places as fractions of the proposer's tensor, worked out once (a
  // candidate only has to be near them: Fits decides).
  struct Places {
    double lo_first, lo_usual, lo_last, hi_first, hi_usual, hi_last;
  };
  auto places = [&](const SliceObservation& q) {
    const Tuning::SliceMargins m = tuning_.MarginsAt(q.readahead);
    const uint64_t reach_after = std::min(tuning_.max_margin / 2, m.MostAfter());
    const uint64_t usual_after = m.UsualAfter();
    const double s = static_cast<double>(q.tensor.size());
    const uint64_t qa = q.begin - q.tensor.begin;
    const uint64_t qb = q.end - q.tensor.begin;
    auto f = [&](uint64_t x) { return static_cast<double>(std::min(x, q.tensor.size())) / s; };
    return Places{f(qa), f(qa + m.half), f(qa + 2 * m.half),
                  f(qb - std::min(qb, reach_after)), f(qb - std::min(qb, usual_after)), f(qb)};
  };
  std::array<Places, 2> proposers{places(o), places(recent_[lead])};
  const size_t n_proposers = lead == recent_.size() - 1 ? 1 : 2;
  struct Rows {
    std::array<uint64_t, 4> v;
    size_t n = 0;
    void Add(uint64_t x) {
      if (std::find(v.begin(), v.begin() + n, x) == v.begin() + n) v[n++] = x;
    }
  };
  // Rows first..last, or, past four of them, `edge`, the row beside it
  // toward the other end, `usual` and the row after it.
  auto rows = [](uint64_t first, uint64_t last, uint64_t edge, uint64_t usual) {
    Rows r;
    if (last - first < 4) {
      for (uint64_t x = first; x <= last; ++x) r.Add(x);
    } else {
      r.Add(edge);
      r.Add(edge == first ? first + 1 : last - 1);
      r.Add(usual);
      r.Add(usual + 1);
    }
    return r;
  };
  for (den = 1; den <= tuning_.max_den; ++den) {
    // A fraction with every compatible tensor's support, its margins all the
    // kernel's, wins over any of a larger denominator; with other margins,
    // over any of more than twice its denominator (the neighbours that pass
    // for a reader's own, of a smaller denominator, are 0/5 or 0/6 for 0/8).
    if (best && best_support == distinct && den > best->den &&
        (best_plausible == best_fitted || den > 2 * best->den)) {
      break;
    }
    const double d = static_cast<double>(den);
    auto row = [d](double fraction) { return static_cast<uint64_t>(fraction * d + 1e-9); };
    std::array<std::pair<uint64_t, uint64_t>, 32> tried;
    size_t n_tried = 0;
    // Past the denominators at which one row of the new observation's tensor
    // is at least the mount's read-around half (the least slice Fits learns,
    // in any file), only the new observation's rows at no margin: there the
    // margins span many rows, and most fractions that fit are the same slice
    // to a row or two.
    const bool coarse = den * tuning_.read_around_half <= o.tensor.size();
    for (size_t k = 0; k < (coarse ? n_proposers : 1); ++k) {
      const Places& q = proposers[k];
      const uint64_t lo = row(q.lo_first), hi = row(q.hi_last) + 1;
      const Rows los = coarse ? rows(lo, row(q.lo_last) + 1, lo, row(q.lo_usual)) : rows(lo, lo + 1, lo, lo);
      const Rows his = coarse ? rows(row(q.hi_first), hi, hi, row(q.hi_usual)) : rows(hi - 1, hi, hi, hi);
      for (size_t i = 0; i < los.n; ++i) {
        for (size_t j = 0; j < his.n; ++j) {
          const std::pair<uint64_t, uint64_t> f{los.v[i], his.v[j]};
          if (f.first >= f.second || f.second > den ||
              std::find(tried.begin(), tried.begin() + n_tried, f) != tried.begin() + n_tried) {
            continue;
          }
          tried[n_tried++] = f;
          consider(f.first, f.second);
        }
      }
    }
  }
  if (!best) return std::nullopt;
  // A narrower fraction replaces a learned one only where the kernel's
  // margins explain most of its slices: a copy whose readahead the kernel
  // held back (its FUSE queue congested) ends at its slice, and looser
  // fractions fit that too.
  if (within != nullptr && 2 * best_plausible <= best_fitted) return std::nullopt;
  // At least the kernel's default mmap read-around (64 KiB either side of a
  // fault) past each end, where a slice at a tensor's edge hides it (the
  // reads beyond the edge were counted as the neighbour's).
  best->before = PageUp(std::max<uint64_t>(best->before, tuning_.read_around_half));
  best->after = PageUp(std::max<uint64_t>(best->after, tuning_.read_around_half));
  LearnedPattern found{*best, {}};
  std::erase_if(recent_, [&](const SliceObservation& r) {
    uint64_t rb = 0, ra = 0;
    if (!Fits(r, *best, &rb, &ra)) return false;
    found.support.push_back(r);
    return true;
  });
  return found;
}

}  // namespace tensorfs
