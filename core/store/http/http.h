// HttpClient: the one HTTP/1.1 transport under the object stores (GcsStore,
// S3Store). It performs one HTTP request and reports what happened (a status
// and headers, or a transport failure, and how many body bytes arrived). It
// never retries, never sleeps and never decides what a failure means: the
// retry policy (retry.h) and the stores do that.
//
// MakeCurlHttpClient() is the libcurl implementation: a pool of easy handles,
// checked out per request and returned after, all sharing one CURLSH (connection
// cache, DNS cache, TLS sessions), so connections are reused across threads and
// up to max_connections transfers run at once. A GET with a sink (a range read)
// instead goes on a connection libcurl opens with CURLOPT_CONNECT_ONLY, on which
// the request is written and the response parsed by HttpResponseParser
// (http_parser.h), so that the body is received straight into the sink, not
// copied out of libcurl's buffer; up to max_connections such connections are
// kept as well. A response the parser refuses fails with kMalformed, and its
// connection is closed, as is one with bytes left over after the response. It speaks HTTP/1.1, one transfer
// per connection, as gcsfuse does by default: parallel range reads on separate
// handles gain nothing from HTTP/2's multiplexing and pay for its framing and
// flow control on every byte (and the test server speaks HTTP/1.1, so what
// runs is what is tested). TLS peer and host verification are always on.
//
// Tests substitute a scripted HttpClient (tests/core/store/http/fakes.h).
//
// Thread-safety: HttpClient implementations are safe to call from many threads
// at once; Perform() blocks the caller until the request completes.
#ifndef TENSORFS_CORE_STORE_HTTP_HTTP_H_
#define TENSORFS_CORE_STORE_HTTP_HTTP_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/store/http/client_options.h"
#include "core/store/http/http_parser.h"
#include "core/util/clock.h"
#include "core/util/status.h"

namespace tensorfs {

// What went wrong below HTTP, if anything. Descriptive only; retry.h decides
// which kinds are worth retrying.
enum class TransportError {
  kNone,
  kConnectFailed,   // DNS failure, connection refused, unreachable
  kTimeout,         // connect timeout or overall timeout
  kStalled,         // no byte arrived for stall_timeout (the transfer was dropped)
  kConnectionLost,  // reset, closed early, TLS handshake cut
  kTruncated,       // the connection closed cleanly before the body's Content-Length
  kTls,             // certificate verification or other TLS failure
  kSinkOverflow,    // the server sent more body bytes than the sink can hold
  kBodyTooLarge,    // an in-memory body exceeded HttpRequest::max_body_bytes
  kMalformed,       // the response broke HTTP/1.1 (http_parser.h); its connection was closed
  kOther,           // anything else libcurl reports (a malformed URL, out of memory)
};

std::string_view TransportErrorName(TransportError e);

struct HttpRequest {
  std::string method = "GET";  // "GET", "HEAD", "POST" or "PUT"
  std::string url;
  std::vector<std::string> headers;  // "Name: value"
  std::string body;                  // sent for POST and PUT (with its Content-Length, 0 when empty)

  // When non-empty, a body accepted by `use_sink` is written straight into this
  // span (no intermediate copy) and HttpResponse::sink_bytes counts the bytes
  // that landed, from its start; a body that would overflow it stops the transfer
  // with kSinkOverflow. Any other body goes to HttpResponse::body.
  std::span<std::byte> sink;
  // Decides, once the final status and headers are known, whether the body goes
  // to `sink`. Unset: any 2xx body does.
  std::function<bool(long status, const HttpHeaders& headers)> use_sink;

  // Zero means the client's default (connect) or none (total). The total
  // timeout bounds the whole request, however steadily bytes arrive; a request
  // past it fails with kTimeout.
  std::chrono::milliseconds connect_timeout{0};
  std::chrono::milliseconds total_timeout{0};
  // Bodies kept in memory larger than this stop the transfer with kBodyTooLarge.
  size_t max_body_bytes = size_t{64} << 20;
};

struct HttpResponse {
  TransportError error = TransportError::kNone;
  int curl_code = 0;          // the CURLcode, 0 when none
  std::string error_message;  // libcurl's description of `error`
  long status = 0;            // final HTTP status; 0 if no response line arrived
  HttpHeaders headers;
  std::string body;           // the body when it did not go to the sink
  uint64_t sink_bytes = 0;    // bytes written to the request's sink

  bool transport_ok() const { return error == TransportError::kNone; }
  // A header value, or "" if absent. `name` must be lower case.
  std::string_view Header(std::string_view name) const;
  // One line for messages: "HTTP 503", "connection refused (Failed to connect ...)".
  std::string Summary() const;
};

class HttpClient {
 public:
  virtual ~HttpClient() = default;
  virtual HttpResponse Perform(const HttpRequest& request) = 0;
};

struct CurlHttpOptions {
  int max_connections = 64;  // transfers in flight; further callers wait for a handle
  std::chrono::milliseconds connect_timeout{10000};
  // A transfer that receives no byte for this long is dropped (kStalled); the
  // check runs to the millisecond, not at libcurl's one-second ticks.
  std::chrono::seconds stall_timeout{30};
  std::string user_agent = UserAgentFor(HttpClientOptions{});
  // PEM CA bundle for verifying https peers (CURLOPT_CAINFO); "" = the
  // system's (SystemCaFile(), else libcurl's default). A peer it does not vouch for fails
  // with kTls and a message naming the endpoint and this file.
  std::string ca_file;
  // What the stall and total timeouts of direct body reads are measured on;
  // null: SystemClock(). Must outlive the client.
  Clock* clock = nullptr;
};

// The client settings of a store's HttpClientOptions: connections, timeouts,
// CA file and User-Agent.
CurlHttpOptions CurlOptionsFor(const HttpClientOptions& options);

// The libcurl client. Fails only if libcurl cannot be initialised.
StatusOr<std::unique_ptr<HttpClient>> MakeCurlHttpClient(const CurlHttpOptions& options);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_HTTP_HTTP_H_
