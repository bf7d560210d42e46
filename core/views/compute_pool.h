// ComputePool: the threads the transforms compute their segments on, one per
// core of the machine, so that quantizing runs side by side on every core
// whoever asked for it (a kernel read's thread, an engine fetch worker
// delivering source bytes, a segment computed ahead) and never holds up a
// fetch worker or the request that found its source already cached.
//
// Post() queues a task; the threads run tasks in the order posted. The
// destructor runs what is still queued, then joins the threads: a posted task
// always runs (a derived chunk waiting for it is always published).
//
// Thread-safety: Post may be called from any thread, but not from a task
// after the destructor has begun. mu_ is a leaf lock (core/util/
// thread_annotations.h): no task runs under it. Held by shared_ptr: a
// computation posting to it keeps it alive.
#ifndef TENSORFS_CORE_VIEWS_COMPUTE_POOL_H_
#define TENSORFS_CORE_VIEWS_COMPUTE_POOL_H_

#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/util/thread_annotations.h"

namespace tensorfs {

class ComputePool {
 public:
  // `threads` <= 0: one per core (std::thread::hardware_concurrency).
  explicit ComputePool(int threads = 0);
  ~ComputePool() EXCLUDES(mu_);
  ComputePool(const ComputePool&) = delete;
  ComputePool& operator=(const ComputePool&) = delete;

  void Post(std::function<void()> task) EXCLUDES(mu_);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void Run() EXCLUDES(mu_);

  Mutex mu_;
  CondVar cv_;
  std::deque<std::function<void()>> tasks_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_VIEWS_COMPUTE_POOL_H_
