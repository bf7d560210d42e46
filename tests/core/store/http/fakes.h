// Test doubles for the GCS backend: a clock whose Sleep() only advances time,
// a clock whose time moves only when the test says so (waits block until then
// or until woken), and an HttpClient that answers from a script and records
// every request.
//
// Thread-safety: both may be used from several threads at once.
#ifndef TENSORFS_TESTS_CORE_STORE_HTTP_FAKES_H_
#define TENSORFS_TESTS_CORE_STORE_HTTP_FAKES_H_

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "core/store/http/http.h"
#include "core/store/http/retry.h"
#include "core/util/thread_annotations.h"

namespace tensorfs::testing {

class FakeClock : public Clock {
 public:
  TimePoint Now() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return now_;
  }
  void Sleep(std::chrono::nanoseconds d) override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    sleeps_.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(d));
    now_ += d;
  }
  // A wait that is already over returns at once; any other sleeps its whole
  // duration (recorded like a Sleep): nothing else runs while it "waits".
  bool WaitFor(Mutex& mu, CondVar&, std::chrono::nanoseconds d, const std::function<bool()>& ready) override
      REQUIRES(mu) {
    (void)mu;  // held by the caller throughout: this clock never releases it
    if (ready()) return true;
    Sleep(d);
    return ready();
  }
  void Advance(std::chrono::nanoseconds d) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    now_ += d;
  }
  std::vector<std::chrono::milliseconds> sleeps() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return sleeps_;
  }

 private:
  mutable Mutex mu_;
  TimePoint now_ GUARDED_BY(mu_) = TimePoint() + std::chrono::hours(1000);
  std::vector<std::chrono::milliseconds> sleeps_ GUARDED_BY(mu_);
};

// Time moves only by Advance(). WaitFor() blocks until the waiter is woken
// with `ready()` true or the test advances past the end of the wait, so a test
// can hold a request in backoff and decide what ends the wait. Sleep() is
// instantaneous (it advances time).
class ManualClock : public Clock {
 public:
  TimePoint Now() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return now_;
  }
  void Sleep(std::chrono::nanoseconds d) override { Advance(d); }
  bool WaitFor(Mutex& mu, CondVar& cv, std::chrono::nanoseconds d, const std::function<bool()>& ready) override
      REQUIRES(mu) {
    const TimePoint end = Now() + d;
    SetWaiting(+1);
    bool r = ready();
    // A notification ends the real wait at once; the short timeout only
    // notices Advance(), which cannot reach this condition variable.
    while (!r && Now() < end) r = cv.WaitFor(mu, std::chrono::milliseconds(1), ready);
    SetWaiting(-1);
    return r;
  }
  void Advance(std::chrono::nanoseconds d) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    now_ += d;
  }
  int waiting() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return waiting_;
  }

 private:
  void SetWaiting(int delta) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    waiting_ += delta;
  }
  mutable Mutex mu_;
  TimePoint now_ GUARDED_BY(mu_) = TimePoint() + std::chrono::hours(1000);
  int waiting_ GUARDED_BY(mu_) = 0;
};

// What a scripted reply sends. `body` goes where the real client would put it:
// into the request's sink if use_sink accepts the status and headers (at most
// the sink's size, more is kSinkOverflow), else into HttpResponse::body.
struct FakeReply {
  long status = 200;
  HttpHeaders headers;
  std::string body;
  // A transport failure after `body` was delivered (kConnectionLost mid-body...).
  TransportError error = TransportError::kNone;
  std::string error_message;
};

// Applies `reply` to `request` as the libcurl client would.
inline HttpResponse Deliver(const HttpRequest& request, const FakeReply& reply) {
  HttpResponse r;
  r.status = reply.error == TransportError::kConnectFailed ? 0 : reply.status;
  r.headers = reply.headers;
  r.error = reply.error;
  r.error_message = reply.error_message;
  if (!reply.body.empty()) {
    bool to_sink = !request.sink.empty() &&
                   (request.use_sink ? request.use_sink(r.status, r.headers) : (r.status >= 200 && r.status < 300));
    if (to_sink) {
      size_t n = std::min(reply.body.size(), request.sink.size());
      std::memcpy(request.sink.data(), reply.body.data(), n);
      r.sink_bytes = n;
      if (n < reply.body.size()) r.error = TransportError::kSinkOverflow;
    } else {
      r.body = reply.body;
    }
  }
  return r;
}

class FakeHttpClient : public HttpClient {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Queues a handler for the next request; requests beyond the script get
  // `fallback` (by default a failing test reply: HTTP 599).
  void Push(Handler h) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    script_.push_back(std::move(h));
  }
  void Push(FakeReply reply) {
    Push([reply](const HttpRequest& req) { return Deliver(req, reply); });
  }
  void SetFallback(Handler h) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    fallback_ = std::move(h);
  }

  HttpResponse Perform(const HttpRequest& request) override EXCLUDES(mu_) {
    Handler h;
    {
      MutexLock lock(mu_);
      requests_.push_back(request);
      requests_.back().sink = {};
      requests_.back().use_sink = nullptr;
      if (!script_.empty()) {
        h = std::move(script_.front());
        script_.pop_front();
      } else {
        h = fallback_;
      }
    }
    if (!h) return Deliver(request, FakeReply{.status = 599, .body = "unscripted request"});
    return h(request);
  }

  // Copies of the requests so far (without sink or callback).
  std::vector<HttpRequest> requests() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return requests_;
  }
  size_t pending() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return script_.size();
  }

 private:
  mutable Mutex mu_;
  std::deque<Handler> script_ GUARDED_BY(mu_);
  Handler fallback_ GUARDED_BY(mu_);
  std::vector<HttpRequest> requests_ GUARDED_BY(mu_);
};

// The value of header `name` ("Range") in a recorded request, or "".
inline std::string RequestHeader(const HttpRequest& r, std::string_view name) {
  for (const std::string& h : r.headers) {
    if (h.size() > name.size() && h.compare(0, name.size(), name) == 0 && h[name.size()] == ':') {
      std::string v = h.substr(name.size() + 1);
      while (!v.empty() && v.front() == ' ') v.erase(0, 1);
      return v;
    }
  }
  return "";
}

}  // namespace tensorfs::testing

#endif  // TENSORFS_TESTS_CORE_STORE_HTTP_FAKES_H_
