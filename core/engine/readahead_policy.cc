#include "core/engine/readahead_policy.h"

namespace tensorfs {

ReadaheadPolicy::Options ReadaheadPolicy::ForMount(bool explicit_read_ahead, uint64_t read_ahead,
                                                   uint64_t shard_world) {
  if (explicit_read_ahead) return Options{.unknown = read_ahead, .whole = read_ahead, .slice = read_ahead, .fixed = true};
  const Kind declared = shard_world == 0 ? Kind::kUnknown : shard_world == 1 ? Kind::kWhole : Kind::kSlice;
  return Options{.unknown = kUnknownDefault,
                 .unknown_shard = kUnknownShardDefault,
                 .whole = kWholeDefault,
                 .slice = kSliceDefault,
                 .slice_small = kSliceSmallDefault,
                 .small_slice = kSmallSliceDefault,
                 .declared = declared};
}

uint64_t ReadaheadPolicy::Wanted() const {
  if (options_.fixed) return options_.unknown;
  switch (InForce()) {
    case Kind::kWhole:
      return options_.whole;
    case Kind::kSlice:
      return slice_size_ != 0 && slice_size_ < options_.small_slice ? options_.slice_small : options_.slice;
    case Kind::kUnknown:
      break;
  }
  return options_.unknown;
}

uint64_t ReadaheadPolicy::WantedFor(bool shard) const {
  if (shard && !options_.fixed && InForce() == Kind::kUnknown && options_.unknown_shard != 0) {
    return options_.unknown_shard;
  }
  return Wanted();
}

void ReadaheadPolicy::Change(Kind before, Kind after) {
  if (before == after) return;
  if (before == Kind::kWhole) --whole_open_;
  if (after == Kind::kWhole) {
    ++whole_open_;
    mode_ = Kind::kWhole;
  }
  if (after == Kind::kSlice && whole_open_ == 0) mode_ = Kind::kSlice;
}

}  // namespace tensorfs
