// FetchScheduler: the fetches waiting for a worker (FetchQueues: demand before
// prefetch, a queued prefetch a read comes to wait for promoted) and the
// worker threads that run them, one job each at a time.
//
// A worker takes a job under the scheduler's own lock and runs it with no
// lock held: `run` does the store I/O, then takes whatever lock it needs to
// publish. Jobs are pushed and promoted under the caller's lock (ReadEngine's
// mutex), so that lock comes first: lock order, the caller's, then mu_.
//
// Thread-safety: all methods may be called concurrently.
#ifndef TENSORFS_CORE_ENGINE_FETCH_SCHEDULER_H_
#define TENSORFS_CORE_ENGINE_FETCH_SCHEDULER_H_

#include <functional>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/engine/fetch_queues.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

template <typename Job>
class FetchScheduler {
 public:
  FetchScheduler() = default;
  FetchScheduler(const FetchScheduler&) = delete;
  FetchScheduler& operator=(const FetchScheduler&) = delete;
  // Stop() and Join() must have been called.
  ~FetchScheduler() = default;

  // Starts `workers` threads, each running one job at a time with `run`.
  void Start(int workers, std::function<void(const Job&)> run) {
    run_ = std::move(run);
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
      {
        MutexLock lock(mu_);
        cv_.Wait(mu_, [&]() REQUIRES(mu_) { return stopping_ || !queues_.empty(); });
        if (stopping_) return;
        job = queues_.Pop();
        ++running_;
      }
      run_(*job);
      MutexLock lock(mu_);
      --running_;
    }
  }

  Mutex mu_;
  CondVar cv_;
  FetchQueues<Job> queues_ GUARDED_BY(mu_);
  int running_ GUARDED_BY(mu_) = 0;  // taken from a queue, `run` not returned
  bool stopping_ GUARDED_BY(mu_) = false;
  std::function<void(const Job&)> run_;  // set before the workers start
  std::vector<std::thread> workers_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_ENGINE_FETCH_SCHEDULER_H_
