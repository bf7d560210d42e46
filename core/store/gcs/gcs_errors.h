// What a GCS answer that is not a success means: the one place GCS statuses
// become ErrorCodes, retry decisions and messages a user can act on (which
// object, which credentials, what to fix). Transport failures are classified
// as for every store (ClassifyTransportFailure in core/store/http/retry.h).
//
// Retried: HTTP 408, 429, 5xx and the transport failures retry.h lists. Not
// retried: 400, 401 (GcsStore refreshes the token once itself), 403, 404, 412,
// 416 and any other 4xx.
//
// Thread-safety: pure functions.
#ifndef TENSORFS_CORE_STORE_GCS_GCS_ERRORS_H_
#define TENSORFS_CORE_STORE_GCS_GCS_ERRORS_H_

#include <optional>
#include <string>
#include <string_view>

#include "core/store/http/http.h"
#include "core/store/http/retry.h"
#include "core/util/types.h"

namespace tensorfs {

// What a request was, for error messages.
struct RequestContext {
  std::string what;         // "read of bytes 0-1023 of gs://b/m.safetensors (generation 17)"
  std::string object_url;   // "gs://b/m.safetensors", or "gs://b" for bucket-level calls
  std::string bucket;
  std::string credentials;  // CredentialsProvider::Describe()
  bool anonymous = false;   // no credentials were sent
  std::optional<Generation> generation;  // set when the request is pinned to one
  bool is_listing = false;
};

// Maps an HTTP outcome that is not a success to a Status, retryability and
// cause. Permanent errors get a self-contained message naming the object and
// saying what to fix; transient ones a short description of the last error,
// which RetryLoop puts after "<what>: gave up after ...". A response with
// transport_ok() and a 2xx status is a success and must not be passed here.
AttemptResult ClassifyHttpResponse(const HttpResponse& response, const RequestContext& context);

// "error.message" from a JSON error body, or "" if the body is not one.
std::string ServerErrorMessage(std::string_view body);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_GCS_GCS_ERRORS_H_
