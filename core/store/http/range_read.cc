#include "core/store/http/range_read.h"

#include <spdlog/spdlog.h>

#include <charconv>

namespace tensorfs {
namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;

bool ParseUint(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string RangeText(uint64_t first, uint64_t last) {
  return "bytes " + std::to_string(first) + "-" + std::to_string(last);
}

bool ParseContentRange(std::string_view value, uint64_t* first, uint64_t* last) {
  constexpr std::string_view kUnit = "bytes ";
  if (!value.starts_with(kUnit)) return false;
  value.remove_prefix(kUnit.size());
  size_t dash = value.find('-');
  size_t slash = value.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || slash < dash) return false;
  if (!ParseUint(value.substr(0, dash), first) || !ParseUint(value.substr(dash + 1, slash - dash - 1), last) ||
      *first > *last) {
    return false;
  }
  const std::string_view total = value.substr(slash + 1);
  uint64_t size = 0;
  return total == "*" || (ParseUint(total, &size) && size > *last);
}

std::chrono::milliseconds RangeReadTimeout(uint64_t bytes) {
  const uint64_t ms = bytes / kRangeReadMinRate * 1000 + bytes % kRangeReadMinRate * 1000 / kRangeReadMinRate;
  return std::chrono::duration_cast<std::chrono::milliseconds>(kRangeReadAllowance) +
         std::chrono::milliseconds(static_cast<int64_t>(ms));
}

RangeRead::RangeRead(std::string what, std::string object_url, uint64_t offset, std::span<std::byte> out,
                     Clock& clock, Metrics& metrics, std::atomic<uint64_t>& bytes_received, RangeReadHooks hooks)
    : what_(std::move(what)),
      object_url_(std::move(object_url)),
      offset_(offset),
      last_(offset + out.size() - 1),
      out_(out),
      clock_(clock),
      metrics_(metrics),
      bytes_received_(bytes_received),
      hooks_(std::move(hooks)) {}

AttemptResult RangeRead::Attempt() {
  if (done_ > resumed_) {
    metrics_.retries.resumed_bytes.fetch_add(done_ - resumed_, std::memory_order_relaxed);
    resumed_ = done_;
  }
  const uint64_t first = offset_ + done_;
  const uint64_t last = last_;
  const uint64_t wanted = last - first + 1;
  HttpRequest req;
  req.headers = {"Range: bytes=" + std::to_string(first) + "-" + std::to_string(last)};
  req.sink = out_.subspan(done_);
  req.max_body_bytes = kMaxErrorBody;
  req.total_timeout = RangeReadTimeout(wanted);
  Status rejected;  // why a 2xx body was not accepted into the sink
  req.use_sink = [&](long status, const HttpHeaders& headers) {
    if (status != 200 && status != 206) return false;  // an error body, kept for its message
    // A body framed by Content-Length must be exactly the range asked for
    // (a chunked one is held to it by the sink's size and the count below).
    auto cl = headers.find("content-length");
    uint64_t length = 0;
    const bool length_ok = cl == headers.end() || (ParseUint(cl->second, &length) && length == wanted);
    if (status == 206) {
      uint64_t got_first = 0, got_last = 0;
      auto cr = headers.find("content-range");
      if (cr == headers.end() || !ParseContentRange(cr->second, &got_first, &got_last) || got_first != first ||
          got_last != last) {
        rejected = InternalError(what_ + ": the server answered " +
                                 (cr == headers.end() ? std::string("without a Content-Range")
                                                      : "with Content-Range " + cr->second) +
                                 " to a request for " + RangeText(first, last));
        return false;
      }
      if (!length_ok) {
        rejected = InternalError(what_ + ": the server answered Content-Range " + cr->second +
                                 " with Content-Length " + cl->second + " to a request for " +
                                 RangeText(first, last) + " (" + std::to_string(wanted) + " bytes)");
        return false;
      }
    } else if (first != 0) {
      rejected = InternalError(what_ + ": the server ignored the Range header (HTTP 200)");
      return false;
    } else if (!length_ok) {  // HTTP 200: the whole object from byte 0, which must be the range asked for
      rejected = InternalError(what_ + ": the server ignored the Range header (HTTP 200 with Content-Length " +
                               cl->second + " to a request for " + std::to_string(wanted) + " bytes)");
      return false;
    }
    if (Status version = hooks_.check_version(headers); !version.ok()) {
      rejected = std::move(version);
      return false;
    }
    return true;
  };
  const Clock::TimePoint started = clock_.Now();
  StatusOr<HttpResponse> r = hooks_.send(req, first, last);
  if (!r.ok()) return FromCredentialsError(r.status());
  const uint64_t got = r->sink_bytes;
  done_ += got;
  bytes_received_ += got;
  spdlog::debug("GET {} {}: {}, {} bytes in {} ms", object_url_, RangeText(first, last), r->Summary(), got,
                std::chrono::duration_cast<std::chrono::milliseconds>(clock_.Now() - started).count());
  if (!rejected.ok()) return AttemptResult::Permanent(rejected);
  const bool success_status = r->status == 200 || r->status == 206;
  if (success_status && done_ == out_.size()) return AttemptResult::Done();
  if (success_status && r->transport_ok()) {
    return AttemptResult::Transient(
        UnavailableError("body cut short: " + std::to_string(got) + " of " + std::to_string(wanted) +
                         " bytes arrived (" + RangeText(first, last) + ")"),
        got > 0, RetryCause::kTruncated);
  }
  AttemptResult result = hooks_.classify(*r);
  // A request stopped by its total timeout is too slow, however many bytes
  // it brought: it does not restart the retry window, so a server trickling
  // bytes holds a read for at most retry_deadline plus one request.
  result.progress = got > 0 && r->error != TransportError::kTimeout;
  if (result.retryable && got > 0) {
    result.status = Status(result.status.code(), result.status.message() + " after " + std::to_string(got) +
                                                     " of " + std::to_string(wanted) + " bytes");
  }
  return result;
}

}  // namespace tensorfs
