#include "core/store/http/http.h"

#include <curl/curl.h>
#include <poll.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>

#include "core/util/thread_annotations.h"

namespace tensorfs {
namespace {

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// "https://host:port" of a URL, for messages about the peer.
std::string Origin(std::string_view url) {
  size_t scheme = url.find("://");
  size_t path = url.find('/', scheme == std::string_view::npos ? 0 : scheme + 3);
  return std::string(url.substr(0, path));
}

TransportError ClassifyCurlCode(CURLcode code) {
  switch (code) {
    case CURLE_OK:
      return TransportError::kNone;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
      return TransportError::kConnectFailed;
    case CURLE_OPERATION_TIMEDOUT:
      return TransportError::kTimeout;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SSL_CONNECT_ERROR:
      return TransportError::kConnectionLost;
    case CURLE_PARTIAL_FILE:
      return TransportError::kTruncated;
    case CURLE_WEIRD_SERVER_REPLY:
      return TransportError::kMalformed;
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_CRL_BADFILE:
    case CURLE_USE_SSL_FAILED:
      return TransportError::kTls;
    default:
      return TransportError::kOther;
  }
}

// State of one transfer, reached from libcurl's callbacks through userdata.
struct Transfer {
  const HttpRequest* request = nullptr;
  HttpResponse* response = nullptr;
  enum class Body { kUndecided, kSink, kMemory } body = Body::kUndecided;
  TransportError abort_reason = TransportError::kNone;
  // Stall detection: when a byte last arrived, and how long to wait for the next.
  std::chrono::steady_clock::time_point last_activity;
  std::chrono::nanoseconds stall_timeout{0};
  std::chrono::nanoseconds stalled_for{0};  // how long it had been silent when dropped
};

// Runs `easy` to completion on its own multi handle and drops it once no byte
// has arrived for transfer.stall_timeout. libcurl's low-speed check and progress
// callback both run on one-second ticks (and the former averages the speed over
// several seconds), so a 3 s stall would be noticed up to a second or more
// late; here the wait for socket activity ends at the stall deadline itself, so
// the drop comes within milliseconds of it.
CURLcode RunTransfer(CURL* easy, CURLM* multi, Transfer& transfer) {
  if (curl_multi_add_handle(multi, easy) != CURLM_OK) return CURLE_FAILED_INIT;
  CURLcode result = CURLE_OK;
  for (;;) {
    int running = 0;
    if (curl_multi_perform(multi, &running) != CURLM_OK) {
      result = CURLE_FAILED_INIT;
      break;
    }
    if (running == 0) {
      int left = 0;
      while (CURLMsg* m = curl_multi_info_read(multi, &left)) {
        if (m->msg == CURLMSG_DONE && m->easy_handle == easy) result = m->data.result;
      }
      break;
    }
    const auto silent = std::chrono::steady_clock::now() - transfer.last_activity;
    if (silent >= transfer.stall_timeout) {
      transfer.abort_reason = TransportError::kStalled;
      transfer.stalled_for = silent;
      result = CURLE_ABORTED_BY_CALLBACK;
      break;
    }
    // Wake at the stall deadline at the latest (libcurl may ask for sooner).
    const auto until_stall = std::chrono::ceil<std::chrono::milliseconds>(transfer.stall_timeout - silent);
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(until_stall.count(), 1, 1000));
    if (curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr) != CURLM_OK) {
      result = CURLE_FAILED_INIT;
      break;
    }
  }
  // Removing a transfer still running (a stall) closes its connection.
  curl_multi_remove_handle(multi, easy);
  return result;
}

// libcurl has checked the response's syntax and framing by the time it hands
// over a line; this only records the status and fields, as HttpResponseParser
// does (a repeated field's values joined by ", ").
size_t OnHeader(char* data, size_t size, size_t count, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t n = size * count;
  t->last_activity = std::chrono::steady_clock::now();
  std::string_view line = Trim(std::string_view(data, n));
  if (line.starts_with("HTTP/")) {
    // A new status line (after a 100 Continue, say): only the final response's headers count.
    t->response->headers.clear();
    const size_t sp = line.find(' ');
    long status = 0;
    if (sp != std::string_view::npos && line.size() >= sp + 4) {
      const std::string_view code = line.substr(sp + 1, 3);
      if (std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        status = (code[0] - '0') * 100 + (code[1] - '0') * 10 + (code[2] - '0');
      }
    }
    t->response->status = status;
    return n;
  }
  size_t colon = line.find(':');
  if (colon != std::string_view::npos && colon > 0) {
    const std::string value(Trim(line.substr(colon + 1)));
    auto [it, inserted] = t->response->headers.try_emplace(ToLower(Trim(line.substr(0, colon))), value);
    if (!inserted) it->second += ", " + value;
  }
  return n;
}

// Whether the body of `response` (its status and headers known) goes to the request's sink.
bool BodyGoesToSink(const HttpRequest& request, const HttpResponse& response) {
  if (request.sink.empty()) return false;
  return request.use_sink ? request.use_sink(response.status, response.headers)
                          : (response.status >= 200 && response.status < 300);
}

// Appends `n` body bytes to the sink (what fits) or to the in-memory body.
// kSinkOverflow or kBodyTooLarge when they do not fit, else kNone.
TransportError AppendBody(const HttpRequest& request, HttpResponse& response, bool to_sink, const char* data,
                          size_t n) {
  if (to_sink) {
    const size_t take = std::min(request.sink.size() - response.sink_bytes, n);
    std::memcpy(request.sink.data() + response.sink_bytes, data, take);
    response.sink_bytes += take;
    return take < n ? TransportError::kSinkOverflow : TransportError::kNone;
  }
  if (response.body.size() + n > request.max_body_bytes) return TransportError::kBodyTooLarge;
  response.body.append(data, n);
  return TransportError::kNone;
}

// The message for a transfer this client stopped itself: a body that did not
// fit, or a stall (silent for `silent`).
std::string AbortMessage(TransportError error, const HttpRequest& request, const HttpResponse& response,
                         std::chrono::nanoseconds silent, std::chrono::nanoseconds stall_timeout) {
  switch (error) {
    case TransportError::kSinkOverflow:
      return "the server sent more bytes than were requested";
    case TransportError::kBodyTooLarge:
      return "the response body exceeded " + std::to_string(request.max_body_bytes) + " bytes";
    default: {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f", std::chrono::duration<double>(silent).count());
      return std::string("stalled: no bytes for ") + secs + " s (stall_timeout " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(stall_timeout).count()) +
             " s) after " + std::to_string(response.sink_bytes + response.body.size()) + " body bytes";
    }
  }
}

size_t OnBody(char* data, size_t size, size_t count, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t n = size * count;
  t->last_activity = std::chrono::steady_clock::now();
  if (t->body == Transfer::Body::kUndecided) {
    t->body = BodyGoesToSink(*t->request, *t->response) ? Transfer::Body::kSink : Transfer::Body::kMemory;
  }
  t->abort_reason = AppendBody(*t->request, *t->response, t->body == Transfer::Body::kSink, data, n);
  return t->abort_reason == TransportError::kNone ? n : 0;  // 0 aborts the transfer
}

// ------------------------------------------------------------ direct body reads
//
// A GET with a sink (a range read into a chunk's buffer) goes on a connection of
// its own, opened by libcurl with CURLOPT_CONNECT_ONLY: libcurl resolves,
// connects, tunnels through a proxy and speaks TLS, with the same verification
// and shared DNS and TLS-session caches as the other requests. The request is
// written and the response parsed here, so that the body is received straight
// into the sink (recv(2), or SSL_read decrypting into it) instead of through
// libcurl's receive buffer and a write callback: 7% to 11% less CPU per GB
// at datacenter rates (bench/README.md, "Datacenter profile").

// One such connection; `easy` is null until it is connected.
struct DirectConnection {
  CURL* easy = nullptr;
  curl_socket_t fd = CURL_SOCKET_BAD;
  std::string origin;  // "http://host:port" it is connected to
  bool reused = false;  // it has served a request before
  std::unique_ptr<char[]> error_buffer;  // libcurl's CURLOPT_ERRORBUFFER, alive as long as `easy`
};

void CloseDirect(DirectConnection& c) {
  if (c.easy != nullptr) curl_easy_cleanup(c.easy);
  c.easy = nullptr;
  c.fd = CURL_SOCKET_BAD;
  c.reused = false;
}

// True if an idle keep-alive connection was closed (or sent something unasked)
// while it sat in the pool. It is asked for one byte whether or not its socket
// polls readable: bytes the TLS layer already holds (decrypted, or a record
// read whole with the end of the last response) are invisible to poll(2).
// TLS records that carry no data (session tickets) leave it CURLE_AGAIN and
// alive; the end of the stream, an error or stray bytes mean it cannot be used.
bool IdleConnectionIsDead(const DirectConnection& c) {
  char byte;
  size_t n = 0;
  return curl_easy_recv(c.easy, &byte, 1, &n) != CURLE_AGAIN;
}

// One request and its response on a DirectConnection. Keeps the clock for the
// stall and total timeouts, and where the body goes; the response's framing is
// HttpResponseParser's to judge.
class DirectExchange {
 public:
  DirectExchange(DirectConnection& conn, const HttpRequest& request, HttpResponse& response, Clock& clock,
                 std::chrono::nanoseconds stall_timeout, std::optional<Clock::TimePoint> deadline)
      : conn_(conn),
        request_(request),
        response_(response),
        clock_(clock),
        stall_timeout_(stall_timeout),
        deadline_(deadline) {}

  // Sends the request and reads the whole response. Returns whether the
  // connection can carry another request; on failure response.error says why.
  bool Run(std::string_view request_text) {
    last_activity_ = clock_.Now();
    if (!SendAll(request_text)) return false;
    return ReadResponse();
  }

  // Whether any byte of a response arrived (a reused connection found dead
  // before that is retried on a new one).
  bool received_any() const { return received_any_; }

 private:
  void Fail(TransportError error, std::string message, CURLcode code = CURLE_OK) {
    response_.error = error;
    response_.error_message = std::move(message);
    response_.curl_code = static_cast<int>(code);
  }

  void FailCurl(CURLcode code) {
    const char* detail = conn_.error_buffer && conn_.error_buffer[0] != '\0' ? conn_.error_buffer.get()
                                                                           : curl_easy_strerror(code);
    Fail(ClassifyCurlCode(code), detail, code);
  }

  // False (with the error set) once the request's total timeout has passed.
  bool WithinDeadline(Clock::TimePoint now) {
    if (!deadline_ || now < *deadline_) return true;
    Fail(TransportError::kTimeout, "the request's total timeout passed after " +
                                       std::to_string(response_.sink_bytes + response_.body.size()) +
                                       " body bytes");
    return false;
  }

  // Waits for the socket to be ready for `events`. False (with the error set)
  // when the stall timeout or the deadline passes first.
  bool Wait(short events) {
    for (;;) {
      const auto now = clock_.Now();
      const auto silent = now - last_activity_;
      if (!WithinDeadline(now)) return false;
      if (silent >= stall_timeout_) {
        Fail(TransportError::kStalled,
             AbortMessage(TransportError::kStalled, request_, response_, silent, stall_timeout_),
             CURLE_ABORTED_BY_CALLBACK);
        return false;
      }
      auto wait = stall_timeout_ - silent;
      if (deadline_) wait = std::min<std::chrono::nanoseconds>(wait, *deadline_ - now);
      const int ms = static_cast<int>(
          std::clamp<int64_t>(std::chrono::ceil<std::chrono::milliseconds>(wait).count(), 1, 1000));
      pollfd p{conn_.fd, events, 0};
      if (::poll(&p, 1, ms) > 0) return true;
    }
  }

  bool SendAll(std::string_view text) {
    while (!text.empty()) {
      size_t sent = 0;
      const CURLcode rc = curl_easy_send(conn_.easy, text.data(), text.size(), &sent);
      if (rc == CURLE_AGAIN) {
        if (!Wait(POLLOUT)) return false;
        continue;
      }
      if (rc != CURLE_OK) {
        FailCurl(rc);
        return false;
      }
      text.remove_prefix(sent);
    }
    return true;
  }

  // Receives up to `size` bytes into `dst`; 0 means the peer closed the
  // connection. nullopt (with the error set) on failure, or once the total
  // timeout has passed, also while bytes keep coming.
  std::optional<size_t> RecvSome(char* dst, size_t size) {
    for (;;) {
      size_t n = 0;
      const CURLcode rc = curl_easy_recv(conn_.easy, dst, size, &n);
      if (rc == CURLE_OK) {
        if (n > 0) {
          received_any_ = true;
          last_activity_ = clock_.Now();
          if (!WithinDeadline(last_activity_)) return std::nullopt;
        }
        return n;
      }
      if (rc != CURLE_AGAIN) {
        FailCurl(rc);
        return std::nullopt;
      }
      if (!Wait(POLLIN)) return std::nullopt;
    }
  }

  // Receives up to 64 KiB onto the end of buffered_: how many bytes, 0 when the
  // peer closed the connection, nullopt (with the error set) on failure.
  std::optional<size_t> RecvMore() {
    constexpr size_t kStep = 64 << 10;
    const size_t had = buffered_.size();
    buffered_.resize(had + kStep);
    const std::optional<size_t> n = RecvSome(buffered_.data() + had, kStep);
    buffered_.resize(had + n.value_or(0));
    return n;
  }

  // Hands `n` body bytes to the sink or the in-memory body.
  bool Deliver(const char* data, size_t n) { return Check(AppendBody(request_, response_, to_sink_, data, n)); }

  // False, with the error set, unless `error` is kNone.
  bool Check(TransportError error) {
    if (error == TransportError::kNone) return true;
    Fail(error, AbortMessage(error, request_, response_, {}, stall_timeout_));
    return false;
  }

  // Feeds the parser from buffered_ and the connection until the response
  // ends. Body bytes that are not in buffered_ yet go straight into the sink
  // when the body goes there; interim responses, chunk framing and trailers
  // pass through buffered_. True if the connection can be reused: the
  // response allows it and nothing came after it.
  bool ReadResponse() {
    HttpResponseParser parser;
    bool body_placed = false;
    for (;;) {
      buffered_.erase(0, parser.Consume(buffered_));
      if (parser.failed()) {
        Fail(TransportError::kMalformed, parser.error());
        return false;
      }
      if (parser.head_done() && !body_placed) {
        response_.status = parser.status();
        response_.headers = parser.headers();
        to_sink_ = BodyGoesToSink(request_, response_);
        body_placed = true;
      }
      if (parser.done()) return parser.keep_alive() && buffered_.empty();
      std::optional<size_t> n;
      if (const uint64_t wanted = parser.body_wanted(); wanted > 0) {
        if (!buffered_.empty()) {
          const size_t take = static_cast<size_t>(std::min<uint64_t>(wanted, buffered_.size()));
          if (!Deliver(buffered_.data(), take)) return false;
          buffered_.erase(0, take);
          parser.BodyTaken(take);
          continue;
        }
        const uint64_t room = to_sink_ ? request_.sink.size() - response_.sink_bytes : 0;
        if (to_sink_ && room == 0 && parser.framing() != HttpResponseParser::Framing::kUntilClose) {
          return Check(TransportError::kSinkOverflow);  // the framing says more body comes
        }
        if (room > 0) {
          char* dst = reinterpret_cast<char*>(request_.sink.data()) + response_.sink_bytes;
          n = RecvSome(dst, static_cast<size_t>(std::min(wanted, room)));
          if (n && *n > 0) {
            response_.sink_bytes += *n;
            parser.BodyTaken(*n);
            continue;
          }
        } else {
          n = RecvMore();  // a body for memory, or whether one that runs to the close has more
        }
      } else {
        n = RecvMore();  // more of a head, of chunk framing or trailers
      }
      if (!n) return false;
      if (*n > 0) continue;
      // The peer closed the connection.
      if (parser.EndOfStream()) return false;  // a body that ends at the close
      if (!parser.head_done()) {
        Fail(TransportError::kConnectionLost,
             received_any_ ? "the connection closed inside the response headers"
                           : "the server closed the connection without responding",
             received_any_ ? CURLE_RECV_ERROR : CURLE_GOT_NOTHING);
      } else {
        Fail(TransportError::kTruncated, parser.error(), CURLE_PARTIAL_FILE);
      }
      return false;
    }
  }

  DirectConnection& conn_;
  const HttpRequest& request_;
  HttpResponse& response_;
  Clock& clock_;
  const std::chrono::nanoseconds stall_timeout_;
  const std::optional<Clock::TimePoint> deadline_;
  Clock::TimePoint last_activity_;
  std::string buffered_;  // received, not yet parsed or delivered
  bool received_any_ = false;
  bool to_sink_ = false;
};

void GlobalInitOnce() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// The libcurl client.
//
// Connection reuse: each pooled easy handle runs on its own multi handle (see
// RunTransfer), which keeps the pair's connections alive between requests
// (curl_easy_reset does not touch them), and handles are reused LIFO so
// the warmest connection is tried first. The DNS cache and TLS session cache are
// shared through a CURLSH. The connection cache is deliberately not shared:
// libcurl's shared connection cache is not thread-safe when transfers run in
// several threads (curl known bug "A shared connection cache is not
// thread-safe", curl/curl#4915).
//
// Thread-safety: Perform() may be called from any number of threads; at most
// max_connections run at once and the rest wait for a handle. mu_ guards the
// pool; share_locks_ serialise libcurl's access to the shared caches (taken and
// released by libcurl's callbacks, so they are plain std::mutex).
class CurlHttpClient : public HttpClient {
 public:
  explicit CurlHttpClient(const CurlHttpOptions& options)
      : options_(options),
        ca_file_(options.ca_file.empty() ? SystemCaFile() : options.ca_file),
        clock_(options.clock != nullptr ? *options.clock : SystemClock()) {}

  ~CurlHttpClient() override {
    MutexLock lock(mu_);
    TENSORFS_CHECK(idle_.size() == static_cast<size_t>(handles_));  // no Perform() in flight
    TENSORFS_CHECK(direct_idle_.size() == static_cast<size_t>(direct_count_));
    for (Handle& h : idle_) {
      curl_multi_cleanup(h.multi);
      curl_easy_cleanup(h.easy);
    }
    idle_.clear();
    for (DirectConnection& c : direct_idle_) CloseDirect(c);
    direct_idle_.clear();
    if (share_ != nullptr) curl_share_cleanup(share_);
  }

  Status Init() {
    GlobalInitOnce();
    share_ = curl_share_init();
    if (share_ == nullptr) return InternalError("cannot initialise libcurl (curl_share_init failed)");
    curl_share_setopt(share_, CURLSHOPT_LOCKFUNC, &CurlHttpClient::LockShared);
    curl_share_setopt(share_, CURLSHOPT_UNLOCKFUNC, &CurlHttpClient::UnlockShared);
    curl_share_setopt(share_, CURLSHOPT_USERDATA, this);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(share_, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    return OkStatus();
  }

  HttpResponse Perform(const HttpRequest& request) override {
    if (request.method == "GET" && !request.sink.empty()) return PerformDirect(request);
    HttpResponse response;
    Handle handle = Acquire();
    CURL* h = handle.easy;
    if (h == nullptr) {
      response.error = TransportError::kOther;
      response.error_message = "cannot create a libcurl handle (out of memory?)";
      return response;
    }
    Transfer transfer{&request, &response};
    transfer.stall_timeout = options_.stall_timeout;
    char error_buffer[CURL_ERROR_SIZE] = {0};
    curl_slist* headers = nullptr;
    for (const std::string& header : request.headers) headers = curl_slist_append(headers, header.c_str());
    // Small POSTs must not wait for a 100 Continue.
    headers = curl_slist_append(headers, "Expect:");

    SetConnectionOptions(h, request.url, request.connect_timeout);
    // Stalls are detected by RunTransfer, to the millisecond.
    if (request.total_timeout.count() > 0) {
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(request.total_timeout.count()));
    }
    curl_easy_setopt(h, CURLOPT_USERAGENT, options_.user_agent.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (request.method == "POST" || request.method == "PUT") {
      // A body from memory, its Content-Length given (0 for none, as an
      // instance-metadata token PUT sends).
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
      if (request.method == "PUT") curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, "PUT");
    } else if (request.method == "HEAD") {
      curl_easy_setopt(h, CURLOPT_NOBODY, 1L);  // the answer's Content-Length is the object's: no body follows
    } else if (request.method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    }
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, &OnHeader);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &transfer);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &OnBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &transfer);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error_buffer);

    transfer.last_activity = std::chrono::steady_clock::now();
    CURLcode rc = RunTransfer(h, handle.multi, transfer);
    long status = 0;
    if (curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK && status != 0) {
      response.status = status;
    }
    response.curl_code = static_cast<int>(rc);
    if (transfer.abort_reason != TransportError::kNone) {
      response.error = transfer.abort_reason;
      response.error_message =
          AbortMessage(transfer.abort_reason, request, response, transfer.stalled_for, options_.stall_timeout);
    } else if (rc != CURLE_OK) {
      response.error = ClassifyCurlCode(rc);
      response.error_message = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(rc);
      NameCaFile(request.url, response);
    }

    curl_slist_free_all(headers);
    Release(handle);
    return response;
  }

 private:
  // What every handle of this client sets: protocols, TLS verification, TCP
  // options, the receive buffer, the connect timeout.
  void SetConnectionOptions(CURL* h, const std::string& url, std::chrono::milliseconds connect_timeout) {
    curl_easy_setopt(h, CURLOPT_SHARE, share_);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!ca_file_.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, ca_file_.c_str());
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 60L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 20L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    // Also the most one recv(2) of a direct body read takes.
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024L);
    if (connect_timeout.count() <= 0) connect_timeout = options_.connect_timeout;
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout.count()));
  }

  void NameCaFile(const std::string& url, HttpResponse& response) const {
    if (response.error == TransportError::kTls && !options_.ca_file.empty()) {
      response.error_message = "TLS certificate of " + Origin(url) + " not trusted by CA file " +
                               options_.ca_file + ": " + response.error_message;
    }
  }

  // A GET into a sink, on a DirectConnection (see DirectExchange). A reused
  // connection that the server closed while it sat idle is replaced and the
  // request sent again, as libcurl does with its own connections.
  HttpResponse PerformDirect(const HttpRequest& request) {
    std::optional<Clock::TimePoint> deadline;
    if (request.total_timeout.count() > 0) deadline = clock_.Now() + request.total_timeout;
    const std::string origin = Origin(request.url);
    std::string_view target = std::string_view(request.url).substr(origin.size());
    std::string text = "GET " + std::string(target.empty() ? "/" : target) + " HTTP/1.1\r\nHost: " +
                       origin.substr(origin.find("://") + 3) + "\r\nUser-Agent: " + options_.user_agent + "\r\n";
    for (const std::string& header : request.headers) text += header + "\r\n";
    text += "\r\n";

    DirectConnection conn = AcquireDirect(origin);
    HttpResponse response;
    for (int attempt = 0;; ++attempt) {
      response = HttpResponse{};
      if (conn.easy == nullptr && !ConnectDirect(conn, origin, request, deadline, response)) break;
      const bool reused = conn.reused;
      DirectExchange exchange(conn, request, response, clock_, options_.stall_timeout, deadline);
      const bool keep = exchange.Run(text);
      conn.reused = true;
      if (response.transport_ok()) {
        if (!keep) CloseDirect(conn);
        break;
      }
      CloseDirect(conn);
      // Only a connection found closed is replaced: a silent server is the retry policy's to judge.
      if (!(reused && attempt == 0 && response.error == TransportError::kConnectionLost &&
            !exchange.received_any())) {
        break;
      }
    }
    ReleaseDirect(std::move(conn));
    return response;
  }

  // Opens conn to origin (CURLOPT_CONNECT_ONLY). False with response.error set on failure.
  bool ConnectDirect(DirectConnection& conn, const std::string& origin, const HttpRequest& request,
                     std::optional<Clock::TimePoint> deadline, HttpResponse& response) {
    conn.easy = curl_easy_init();
    if (conn.easy == nullptr) {
      response.error = TransportError::kOther;
      response.error_message = "cannot create a libcurl handle (out of memory?)";
      return false;
    }
    conn.origin = origin;
    conn.reused = false;
    conn.error_buffer = std::make_unique<char[]>(CURL_ERROR_SIZE);
    conn.error_buffer[0] = '\0';
    CURL* h = conn.easy;
    SetConnectionOptions(h, origin + "/", request.connect_timeout);
    curl_easy_setopt(h, CURLOPT_CONNECT_ONLY, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPPROXYTUNNEL, 1L);  // through a proxy, a tunnel: requests go as to the origin
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, conn.error_buffer.get());
    if (deadline) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - clock_.Now());
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(left.count(), 1)));
    }
    const CURLcode rc = curl_easy_perform(h);
    curl_socket_t fd = CURL_SOCKET_BAD;
    if (rc == CURLE_OK && curl_easy_getinfo(h, CURLINFO_ACTIVESOCKET, &fd) == CURLE_OK && fd != CURL_SOCKET_BAD) {
      conn.fd = fd;
      return true;
    }
    response.curl_code = static_cast<int>(rc);
    response.error = rc == CURLE_OK ? TransportError::kOther : ClassifyCurlCode(rc);
    response.error_message = conn.error_buffer[0] != '\0' ? conn.error_buffer.get() : curl_easy_strerror(rc);
    NameCaFile(request.url, response);
    CloseDirect(conn);
    return false;
  }

  // An idle connection to origin (tested for life), or an unconnected one. At
  // most max_connections exist; a caller past that waits. An idle one to another
  // origin is closed to make room.
  DirectConnection AcquireDirect(const std::string& origin) EXCLUDES(mu_) {
    std::vector<DirectConnection> dead;
    DirectConnection out;
    {
      MutexLock lock(mu_);
      direct_cv_.Wait(mu_, [&]() REQUIRES(mu_) {
        return !direct_idle_.empty() || direct_count_ < options_.max_connections;
      });
      for (size_t i = direct_idle_.size(); i-- > 0;) {
        if (direct_idle_[i].origin != origin) continue;
        out = std::move(direct_idle_[i]);
        direct_idle_.erase(direct_idle_.begin() + static_cast<ptrdiff_t>(i));
        break;
      }
      if (out.easy == nullptr) {
        if (direct_count_ < options_.max_connections) {
          ++direct_count_;
        } else {  // all idle ones lead elsewhere: the oldest makes room
          dead.push_back(std::move(direct_idle_.front()));
          direct_idle_.erase(direct_idle_.begin());
        }
      }
    }
    for (DirectConnection& c : dead) CloseDirect(c);
    if (out.easy != nullptr && IdleConnectionIsDead(out)) CloseDirect(out);
    return out;
  }

  void ReleaseDirect(DirectConnection conn) EXCLUDES(mu_) {
    {
      MutexLock lock(mu_);
      if (conn.easy != nullptr) {
        direct_idle_.push_back(std::move(conn));
      } else {
        --direct_count_;
      }
    }
    direct_cv_.NotifyOne();
  }

  // An easy handle and the multi handle it runs on. The multi handle holds the
  // connections it opened, so the pair stays together for reuse.
  struct Handle {
    CURL* easy = nullptr;
    CURLM* multi = nullptr;
  };

  // A pooled handle, or a new one; {nullptr, nullptr} if libcurl cannot make one.
  Handle Acquire() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    cv_.Wait(mu_, [&]() REQUIRES(mu_) { return !idle_.empty() || handles_ < options_.max_connections; });
    if (!idle_.empty()) {
      Handle h = idle_.back();
      idle_.pop_back();
      return h;
    }
    Handle h{curl_easy_init(), curl_multi_init()};
    if (h.easy == nullptr || h.multi == nullptr) {
      if (h.easy != nullptr) curl_easy_cleanup(h.easy);
      if (h.multi != nullptr) curl_multi_cleanup(h.multi);
      return Handle{};
    }
    curl_multi_setopt(h.multi, CURLMOPT_MAXCONNECTS, 4L);
    ++handles_;
    return h;
  }

  void Release(Handle h) EXCLUDES(mu_) {
    // Clears options but keeps live connections, the DNS and TLS-session links.
    curl_easy_reset(h.easy);
    {
      MutexLock lock(mu_);
      idle_.push_back(h);
    }
    cv_.NotifyOne();
  }

  static void LockShared(CURL*, curl_lock_data data, curl_lock_access, void* userptr) {
    static_cast<CurlHttpClient*>(userptr)->share_locks_[static_cast<size_t>(data)].lock();
  }
  static void UnlockShared(CURL*, curl_lock_data data, void* userptr) {
    static_cast<CurlHttpClient*>(userptr)->share_locks_[static_cast<size_t>(data)].unlock();
  }

  const CurlHttpOptions options_;
  // What https is verified against: options_.ca_file, else SystemCaFile().
  const std::string ca_file_;
  Clock& clock_;
  CURLSH* share_ = nullptr;
  std::array<std::mutex, CURL_LOCK_DATA_LAST> share_locks_;
  Mutex mu_;
  CondVar cv_;
  std::vector<Handle> idle_ GUARDED_BY(mu_);
  int handles_ GUARDED_BY(mu_) = 0;
  // Connections for direct body reads: idle ones (most recently used last), and
  // how many exist, idle or in use.
  CondVar direct_cv_;
  std::vector<DirectConnection> direct_idle_ GUARDED_BY(mu_);
  int direct_count_ GUARDED_BY(mu_) = 0;
};

}  // namespace

std::string_view TransportErrorName(TransportError e) {
  switch (e) {
    case TransportError::kNone: return "ok";
    case TransportError::kConnectFailed: return "cannot connect";
    case TransportError::kTimeout: return "timed out";
    case TransportError::kStalled: return "stalled";
    case TransportError::kConnectionLost: return "connection lost";
    case TransportError::kTruncated: return "body cut short";
    case TransportError::kTls: return "TLS error";
    case TransportError::kSinkOverflow: return "response longer than requested";
    case TransportError::kBodyTooLarge: return "response body too large";
    case TransportError::kMalformed: return "malformed response";
    case TransportError::kOther: return "transport error";
  }
  return "transport error";
}

std::string_view HttpResponse::Header(std::string_view name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string_view() : std::string_view(it->second);
}

std::string HttpResponse::Summary() const {
  if (error != TransportError::kNone) {
    std::string s(TransportErrorName(error));
    if (!error_message.empty()) s += " (" + error_message + ")";
    return s;
  }
  return "HTTP " + std::to_string(status);
}

CurlHttpOptions CurlOptionsFor(const HttpClientOptions& options) {
  CurlHttpOptions curl;
  curl.max_connections = options.max_connections;
  curl.connect_timeout = options.connect_timeout;
  curl.stall_timeout = options.stall_timeout;
  curl.ca_file = options.ca_file;
  curl.user_agent = UserAgentFor(options);
  return curl;
}

StatusOr<std::unique_ptr<HttpClient>> MakeCurlHttpClient(const CurlHttpOptions& options) {
  if (options.max_connections < 1) return InvalidArgumentError("max_connections must be at least 1");
  auto client = std::make_unique<CurlHttpClient>(options);
  RETURN_IF_ERROR(client->Init());
  return std::unique_ptr<HttpClient>(std::move(client));
}

}  // namespace tensorfs
