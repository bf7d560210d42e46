#include "core/engine/readahead_policy.h"

#include <algorithm>

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

ReadaheadPolicy::ReadaheadPolicy(Options options) : options_(options), resting_(ValueOf(nullptr, false)) {}

uint64_t ReadaheadPolicy::ValueOf(const Process* p, bool shard, const FileReaders* f) const {
  if (options_.fixed) return options_.unknown;
  // The declared kind (-o shard=), else the one the process was seen as.
  const Kind kind = options_.declared != Kind::kUnknown ? options_.declared : p != nullptr ? p->mode : Kind::kUnknown;
  switch (kind) {
    case Kind::kWhole:
      return options_.whole;
    case Kind::kSlice: {
      const uint64_t size = options_.declared == Kind::kSlice ? declared_slice_size_ : p->slice_size;
      return size != 0 && size < options_.small_slice ? options_.slice_small : options_.slice;
    }
    case Kind::kUnknown:
      break;
  }
  // Nothing known of the process: what the file's own readers were.
  if (f != nullptr && f->whole && !f->slice) return options_.whole;
  return shard && options_.unknown_shard != 0 ? options_.unknown_shard : options_.unknown;
}

uint64_t ReadaheadPolicy::WantedFor(uint64_t process, bool shard, std::string_view file) const {
  auto f = file.empty() ? files_.end() : files_.find(file);
  return ValueOf(Find(process), shard, f == files_.end() ? nullptr : &f->second);
}

const ReadaheadPolicy::Process* ReadaheadPolicy::Find(uint64_t process) const {
  auto it = processes_.find(process);
  return it == processes_.end() ? nullptr : &it->second;
}

ReadaheadPolicy::Process& ReadaheadPolicy::Of(uint64_t process) {
  auto [it, inserted] = processes_.try_emplace(process);
  it->second.last_used = ++clock_;
  if (inserted && processes_.size() > kProcesses) {
    // A process with a whole-tensor reader open stays: its readers' Change
    // to kUnknown is still to come.
    auto oldest = processes_.end();
    for (auto i = processes_.begin(); i != processes_.end(); ++i) {
      if (i != it && i->second.whole_open == 0 &&
          (oldest == processes_.end() || i->second.last_used < oldest->second.last_used)) {
        oldest = i;
      }
    }
    if (oldest != processes_.end()) processes_.erase(oldest);
  }
  return it->second;
}

void ReadaheadPolicy::Change(uint64_t process, Kind before, Kind after, std::string_view file) {
  if (before == after) return;
  if (!file.empty() && after != Kind::kUnknown) {
    auto [it, inserted] = files_.try_emplace(std::string(file));
    FileReaders& f = it->second;
    (after == Kind::kWhole ? f.whole : f.slice) = true;
    f.last_used = ++clock_;
    if (inserted && files_.size() > kFiles) {
      auto oldest = files_.begin();
      for (auto i = files_.begin(); i != files_.end(); ++i) {
        if (i->second.last_used < oldest->second.last_used) oldest = i;
      }
      files_.erase(oldest);
    }
  }
  Process& p = Of(process);
  const uint64_t was = ValueOf(&p, false);
  if (before == Kind::kWhole) p.whole_open = std::max(0, p.whole_open - 1);
  if (after == Kind::kWhole) {
    ++p.whole_open;
    p.mode = Kind::kWhole;
  }
  if (after == Kind::kSlice && p.whole_open == 0) p.mode = Kind::kSlice;
  if (const uint64_t now = ValueOf(&p, false); now != was) resting_ = now;
}

void ReadaheadPolicy::SetSliceSize(uint64_t process, uint64_t bytes) {
  if (options_.declared == Kind::kSlice) {
    if (declared_slice_size_ != 0) return;
    declared_slice_size_ = bytes;
    resting_ = ValueOf(nullptr, false);
    return;
  }
  Process& p = Of(process);
  if (p.slice_size != 0) return;
  const uint64_t was = ValueOf(&p, false);
  p.slice_size = bytes;
  if (const uint64_t now = ValueOf(&p, false); now != was) resting_ = now;
}

ReadaheadPolicy::Kind ReadaheadPolicy::KindOf(uint64_t process) const {
  if (options_.fixed) return Kind::kUnknown;
  if (options_.declared != Kind::kUnknown) return options_.declared;
  const Process* p = Find(process);
  return p == nullptr ? Kind::kUnknown : p->mode;
}

bool ReadaheadPolicy::slice_size_known(uint64_t process) const {
  if (options_.declared == Kind::kSlice) return declared_slice_size_ != 0;
  const Process* p = Find(process);
  return p != nullptr && p->slice_size != 0;
}

}  // namespace tensorfs
