// FetchScheduler: the fetches waiting for a worker (FetchQueues: demand before
// prefetch, a queued prefetch a read comes to wait for promoted) and the
// worker threads that run them, one job each at a time.
//
// Bounded prefetch (PrefetchBound): the prefetches `bytes_of` counts (a slice
// pattern's sweep) start only while those running come to fewer bytes than
// the fetches delivered in the last `horizon`, or than `floor`, and always
// when none runs; the other jobs start as soon as a worker is free. Requests
// in flight share the link, each at its share: a sweep with more in flight
// than the link delivers in `horizon` only slows the reads that wait, among
// them those that show a slice reader's pattern to be narrower, after which
// the windows still queued are withdrawn (ReadEngine::DropSweeps) while
// those running are not. The bound follows the link's rate: a few MiB on a
// host's 3 MB/s share, as much as the workers carry on a wide link.
//
// A worker takes a job under the scheduler's own lock and runs it with no
// lock held: `run` does the store I/O, then takes whatever lock it needs to
// publish. Jobs are pushed and promoted under the caller's lock (ReadEngine's
// mutex), so that lock comes first: lock order, the caller's, then mu_.
//
// Thread-safety: all methods may be called concurrently.
#ifndef TENSORFS_CORE_ENGINE_FETCH_SCHEDULER_H_
#define TENSORFS_CORE_ENGINE_FETCH_SCHEDULER_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/engine/fetch_queues.h"
#include "core/util/clock.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

// The bookkeeping of a bound on prefetch in flight: the bytes of the bounded
// prefetches running, and those all fetches delivered within the horizon.
//
// Thread-safety: none of its own (FetchScheduler's lock).
class PrefetchBudget {
 public:
  PrefetchBudget() = default;  // no floor, no horizon: bounded prefetch runs one at a time
  PrefetchBudget(uint64_t floor, std::chrono::nanoseconds horizon) : floor_(floor), horizon_(horizon) {}

  // Whether a bounded prefetch may start at `now`: none runs, or their bytes
  // are fewer than those delivered in the horizon before `now` (or than the
  // floor).
  bool MayStart(Clock::TimePoint now) {
    if (running_ == 0) return true;
    Forget(now);
    return running_ < std::max(floor_, delivered_sum_);
  }
  // A job starts; `bounded` bytes of it count against the bound (0: none).
  void Started(uint64_t bounded) { running_ += bounded; }
  // A job that started with `bounded` ends at `now`, having delivered `delivered`.
  void Finished(uint64_t bounded, uint64_t delivered, Clock::TimePoint now) {
    running_ -= bounded;
    if (delivered == 0) return;
    delivered_.emplace_back(now, delivered);
    delivered_sum_ += delivered;
    Forget(now);
  }

 private:
  // Drops what was delivered before the horizon.
  void Forget(Clock::TimePoint now) {
    while (!delivered_.empty() && delivered_.front().first < now - horizon_) {
      delivered_sum_ -= delivered_.front().second;
      delivered_.pop_front();
    }
  }

  uint64_t floor_ = 0;
  std::chrono::nanoseconds horizon_{0};
  uint64_t running_ = 0;  // bytes of the bounded prefetches running
  std::deque<std::pair<Clock::TimePoint, uint64_t>> delivered_;  // when each job ended, what it delivered
  uint64_t delivered_sum_ = 0;
};

template <typename Job>
class FetchScheduler {
 public:
  FetchScheduler() = default;
  FetchScheduler(const FetchScheduler&) = delete;
  FetchScheduler& operator=(const FetchScheduler&) = delete;
  // Stop() and Join() must have been called.
  ~FetchScheduler() = default;

  // Which prefetches are bounded, and by how much (see the top of this file).
  struct PrefetchBound {
    // The bytes a prefetch counts against the bound; 0: it is not bounded.
    std::function<uint64_t(const Job&)> bytes_of = [](const Job&) { return uint64_t{0}; };
    uint64_t floor = 0;
    std::chrono::nanoseconds horizon{0};
    Clock* clock = &SystemClock();
  };

  // Starts `workers` threads, each running one job at a time with `run`,
  // which returns the bytes it delivered.
  void Start(int workers, std::function<uint64_t(const Job&)> run, PrefetchBound bound = {}) {
    run_ = std::move(run);
    bound_ = std::move(bound);
    {
      MutexLock lock(mu_);
      budget_ = PrefetchBudget(bound_.floor, bound_.horizon);
    }
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { WorkerLoop(); });
  }

  void Push(Job job, bool prefetch) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      queues_.Push(std::move(job), prefetch);
    }
    cv_.NotifyOne();
  }

  // See FetchQueues::Promote.
  template <typename Match>
  bool Promote(Match match) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return queues_.Promote(match);
  }

  // See FetchQueues::Withdraw.
  template <typename Match>
  std::vector<Job> Withdraw(Match match) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return queues_.Withdraw(match);
  }

  // Whether no job is queued or running (a running job counts until `run`
  // has returned).
  bool Idle() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return queues_.empty() && running_ == 0;
  }

  // No job is taken from now on: returns the queued ones (for the caller to
  // fail); the running ones finish. Later pushes are dropped.
  std::vector<Job> Stop() EXCLUDES(mu_) {
    std::vector<Job> queued;
    {
      MutexLock lock(mu_);
      stopping_ = true;
      queued = queues_.TakeAll();
    }
    cv_.NotifyAll();
    return queued;
  }

  // Waits for the workers to end (after Stop).
  void Join() {
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

 private:
  void WorkerLoop() EXCLUDES(mu_) {
    for (;;) {
      std::optional<Job> job;
      bool prefetch = false;
      uint64_t bounded = 0;  // bytes counted against the bound while it runs
      {
        MutexLock lock(mu_);
        // A job is taken as soon as one may start (the wait's test takes it).
        cv_.Wait(mu_, [&]() REQUIRES(mu_) {
          if (stopping_) return true;
          const bool within_bound = budget_.MayStart(bound_.clock->Now());
          job = queues_.Pop([&](const Job& j) { return within_bound || bound_.bytes_of(j) == 0; }, &prefetch);
          return job.has_value();
        });
        if (stopping_) return;
        // A demand job (among them prefetches a read came to wait for) is not bounded.
        if (prefetch) bounded = bound_.bytes_of(*job);
        budget_.Started(bounded);
        ++running_;
      }
      const uint64_t delivered = run_(*job);
      bool queued = false;
      {
        MutexLock lock(mu_);
        budget_.Finished(bounded, delivered, bound_.clock->Now());
        --running_;
        queued = !queues_.empty();
      }
      // What it delivered may let a bounded prefetch held back start.
      if (queued) cv_.NotifyAll();
    }
  }

  Mutex mu_;
  CondVar cv_;
  FetchQueues<Job> queues_ GUARDED_BY(mu_);
  int running_ GUARDED_BY(mu_) = 0;  // taken from a queue, `run` not returned
  bool stopping_ GUARDED_BY(mu_) = false;
  PrefetchBudget budget_ GUARDED_BY(mu_);  // set in Start
  std::function<uint64_t(const Job&)> run_;  // set before the workers start
  PrefetchBound bound_;                      // set before the workers start
  std::vector<std::thread> workers_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_FETCH_SCHEDULER_H_
