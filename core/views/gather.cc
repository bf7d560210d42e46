#include "core/views/gather.h"

namespace tensorfs {

std::shared_ptr<Gather> Gather::Start(size_t slots, ReadDone done, std::shared_ptr<const void> keep) {
  return std::shared_ptr<Gather>(new Gather(slots, std::move(done), std::move(keep)));
}

void Gather::Fill(size_t slot, ReadResult result) {
  slots_[slot] = std::move(result);
  Arrive();
}

void Gather::Fail(const Status& status) {
  if (!failed_.exchange(true)) error_ = status;
  Arrive();
}

void Gather::Arrive() {
  if (pending_.fetch_sub(1) != 1) return;
  if (failed_.load()) return done_(error_);
  if (slots_.size() == 1 && keep_ == nullptr) return done_(std::move(slots_[0]));
  ReadResult result;
  auto owners = std::make_shared<std::vector<std::shared_ptr<const void>>>();
  owners->reserve(slots_.size() + 1);
  if (keep_ != nullptr) owners->push_back(std::move(keep_));
  for (ReadResult& slot : slots_) {
    owners->push_back(std::move(slot.owner));
    result.pieces.insert(result.pieces.end(), slot.pieces.begin(), slot.pieces.end());
  }
  result.owner = std::move(owners);
  done_(std::move(result));
}

}  // namespace tensorfs
