#include "core/store/gcs/gcs_errors.h"

#include <nlohmann/json.hpp>

namespace tensorfs {
namespace {

std::string WithServerMessage(std::string text, const HttpResponse& r) {
  std::string m = ServerErrorMessage(r.body);
  if (!m.empty()) text += " (server said: " + m + ")";
  return text;
}

}  // namespace

std::string ServerErrorMessage(std::string_view body) {
  if (body.empty() || body.front() != '{') return "";
  nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  auto it = j.find("error");
  if (it == j.end()) return "";
  if (it->is_object()) {
    auto m = it->find("message");
    if (m != it->end() && m->is_string()) return m->get<std::string>();
  } else if (it->is_string()) {
    // OAuth token endpoints: {"error": "invalid_grant", "error_description": "..."}.
    std::string s = it->get<std::string>();
    auto d = j.find("error_description");
    if (d != j.end() && d->is_string()) s += ": " + d->get<std::string>();
    return s;
  }
  return "";
}

AttemptResult ClassifyHttpResponse(const HttpResponse& r, const RequestContext& c) {
  if (std::optional<AttemptResult> transport = ClassifyTransportFailure(r, c.what, c.object_url)) return *transport;
  const long s = r.status;
  if (IsRetryableHttpStatus(s)) {
    return AttemptResult::Transient(UnavailableError(WithServerMessage("HTTP " + std::to_string(s), r)), false,
                                    RetryCause::kHttpStatus, s);
  }
  switch (s) {
    case 404:
      if (c.generation.has_value()) {
        return AttemptResult::Permanent(StaleError(c.object_url + " changed while mounted (generation " +
                                                   c.generation->ToString() + " is gone)"));
      }
      if (c.is_listing) {
        return AttemptResult::Permanent(NotFoundError(WithServerMessage(
            "bucket gs://" + c.bucket + " not found (HTTP 404); check the bucket name in the URL", r)));
      }
      return AttemptResult::Permanent(NotFoundError(c.object_url + " not found"));
    case 412:
      return AttemptResult::Permanent(StaleError(
          c.object_url + " changed while mounted (generation " +
          (c.generation ? c.generation->ToString() : std::string("?")) + " is gone)"));
    case 401: {
      std::string fix = c.anonymous
                            ? "the bucket is not public: drop -o anonymous to use Application Default "
                              "Credentials, or pass -o key_file=PATH"
                            : "the credentials may be expired, revoked or for another project: run "
                              "'gcloud auth application-default login' or pass a valid service-account "
                              "key with -o key_file=PATH";
      return AttemptResult::Permanent(PermissionDeniedError(WithServerMessage(
          "credentials rejected (HTTP 401) for " + c.object_url + " using " + c.credentials, r) + "; " + fix));
    }
    case 403: {
      std::string fix = c.anonymous
                            ? "the bucket does not allow public reads: drop -o anonymous to use Application "
                              "Default Credentials, or pass -o key_file=PATH"
                            : "grant that account roles/storage.objectViewer on gs://" + c.bucket +
                                  ", or use other credentials (-o key_file=PATH)";
      return AttemptResult::Permanent(PermissionDeniedError(
          WithServerMessage("access denied (HTTP 403) to " + c.object_url + " using " + c.credentials, r) +
          "; " + fix));
    }
    case 400:
      return AttemptResult::Permanent(
          InvalidArgumentError(WithServerMessage(c.what + ": bad request (HTTP 400)", r)));
    case 416:
      return AttemptResult::Permanent(InvalidArgumentError(
          c.what + ": range not satisfiable (HTTP 416); the object is shorter than the read expects"));
    default:
      return AttemptResult::Permanent(
          InternalError(WithServerMessage(c.what + ": unexpected HTTP " + std::to_string(s), r)));
  }
}

}  // namespace tensorfs
