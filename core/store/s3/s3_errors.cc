#include "core/store/s3/s3_errors.h"

#include "core/store/s3/s3_xml.h"

namespace tensorfs {
namespace {

std::string WithServerError(std::string text, const HttpResponse& r) {
  std::optional<AwsError> e = ParseAwsError(r.body);
  if (e) {
    text += " (" + e->code;
    if (!e->message.empty()) text += ": " + e->message;
    text += ")";
  }
  return text;
}

std::string Http(long status, const HttpResponse& r) {
  std::string code = S3ErrorCode(r);
  return "HTTP " + std::to_string(status) + (code.empty() ? "" : " " + code);
}

}  // namespace

std::string S3ErrorCode(const HttpResponse& r) {
  std::optional<AwsError> e = ParseAwsError(r.body);
  return e ? e->code : std::string();
}

bool IsExpiredCredentials(const HttpResponse& r) {
  if (!r.transport_ok() || (r.status != 400 && r.status != 403)) return false;
  const std::string code = S3ErrorCode(r);
  return code == "ExpiredToken" || code == "TokenRefreshRequired" || code == "InvalidToken";
}

std::string WrongRegionHint(const HttpResponse& r) {
  if (!r.transport_ok()) return "";
  if (r.status != 301 && r.status != 307 && r.status != 400 && r.status != 403) return "";
  std::optional<AwsError> e = ParseAwsError(r.body);
  const bool about_region = r.status == 301 || r.status == 307 ||
                            (e && (e->code == "AuthorizationHeaderMalformed" || e->code == "PermanentRedirect" ||
                                   e->code == "IllegalLocationConstraintException"));
  if (!about_region) return "";
  if (std::string_view h = r.Header("x-amz-bucket-region"); !h.empty()) return std::string(h);
  return e ? e->region : std::string();
}

AttemptResult ClassifyS3Response(const HttpResponse& r, const S3RequestContext& c) {
  if (std::optional<AttemptResult> transport = ClassifyTransportFailure(r, c.what, c.object_url)) return *transport;
  const long s = r.status;
  const std::string code = S3ErrorCode(r);
  if (IsRetryableHttpStatus(s) || (s == 400 && code == "RequestTimeout")) {
    return AttemptResult::Transient(UnavailableError(WithServerError("HTTP " + std::to_string(s), r)), false,
                                    RetryCause::kHttpStatus, s);
  }
  const std::string bucket_url = "s3://" + c.bucket;
  switch (s) {
    case 404:
      if (code == "NoSuchBucket" || (c.is_listing && code.empty())) {
        return AttemptResult::Permanent(NotFoundError(WithServerError(
            "bucket " + bucket_url + " not found (HTTP 404)", r) + "; check the bucket name in the URL"));
      }
      if (c.version.has_value() && !c.version->token.empty()) {
        return AttemptResult::Permanent(StaleError(c.object_url + " changed while mounted (ETag " +
                                                   c.version->ToString() + " is gone)"));
      }
      return AttemptResult::Permanent(NotFoundError(c.object_url + " not found"));
    case 412:
      return AttemptResult::Permanent(StaleError(
          c.object_url + " changed while mounted (ETag " + (c.version ? c.version->ToString() : std::string("?")) +
          " is gone)"));
    case 301:
    case 307:
      return AttemptResult::Permanent(PermissionDeniedError(WithServerError(
          "bucket " + bucket_url + " answered " + Http(s, r) + " from another region" +
              (r.Header("x-amz-bucket-region").empty() ? std::string()
                                                        : " (" + std::string(r.Header("x-amz-bucket-region")) + ")"),
          r) + "; give its region with -o region=REGION"));
    case 401:
    case 403: {
      std::string fix;
      if (code == "RequestTimeTooSkewed") {
        fix = "this machine's clock is off: synchronise it (timedatectl, chrony)";
      } else if (code == "InvalidAccessKeyId") {
        fix = "the access key ID does not exist in this account or store: check the key, the profile and the "
              "endpoint";
      } else if (code == "SignatureDoesNotMatch") {
        fix = "the secret access key does not match the access key ID: check the secret";
      } else if (code == "ExpiredToken" || code == "InvalidToken" || code == "TokenRefreshRequired") {
        fix = "the session token expired or is invalid: get fresh temporary credentials";
      } else if (c.anonymous) {
        fix = "the bucket does not allow anonymous reads: drop -o no_sign_request to use the AWS credential chain";
      } else {
        fix = "grant those credentials s3:ListBucket on arn:aws:s3:::" + c.bucket +
              " and s3:GetObject on its objects, or use other credentials (-o profile=NAME, AWS_PROFILE)";
      }
      return AttemptResult::Permanent(PermissionDeniedError(
          WithServerError("access denied (" + Http(s, r) + ") to " + c.object_url + " using " + c.credentials, r) +
          "; " + fix));
    }
    case 400:
      return AttemptResult::Permanent(InvalidArgumentError(WithServerError(c.what + ": bad request (HTTP 400)", r)));
    case 416:
      return AttemptResult::Permanent(InvalidArgumentError(
          c.what + ": range not satisfiable (HTTP 416); the object is shorter than the read expects"));
    default:
      return AttemptResult::Permanent(
          InternalError(WithServerError(c.what + ": unexpected HTTP " + std::to_string(s), r)));
  }
}

}  // namespace tensorfs
