// What an S3 answer that is not a success means: the one place S3 statuses and
// error codes become ErrorCodes, retry decisions and messages a user can act
// on (which bucket or object, which credentials, the S3 error code, what to
// fix). Transport failures are classified as for every store
// (ClassifyTransportFailure in core/store/http/retry.h).
//
// Thread-safety: pure functions.
#ifndef TENSORFS_CORE_STORE_S3_S3_ERRORS_H_
#define TENSORFS_CORE_STORE_S3_S3_ERRORS_H_

#include <optional>
#include <string>
#include <string_view>

#include "core/store/http/http.h"
#include "core/store/http/retry.h"
#include "core/util/types.h"

namespace tensorfs {

// What a request was, for error messages.
struct S3RequestContext {
  std::string what;          // "read of bytes 0-1023 of s3://b/m.safetensors (ETag abc)"
  std::string object_url;    // "s3://b/m.safetensors", or "s3://b/prefix" for listings
  std::string bucket;
  std::string credentials;   // AwsCredentialsProvider::Describe()
  bool anonymous = false;    // the request was not signed
  std::optional<Generation> version;  // set when the read is pinned to an ETag
  bool is_listing = false;
};

// The S3 error code of a response ("NoSuchBucket"), from its XML body; "" if none.
std::string S3ErrorCode(const HttpResponse& response);

// Codes that say the session token expired: worth fetching new credentials once.
bool IsExpiredCredentials(const HttpResponse& response);

// The region a wrong-region answer names (x-amz-bucket-region, or <Region> of
// the error body), or "" when the answer is not about the region.
std::string WrongRegionHint(const HttpResponse& response);

// Maps an answer that is not a success to a Status, retryability and cause:
// transport failures as every store does; 500, 502, 503 (SlowDown), 504, 408,
// 429 and 400 RequestTimeout retried; 403 (AccessDenied, InvalidAccessKeyId,
// SignatureDoesNotMatch, ExpiredToken ...) kPermissionDenied naming the
// credentials and the code; 404 kNotFound (NoSuchBucket says so), or kStale
// for a pinned read; 412 kStale; 416 kInvalidArgument.
AttemptResult ClassifyS3Response(const HttpResponse& response, const S3RequestContext& context);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_S3_S3_ERRORS_H_
