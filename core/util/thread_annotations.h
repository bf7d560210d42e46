// Clang thread-safety annotations (checked by the -Wthread-safety CI build) and
// an annotated mutex. Under GCC the macros expand to nothing.
//
// LOCK ORDERING (the one place it is written down): a thread holding a lock may
// take only locks listed below it.
//   1. vfs::Namespace::mu_ (not held across engine or store calls, nor while
//      its ChangeObserver is called; a listing in flight is waited for on
//      a condition variable of this mutex)
//   2. views::ViewReader::prefetch_mu_
//   3. engine::ReadEngine::mu_ (not held across store I/O or while calling back)
//   4. store locks (LocalStore has none; the GCS token cache, the AWS
//      credentials cache, the HTTP client's handle pools)
//   5. leaf locks: logging rate limiters (taken after the process-wide list of
//      limiters, see log_limiter.h), stats counters, the stores' EndpointHealth
//      and RetryWindows, S3Store's region, the engine's BufferPool (a chunk may
//      be freed, and its buffer returned, under ReadEngine::mu_),
//      fs::HandleTable's lock, fs::KernelNotifier::mu_ (its queue; never held
//      while it notifies the kernel, which may wait for a FUSE request to be
//      answered), views::ComputePool::mu_ (its queue; no task runs under it)
#ifndef TENSORFS_CORE_UTIL_THREAD_ANNOTATIONS_H_
#define TENSORFS_CORE_UTIL_THREAD_ANNOTATIONS_H_

#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define TENSORFS_TSA(x) __attribute__((x))
#else
#define TENSORFS_TSA(x)
#endif

#define CAPABILITY(x) TENSORFS_TSA(capability(x))
#define SCOPED_CAPABILITY TENSORFS_TSA(scoped_lockable)
#define GUARDED_BY(x) TENSORFS_TSA(guarded_by(x))
#define PT_GUARDED_BY(x) TENSORFS_TSA(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) TENSORFS_TSA(acquired_before(__VA_ARGS__))
#define REQUIRES(...) TENSORFS_TSA(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) TENSORFS_TSA(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TENSORFS_TSA(release_capability(__VA_ARGS__))
#define EXCLUDES(...) TENSORFS_TSA(locks_excluded(__VA_ARGS__))
#define NO_THREAD_SAFETY_ANALYSIS TENSORFS_TSA(no_thread_safety_analysis)

namespace tensorfs {

// std::mutex with annotations, so GUARDED_BY(mu_) is checked.
class CAPABILITY("mutex") Mutex {
 public:
  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  std::mutex& native() { return mu_; }

 private:
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Waits on a Mutex already held by the caller (through a MutexLock).
class CondVar {
 public:
  template <typename Pred>
  void Wait(Mutex& mu, Pred pred) REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu.native(), std::adopt_lock);
    cv_.wait(lk, pred);
    lk.release();
  }
  template <typename Pred, typename Duration>
  bool WaitFor(Mutex& mu, Duration d, Pred pred) REQUIRES(mu) {
    std::unique_lock<std::mutex> lk(mu.native(), std::adopt_lock);
    bool r = cv_.wait_for(lk, d, pred);
    lk.release();
    return r;
  }
  void NotifyAll() { cv_.notify_all(); }
  void NotifyOne() { cv_.notify_one(); }

 private:
  std::condition_variable cv_;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_UTIL_THREAD_ANNOTATIONS_H_
