// What GCS answers mean (gcs_errors.h): which statuses are retried, and the
// messages of the permanent ones (the object, the credentials, what to fix).
#include "core/store/gcs/gcs_errors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace tensorfs {
namespace {

using ::testing::HasSubstr;

RequestContext ContextFor(std::string credentials, bool anonymous = false) {
  RequestContext c;
  c.what = "read of bytes 0-99 of gs://b/m.safetensors";
  c.object_url = "gs://b/m.safetensors";
  c.bucket = "b";
  c.credentials = std::move(credentials);
  c.anonymous = anonymous;
  return c;
}

HttpResponse Reply(long code, std::string body = "") {
  HttpResponse r;
  r.status = code;
  r.body = std::move(body);
  return r;
}

class NonRetryableStatusTest : public ::testing::TestWithParam<long> {};
TEST_P(NonRetryableStatusTest, IsPermanent) {
  AttemptResult r = ClassifyHttpResponse(Reply(GetParam()), ContextFor("anonymous access", true));
  EXPECT_FALSE(r.status.ok());
  EXPECT_FALSE(r.retryable);
}
INSTANTIATE_TEST_SUITE_P(Codes, NonRetryableStatusTest, ::testing::Values(400, 401, 403, 404, 412, 416, 409));

class RetryableStatusTest : public ::testing::TestWithParam<long> {};
TEST_P(RetryableStatusTest, IsTransientUnavailable) {
  AttemptResult r = ClassifyHttpResponse(Reply(GetParam()), ContextFor("anonymous access", true));
  EXPECT_TRUE(r.retryable);
  EXPECT_EQ(r.status.code(), ErrorCode::kUnavailable);
  EXPECT_EQ(r.status.message(), "HTTP " + std::to_string(GetParam()));
  EXPECT_EQ(r.cause, RetryCause::kHttpStatus);
  EXPECT_EQ(r.http_status, GetParam());
}
INSTANTIATE_TEST_SUITE_P(Codes, RetryableStatusTest, ::testing::Values(408, 429, 500, 502, 503, 504));

TEST(ClassifyHttpResponseTest, TransportFailures) {
  HttpResponse r;
  r.error = TransportError::kConnectFailed;
  r.error_message = "Failed to connect to 127.0.0.1 port 1: Connection refused";
  AttemptResult a = ClassifyHttpResponse(r, ContextFor("x"));
  EXPECT_TRUE(a.retryable);
  EXPECT_EQ(a.status.code(), ErrorCode::kUnavailable);
  EXPECT_THAT(a.status.message(), HasSubstr("Connection refused"));

  EXPECT_EQ(a.cause, RetryCause::kConnect);

  r.error = TransportError::kConnectionLost;
  EXPECT_TRUE(ClassifyHttpResponse(r, ContextFor("x")).retryable);
  EXPECT_EQ(ClassifyHttpResponse(r, ContextFor("x")).cause, RetryCause::kReset);
  r.error = TransportError::kTruncated;
  EXPECT_TRUE(ClassifyHttpResponse(r, ContextFor("x")).retryable);
  EXPECT_EQ(ClassifyHttpResponse(r, ContextFor("x")).cause, RetryCause::kTruncated);
  r.error = TransportError::kStalled;
  r.status = 206;
  a = ClassifyHttpResponse(r, ContextFor("x"));
  EXPECT_TRUE(a.retryable);
  EXPECT_EQ(a.cause, RetryCause::kStall);
  EXPECT_EQ(a.status.code(), ErrorCode::kDeadlineExceeded);
  r.status = 0;
  r.error = TransportError::kTimeout;
  a = ClassifyHttpResponse(r, ContextFor("x"));
  EXPECT_TRUE(a.retryable);
  EXPECT_EQ(a.status.code(), ErrorCode::kDeadlineExceeded);
  r.error = TransportError::kTls;
  a = ClassifyHttpResponse(r, ContextFor("x"));
  EXPECT_FALSE(a.retryable);
  EXPECT_THAT(a.status.message(), HasSubstr("CA certificates"));
  r.error = TransportError::kSinkOverflow;
  EXPECT_FALSE(ClassifyHttpResponse(r, ContextFor("x")).retryable);
}

TEST(ClassifyHttpResponseTest, ServerMessageIsQuoted) {
  AttemptResult a = ClassifyHttpResponse(Reply(503, R"({"error":{"code":503,"message":"Backend Error"}})"),
                                         ContextFor("x"));
  EXPECT_EQ(a.status.message(), "HTTP 503 (server said: Backend Error)");
}

TEST(ErrorMappingTest, NotFound) {
  AttemptResult a = ClassifyHttpResponse(Reply(404), ContextFor("x"));
  EXPECT_EQ(a.status.code(), ErrorCode::kNotFound);
  EXPECT_EQ(a.status.message(), "gs://b/m.safetensors not found");
}

TEST(ErrorMappingTest, NotFoundOfAListingNamesTheBucket) {
  RequestContext c = ContextFor("x");
  c.is_listing = true;
  AttemptResult a = ClassifyHttpResponse(Reply(404), c);
  EXPECT_EQ(a.status.code(), ErrorCode::kNotFound);
  EXPECT_THAT(a.status.message(), HasSubstr("bucket gs://b not found"));
}

TEST(ErrorMappingTest, PinnedGenerationGoneIsStale) {
  RequestContext c = ContextFor("x");
  c.generation = Generation{17};
  for (long code : {404L, 412L}) {
    AttemptResult a = ClassifyHttpResponse(Reply(code), c);
    EXPECT_EQ(a.status.code(), ErrorCode::kStale);
    EXPECT_EQ(a.status.message(), "gs://b/m.safetensors changed while mounted (generation 17 is gone)");
  }
}

TEST(ErrorMappingTest, ForbiddenNamesTheServiceAccountAndTheRoleToGrant) {
  AttemptResult a = ClassifyHttpResponse(
      Reply(403, R"({"error":{"code":403,"message":"x@y does not have storage.objects.get access"}})"),
      ContextFor("service account key /path/key.json (client_email x@y)"));
  EXPECT_EQ(a.status.code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(a.status.message(), HasSubstr("access denied (HTTP 403) to gs://b/m.safetensors"));
  EXPECT_THAT(a.status.message(), HasSubstr("using service account key /path/key.json (client_email x@y)"));
  EXPECT_THAT(a.status.message(), HasSubstr("does not have storage.objects.get access"));
  EXPECT_THAT(a.status.message(), HasSubstr("grant that account roles/storage.objectViewer on gs://b"));
}

TEST(ErrorMappingTest, UnauthorizedAnonymousSaysToDropAnonymous) {
  AttemptResult a = ClassifyHttpResponse(Reply(401), ContextFor("anonymous access", true));
  EXPECT_EQ(a.status.code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(a.status.message(), HasSubstr("using anonymous access"));
  EXPECT_THAT(a.status.message(), HasSubstr("drop -o anonymous"));
}

TEST(ErrorMappingTest, UnauthorizedWithCredentialsSaysHowToRenew) {
  AttemptResult a = ClassifyHttpResponse(Reply(401), ContextFor("the metadata server at 169.254.169.254"));
  EXPECT_THAT(a.status.message(), HasSubstr("using the metadata server at 169.254.169.254"));
  EXPECT_THAT(a.status.message(), HasSubstr("gcloud auth application-default login"));
}

TEST(ErrorMappingTest, RangeNotSatisfiableIsInvalidArgument) {
  AttemptResult a = ClassifyHttpResponse(Reply(416), ContextFor("x"));
  EXPECT_EQ(a.status.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(a.status.message(), HasSubstr("read of bytes 0-99 of gs://b/m.safetensors"));
}

}  // namespace
}  // namespace tensorfs
