// GcsStore: the ObjectStore over Google Cloud Storage's JSON API.
//
//   Stat  GET {endpoint}/storage/v1/b/{bucket}/o/{name}
//   List  GET {endpoint}/storage/v1/b/{bucket}/o?prefix=&delimiter=&maxResults=1000
//         following nextPageToken to the last page
//   Read  GET {endpoint}/storage/v1/b/{bucket}/o/{name}?alt=media&generation=G
//         with "Range: bytes=a-b"; the body lands directly in the caller's span.
//
// Names given to the store are relative to GcsOptions::prefix. Objects whose
// name ends in '/' (the zero-byte "folder" placeholders consoles create) are
// left out of listings.
//
// Every operation runs under the store's StoreRetries (core/store/http/retry.h),
// over the HttpClient every HTTP store shares: transient failures are
// retried with jittered backoff (each wait at most 2 s, 1 s after a failure to
// connect) until GcsOptions::retry_deadline passes without progress, and a read
// cut short resumes from its first missing byte. The store's requests share one
// EndpointHealth, so when the server comes back the first request through
// wakes the others waiting to reconnect. A read's retry window runs from the
// first failure of its bytes, also across reads that repeat them (RetryWindows:
// the kernel reads the bytes again after an EIO), so EIO comes within
// retry_deadline of that first failure, plus one attempt (at most a stall or a
// connect timeout). Retries are counted by cause in the Metrics. A 401
// refreshes the access token once. Reads are pinned to the generation they are
// given: if that generation is gone the read fails with kStale (kNotFound if the
// object itself was deleted), never returning bytes of another version. Reads
// take the path every HTTP store's do (core/store/http/range_read.h): a range
// response is taken only if it says it is those bytes, Content-Range and
// Content-Length equal to the range asked and x-goog-generation equal to the
// pinned generation; each range request has a total timeout (RangeReadTimeout).
//
// With STORAGE_EMULATOR_HOST set (and no -o endpoint or key_file), requests are
// anonymous, as in Google's client libraries.
//
// Thread-safety: all methods may be called concurrently from many threads; each
// call blocks its thread. The store holds no lock across a request; its shared
// state is the HttpClient and CredentialsProvider (both thread-safe), atomic
// counters and the StoreRetries (leaf locks).
#ifndef TENSORFS_CORE_STORE_GCS_GCS_STORE_H_
#define TENSORFS_CORE_STORE_GCS_GCS_STORE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/metrics/metrics.h"
#include "core/store/gcs/credentials.h"
#include "core/store/gcs/gcs_errors.h"
#include "core/store/gcs/gcs_options.h"
#include "core/store/http/http.h"
#include "core/store/http/range_read.h"
#include "core/store/http/retry.h"
#include "core/store/object_store.h"

namespace tensorfs {

class GcsStore : public ObjectStore {
 public:
  // What a test may substitute; anything left empty gets the real one.
  struct Dependencies {
    std::unique_ptr<HttpClient> http;                  // default: libcurl
    std::unique_ptr<CredentialsProvider> credentials;  // default: MakeCredentials(options, *http, *clock)
    Clock* clock = nullptr;                            // default: SystemClock(); must outlive the store
    JitterSource jitter;                               // default: DefaultJitter()
    Metrics* metrics = nullptr;  // retries are counted here; default: the store's own. Must outlive the store.
  };

  // Validates `options`, resolves the endpoint and finds credentials (which may
  // probe the metadata server). Sends no storage request.
  static StatusOr<std::unique_ptr<GcsStore>> Create(const GcsOptions& options);
  static StatusOr<std::unique_ptr<GcsStore>> Create(const GcsOptions& options, Dependencies deps);

  ~GcsStore() override;

  StatusOr<ObjectInfo> Stat(std::string_view name) override;
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override;
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override;
  std::string Describe() const override;

  // Running totals since creation.
  struct Counters {
    uint64_t requests = 0;        // HTTP requests sent (storage only, not token requests)
    uint64_t retries = 0;         // attempts after the first, over all operations
    uint64_t bytes_received = 0;  // media bytes written into callers' buffers
  };
  Counters counters() const;

  // Where retries are counted (Dependencies::metrics, or the store's own).
  const Metrics& metrics() const { return metrics_; }

  const std::string& endpoint() const { return endpoint_; }
  const CredentialsProvider& credentials() const { return *credentials_; }

 private:
  GcsStore(const GcsOptions& options, std::string endpoint, Dependencies deps);

  std::string ObjectUrl(std::string_view full_name) const;
  RequestContext Context(std::string what, std::string_view full_name) const;
  // Sends `request` with the Authorization header; on a 401 drops the token and
  // sends it once more. Fails only if no token could be had.
  StatusOr<HttpResponse> Send(const HttpRequest& request);
  StatusOr<ObjectInfo> StatFullName(const std::string& full_name);

  const GcsOptions options_;
  const std::string endpoint_;
  Clock& clock_;
  JitterSource jitter_;
  // http_ is declared before credentials_, which calls it, so it is destroyed after.
  std::unique_ptr<HttpClient> http_;
  std::unique_ptr<CredentialsProvider> credentials_;
  std::unique_ptr<Metrics> own_metrics_;  // when none was given
  Metrics& metrics_;
  StoreRetries retries_;
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

// Converts an object resource (JSON API) to ObjectInfo, with the name made
// relative to `prefix` (which the object's name must start with). A missing size
// means 0; "updated" becomes mtime_ns; crc32c is decoded from base64.
StatusOr<ObjectInfo> ParseObjectResource(const nlohmann::json& resource, std::string_view prefix);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_GCS_GCS_STORE_H_
