// FetchQueues: the fetches waiting for a worker, in two FIFO queues: demand
// (a read waits for the bytes) before prefetch. A queued prefetch a read comes
// to wait for is promoted to the back of the demand queue.
//
// Thread-safety: none of its own; ReadEngine calls it with its mutex held.
#ifndef TENSORFS_CORE_ENGINE_FETCH_QUEUES_H_
#define TENSORFS_CORE_ENGINE_FETCH_QUEUES_H_

#include <algorithm>
#include <deque>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

namespace tensorfs {

template <typename Job>
class FetchQueues {
 public:
  void Push(Job job, bool prefetch) { (prefetch ? prefetch_ : demand_).push_back(std::move(job)); }

  bool empty() const { return demand_.empty() && prefetch_.empty(); }
  size_t size() const { return demand_.size() + prefetch_.size(); }

  // The oldest demand job, else the oldest prefetch; nullopt when both are empty.
  std::optional<Job> Pop() {
    return Pop([](const Job&) { return true; });
  }
  // The oldest demand job, else the oldest prefetch that `may_start` accepts
  // (a bound on prefetch in flight may hold some back); nullopt when none.
  // `prefetch`, if given, is set to whether the job was a prefetch.
  template <typename MayStart>
  std::optional<Job> Pop(MayStart may_start, bool* prefetch = nullptr) {
    const bool from_prefetch = demand_.empty();
    std::deque<Job>& queue = from_prefetch ? prefetch_ : demand_;
    auto it = from_prefetch ? std::find_if(queue.begin(), queue.end(), may_start) : queue.begin();
    if (it == queue.end()) return std::nullopt;
    Job job = std::move(*it);
    queue.erase(it);
    if (prefetch != nullptr) *prefetch = from_prefetch;
    return job;
  }

  // Moves the oldest queued prefetch that `match` accepts to the back of the
  // demand queue. False if none does (it runs already, or was never queued).
  template <typename Match>
  bool Promote(Match match) {
    auto it = std::find_if(prefetch_.begin(), prefetch_.end(), match);
    if (it == prefetch_.end()) return false;
    demand_.push_back(std::move(*it));
    prefetch_.erase(it);
    return true;
  }

  // Takes out the queued prefetches that `match` accepts, in queue order
  // (jobs no longer wanted; those a read waits for were promoted to demand).
  template <typename Match>
  std::vector<Job> Withdraw(Match match) {
    std::vector<Job> out;
    for (auto it = prefetch_.begin(); it != prefetch_.end();) {
      if (match(*it)) {
        out.push_back(std::move(*it));
        it = prefetch_.erase(it);
      } else {
        ++it;
      }
    }
    return out;
  }

  // Every queued job, demand first, leaving both queues empty.
  std::vector<Job> TakeAll() {
    std::vector<Job> all;
    all.reserve(size());
    for (std::deque<Job>* queue : {&demand_, &prefetch_}) {
      std::move(queue->begin(), queue->end(), std::back_inserter(all));
      queue->clear();
    }
    return all;
  }

 private:
  std::deque<Job> demand_;
  std::deque<Job> prefetch_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_FETCH_QUEUES_H_
