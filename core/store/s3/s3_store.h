// S3Store: the ObjectStore over the S3 REST API (Amazon S3 and S3-compatible
// stores: MinIO, Cloudflare R2, Ceph RGW), signed with SigV4.
//
//   Stat  HEAD /KEY
//   List  GET /?list-type=2&prefix=P&delimiter=/&max-keys=1000&encoding-type=url
//         following continuation-token to the last page
//   Read  GET /KEY with "Range: bytes=a-b" and "If-Match: "ETAG"": the body
//         lands directly in the caller's span
//
// An object's version is its ETag: ObjectInfo::generation carries it as its
// token (quotes stripped), so a replaced object is a new ObjectId and a read
// pinned to the old one gets 412 from S3, which is kStale (kNotFound when the
// key is gone). A range response is taken only with the read's ETag, as
// RangeRead checks (core/store/http/range_read.h).
//
// Addressing: virtual-hosted (https://BUCKET.s3.REGION.amazonaws.com/KEY, or
// BUCKET.HOST of the endpoint) unless force_path_style, the endpoint is an IP
// address, or the bucket name cannot be a host name; then path-style
// (https://HOST/BUCKET/KEY). Keys are UriEncoded as SigV4 wants ('/' kept).
//
// Region: S3Options::region, else $AWS_REGION, $AWS_DEFAULT_REGION, the
// profile's region, else us-east-1 to begin with. An answer saying the bucket
// is elsewhere (301 or 400 with x-amz-bucket-region or <Region>) switches
// every later request to that region (and its AWS endpoint) and is retried
// there once, with a warning naming the bucket's region.
//
// Every operation runs under the store's StoreRetries (core/store/http/retry.h)
// over the shared HttpClient, as GcsStore's do: SlowDown (503), 500, resets,
// truncated and stalled bodies are retried until retry_deadline passes without
// progress, counted by cause in the Metrics. Temporary credentials that S3 says
// expired are fetched again once.
//
// Thread-safety: all methods may be called concurrently from many threads;
// each call blocks its thread. mu_ guards only the current region and host (a
// leaf lock, never held across a request); the HttpClient, the credentials
// provider and StoreRetries are thread-safe.
#ifndef TENSORFS_CORE_STORE_S3_S3_STORE_H_
#define TENSORFS_CORE_STORE_S3_S3_STORE_H_

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/metrics/metrics.h"
#include "core/store/http/http.h"
#include "core/store/http/retry.h"
#include "core/store/object_store.h"
#include "core/store/s3/aws_credentials.h"
#include "core/store/s3/s3_errors.h"
#include "core/store/s3/s3_options.h"
#include "core/store/s3/s3_xml.h"
#include "core/store/s3/sigv4.h"
#include "core/util/thread_annotations.h"

namespace tensorfs {

class S3Store : public ObjectStore {
 public:
  // What a test may substitute; anything left empty gets the real one.
  struct Dependencies {
    std::unique_ptr<HttpClient> http;                     // default: libcurl
    std::unique_ptr<AwsCredentialsProvider> credentials;  // default: MakeAwsCredentials
    Clock* clock = nullptr;                               // default: SystemClock(); must outlive the store
    JitterSource jitter;                                  // default: DefaultJitter()
    Metrics* metrics = nullptr;  // retries are counted here; default: the store's own. Must outlive the store.
    // The time requests are signed at; default: the system clock.
    std::function<std::chrono::system_clock::time_point()> wall_clock;
  };

  // Resolves the region, endpoint and CA bundle (options, environment,
  // profile), validates them and finds credentials (which may probe instance
  // metadata). Sends no storage request.
  static StatusOr<std::unique_ptr<S3Store>> Create(const S3Options& options);
  static StatusOr<std::unique_ptr<S3Store>> Create(const S3Options& options, Dependencies deps);

  ~S3Store() override;

  StatusOr<ObjectInfo> Stat(std::string_view name) override;
  StatusOr<Listing> List(std::string_view prefix, std::string_view delimiter) override;
  Status Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) override;
  std::string Describe() const override;

  // The region requests are signed for now (it may change once, see above).
  std::string region() const EXCLUDES(mu_);
  // "https://bucket.s3.eu-west-1.amazonaws.com", "http://127.0.0.1:9000/bucket":
  // where the bucket's keys are now.
  std::string BucketUrl() const EXCLUDES(mu_);
  bool path_style() const { return path_style_; }
  const AwsCredentialsProvider& credentials() const { return *credentials_; }
  const Metrics& metrics() const { return metrics_; }

  // Running totals since creation.
  struct Counters {
    uint64_t requests = 0;        // HTTP requests sent (storage only)
    uint64_t retries = 0;         // attempts after the first, over all operations
    uint64_t bytes_received = 0;  // object bytes written into callers' buffers
  };
  Counters counters() const;

 private:
  // Where requests go: the region signed for and the host serving the bucket.
  struct Target {
    std::string region;
    std::string scheme;  // "https" or "http"
    std::string host;    // authority as sent in Host ("bucket.s3.eu-west-1.amazonaws.com", "127.0.0.1:9000")
  };
  // One S3 call.
  struct Call {
    std::string method = "GET";
    std::string key;  // the full key; "" for a bucket-level call
    QueryParams query;
    std::vector<std::pair<std::string, std::string>> headers;  // besides the signed x-amz ones and host
  };

  S3Store(const S3Options& options, std::string region, bool region_given, std::string endpoint, bool aws_endpoint,
          Dependencies deps);

  Target CurrentTarget() const EXCLUDES(mu_);
  Target TargetFor(std::string region) const;
  // Builds, signs and sends `call` into `request` (which may carry a sink).
  // Fetches new credentials once when S3 says they expired, and follows a
  // wrong-region answer once. Fails only when no credentials could be had.
  StatusOr<HttpResponse> Send(const Call& call, HttpRequest request);
  void SwitchRegion(const std::string& from, const std::string& to) EXCLUDES(mu_);
  S3RequestContext Context(std::string what, std::string_view full_name) const;
  StatusOr<ObjectInfo> StatFullName(const std::string& full_name);

  const S3Options options_;
  const bool region_given_;  // configured, not discovered
  const std::string endpoint_;  // scheme://host[:port], no trailing '/'
  const bool aws_endpoint_;     // the endpoint follows the region (AWS's own)
  const bool path_style_;
  Clock& clock_;
  std::function<std::chrono::system_clock::time_point()> wall_clock_;
  // http_ is declared before credentials_, which calls it, so it is destroyed after.
  std::unique_ptr<HttpClient> http_;
  std::unique_ptr<AwsCredentialsProvider> credentials_;
  std::unique_ptr<Metrics> own_metrics_;
  Metrics& metrics_;
  StoreRetries retries_;
  mutable Mutex mu_;
  std::string region_ GUARDED_BY(mu_);
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

// The ETag as a version token: W/ and the surrounding quotes dropped.
std::string NormalizeEtag(std::string_view etag);

// Converts one listed object to ObjectInfo, its name made relative to `prefix`.
StatusOr<ObjectInfo> ToObjectInfo(const ListedObject& object, std::string_view prefix);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_S3_S3_STORE_H_
