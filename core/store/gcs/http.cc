#include "core/store/gcs/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

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

size_t OnHeader(char* data, size_t size, size_t count, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t n = size * count;
  t->last_activity = std::chrono::steady_clock::now();
  std::string_view line = Trim(std::string_view(data, n));
  if (line.starts_with("HTTP/")) {
    // A new status line (after a 100 Continue, say): only the final response's headers count.
    t->response->headers.clear();
    size_t sp = line.find(' ');
    t->response->status = sp == std::string_view::npos ? 0 : std::atol(std::string(line.substr(sp + 1, 3)).c_str());
    return n;
  }
  size_t colon = line.find(':');
  if (colon != std::string_view::npos && colon > 0) {
    t->response->headers[ToLower(Trim(line.substr(0, colon)))] = std::string(Trim(line.substr(colon + 1)));
  }
  return n;
}

size_t OnBody(char* data, size_t size, size_t count, void* userdata) {
  auto* t = static_cast<Transfer*>(userdata);
  const size_t n = size * count;
  t->last_activity = std::chrono::steady_clock::now();
  const HttpRequest& req = *t->request;
  HttpResponse& resp = *t->response;
  if (t->body == Transfer::Body::kUndecided) {
    bool to_sink = false;
    if (!req.sink.empty()) {
      to_sink = req.use_sink ? req.use_sink(resp.status, resp.headers)
                             : (resp.status >= 200 && resp.status < 300);
    }
    t->body = to_sink ? Transfer::Body::kSink : Transfer::Body::kMemory;
  }
  if (t->body == Transfer::Body::kSink) {
    const size_t room = req.sink.size() - resp.sink_bytes;
    const size_t take = std::min(room, n);
    std::memcpy(req.sink.data() + resp.sink_bytes, data, take);
    resp.sink_bytes += take;
    if (take < n) {
      t->abort_reason = TransportError::kSinkOverflow;
      return 0;  // aborts the transfer
    }
    return n;
  }
  if (resp.body.size() + n > req.max_body_bytes) {
    t->abort_reason = TransportError::kBodyTooLarge;
    return 0;
  }
  resp.body.append(data, n);
  return n;
}

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
  explicit CurlHttpClient(const CurlHttpOptions& options) : options_(options) {}

  ~CurlHttpClient() override {
    MutexLock lock(mu_);
    TENSORFS_CHECK(idle_.size() == static_cast<size_t>(handles_));  // no Perform() in flight
    for (Handle& h : idle_) {
      curl_multi_cleanup(h.multi);
      curl_easy_cleanup(h.easy);
    }
    idle_.clear();
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

    curl_easy_setopt(h, CURLOPT_SHARE, share_);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_URL, request.url.c_str());
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, static_cast<long>(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_1_1));
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (!options_.ca_file.empty()) curl_easy_setopt(h, CURLOPT_CAINFO, options_.ca_file.c_str());
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 60L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 20L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_BUFFERSIZE, 512L * 1024L);
    const auto connect_timeout =
        request.connect_timeout.count() > 0 ? request.connect_timeout : options_.connect_timeout;
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(connect_timeout.count()));
    // Stalls are detected by RunTransfer, to the millisecond.
    if (request.total_timeout.count() > 0) {
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(request.total_timeout.count()));
    }
    curl_easy_setopt(h, CURLOPT_USERAGENT, options_.user_agent.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (request.method == "POST") {
      curl_easy_setopt(h, CURLOPT_POST, 1L);
      curl_easy_setopt(h, CURLOPT_POSTFIELDS, request.body.data());
      curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
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
      switch (transfer.abort_reason) {
        case TransportError::kSinkOverflow:
          response.error_message = "the server sent more bytes than were requested";
          break;
        case TransportError::kBodyTooLarge:
          response.error_message =
              "the response body exceeded " + std::to_string(request.max_body_bytes) + " bytes";
          break;
        default: {
          char silent[32];
          std::snprintf(silent, sizeof silent, "%.1f", std::chrono::duration<double>(transfer.stalled_for).count());
          response.error_message = std::string("stalled: no bytes for ") + silent + " s (stall_timeout " +
                                   std::to_string(options_.stall_timeout.count()) + " s) after " +
                                   std::to_string(response.sink_bytes + response.body.size()) + " body bytes";
          break;
        }
      }
    } else if (rc != CURLE_OK) {
      response.error = ClassifyCurlCode(rc);
      response.error_message = error_buffer[0] != '\0' ? error_buffer : curl_easy_strerror(rc);
      if (response.error == TransportError::kTls && !options_.ca_file.empty()) {
        response.error_message = "TLS certificate of " + Origin(request.url) + " not trusted by CA file " +
                                 options_.ca_file + ": " + response.error_message;
      }
    }

    curl_slist_free_all(headers);
    Release(handle);
    return response;
  }

 private:
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
  CURLSH* share_ = nullptr;
  std::array<std::mutex, CURL_LOCK_DATA_LAST> share_locks_;
  Mutex mu_;
  CondVar cv_;
  std::vector<Handle> idle_ GUARDED_BY(mu_);
  int handles_ GUARDED_BY(mu_) = 0;
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

StatusOr<std::unique_ptr<HttpClient>> MakeCurlHttpClient(const CurlHttpOptions& options) {
  if (options.max_connections < 1) return InvalidArgumentError("max_connections must be at least 1");
  auto client = std::make_unique<CurlHttpClient>(options);
  RETURN_IF_ERROR(client->Init());
  return std::unique_ptr<HttpClient>(std::move(client));
}

}  // namespace tensorfs
