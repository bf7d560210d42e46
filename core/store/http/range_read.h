// RangeRead: the part of a ranged GET that every HTTP store shares, so that a
// gs:// and an s3:// read take the same path: the body is received straight
// into the caller's span (the chunk's buffer), a response cut short is resumed
// from its first missing byte, and a response is taken only if it says it is
// the bytes asked for (Content-Range and Content-Length equal to the range,
// or a 200 from byte 0 of exactly that length) and of the version the read is
// pinned to. Each request has a total timeout (RangeReadTimeout).
//
// The store supplies what differs: how a request is addressed and
// authenticated (send), what says which version the bytes are of
// (check_version), and what an error answer means (classify). RangeRead makes
// one attempt per Attempt() call; the store runs the attempts under its
// StoreRetries (retry.h).
//
// Thread-safety: one RangeRead per read, used by the thread running it.
#ifndef TENSORFS_CORE_STORE_HTTP_RANGE_READ_H_
#define TENSORFS_CORE_STORE_HTTP_RANGE_READ_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "core/metrics/metrics.h"
#include "core/store/http/http.h"
#include "core/store/http/retry.h"
#include "core/util/clock.h"
#include "core/util/status.h"

namespace tensorfs {

// Every range request must finish within RangeReadTimeout(its size): a fixed
// allowance (connection, TLS, the server's first byte) plus its bytes at a
// minimum rate of 32 KiB/s; an 8 MiB chunk gets 30 + 256 s. This is on top of
// stall_timeout (no byte at all for that long): a server that trickles a byte
// now and then is stopped too. The rate is per request: 32 fetches in flight
// need 1 MiB/s in all. A request stopped this way fails with kTimeout, is
// retried from its first missing byte, and does not count as progress for the
// retry window.
inline constexpr uint64_t kRangeReadMinRate = 32 << 10;  // bytes per second
inline constexpr std::chrono::seconds kRangeReadAllowance{30};
std::chrono::milliseconds RangeReadTimeout(uint64_t bytes);

// Parses "bytes a-b/total" (total may be '*'). False if malformed, or if the
// range does not lie within the total.
bool ParseContentRange(std::string_view value, uint64_t* first, uint64_t* last);

// "bytes 0-1023", for messages.
std::string RangeText(uint64_t first, uint64_t last);

struct RangeReadHooks {
  // Addresses, authenticates and sends `request` (a GET of bytes [first,
  // last], Range header, sink and timeout already set). An error Status is a
  // credentials failure (see FromCredentialsError).
  std::function<StatusOr<HttpResponse>(HttpRequest& request, uint64_t first, uint64_t last)> send;
  // For a 200 or 206 whose range checks out: OK to take its bytes, or why not
  // (kStale when they are of another version than the read is pinned to).
  std::function<Status(const HttpHeaders& headers)> check_version;
  // What an answer that is not a success means.
  std::function<AttemptResult(const HttpResponse& response)> classify;
};

class RangeRead {
 public:
  // Reads out.size() bytes at `offset`; `what` and `object_url` name it in
  // messages and logs. Bytes received are added to `bytes_received`; bytes kept
  // from cut-short responses to metrics.retries.resumed_bytes.
  RangeRead(std::string what, std::string object_url, uint64_t offset, std::span<std::byte> out, Clock& clock,
            Metrics& metrics, std::atomic<uint64_t>& bytes_received, RangeReadHooks hooks);

  // One request for the bytes still missing.
  AttemptResult Attempt();

 private:
  const std::string what_;
  const std::string object_url_;
  const uint64_t offset_;
  const uint64_t last_;
  const std::span<std::byte> out_;
  Clock& clock_;
  Metrics& metrics_;
  std::atomic<uint64_t>& bytes_received_;
  const RangeReadHooks hooks_;
  uint64_t done_ = 0;     // bytes of out_ filled so far
  uint64_t resumed_ = 0;  // of which counted as resumed
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_HTTP_RANGE_READ_H_
