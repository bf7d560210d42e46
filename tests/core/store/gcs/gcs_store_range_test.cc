// What GcsStore::Read takes from a range response: only the range asked for
// (Content-Range and Content-Length agreeing with it), only of the generation
// the read is pinned to, and within a total timeout per request that grows
// with its size; a request stopped by that timeout does not keep a read
// retrying for ever. Over a scripted transport and a fake clock.
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/store/gcs/credentials.h"
#include "core/store/gcs/gcs_store.h"
#include "tests/core/store/http/fakes.h"

namespace tensorfs {
namespace {

using ::testing::HasSubstr;
using ::tensorfs::testing::Deliver;
using ::tensorfs::testing::FakeClock;
using ::tensorfs::testing::FakeHttpClient;
using ::tensorfs::testing::FakeReply;
using ::tensorfs::testing::RequestHeader;
using std::chrono::milliseconds;

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) % 251);
  return s;
}

// A well-formed 206 for `req` over `object` (generation `generation`, "" for
// no x-goog-generation), its body cut to `deliver` bytes, then `error`.
FakeHttpClient::Handler Media(std::string object, std::string generation, size_t deliver = std::string::npos,
                              TransportError error = TransportError::kNone) {
  return [=](const HttpRequest& req) {
    uint64_t first = 0, last = 0;
    const std::string range = RequestHeader(req, "Range");
    EXPECT_EQ(std::sscanf(range.c_str(), "bytes=%lu-%lu", &first, &last), 2) << range;
    FakeReply r;
    r.status = 206;
    r.headers["content-range"] =
        "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" + std::to_string(object.size());
    r.headers["content-length"] = std::to_string(last - first + 1);
    if (!generation.empty()) r.headers["x-goog-generation"] = generation;
    r.body = object.substr(first, last - first + 1);
    if (deliver != std::string::npos) r.body.resize(std::min(deliver, r.body.size()));
    r.error = error;
    return Deliver(req, r);
  };
}

class GcsStoreRangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto http = std::make_unique<FakeHttpClient>();
    http_ = http.get();
    GcsOptions options;
    options.bucket = "bkt";
    options.endpoint = "http://fake";
    GcsStore::Dependencies deps;
    deps.http = std::move(http);
    deps.credentials = MakeAnonymousCredentials();
    deps.clock = &clock_;
    deps.jitter = [] { return 1.0; };
    StatusOr<std::unique_ptr<GcsStore>> store = GcsStore::Create(options, std::move(deps));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  Status Read(int64_t generation, uint64_t offset, std::string& buf) {
    return store_->Read(ObjectId{"w", Generation{generation}}, offset, std::as_writable_bytes(std::span(buf)));
  }

  FakeClock clock_;
  FakeHttpClient* http_ = nullptr;
  std::unique_ptr<GcsStore> store_;
};

FakeReply Reply206(std::string content_range, std::string content_length, size_t body_size) {
  FakeReply r;
  r.status = 206;
  r.headers = {{"content-range", std::move(content_range)},
               {"content-length", std::move(content_length)},
               {"x-goog-generation", "7"}};
  r.body = Bytes(body_size);
  return r;
}

TEST_F(GcsStoreRangeTest, AWellFormedRangeResponseIsTaken) {
  const std::string object = Bytes(100);
  http_->Push(Media(object, "7"));
  std::string buf(10, 'z');
  ASSERT_TRUE(Read(7, 5, buf).ok());
  EXPECT_EQ(buf, object.substr(5, 10));
}

TEST_F(GcsStoreRangeTest, ContentLengthOtherThanTheRangeIsRejected) {
  http_->Push(Reply206("bytes 5-14/100", "12", 10));
  std::string buf(10, 'z');
  Status s = Read(7, 5, buf);
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_THAT(s.message(),
              HasSubstr("answered Content-Range bytes 5-14/100 with Content-Length 12 to a request for bytes 5-14 "
                        "(10 bytes)"));
  EXPECT_EQ(buf, std::string(10, 'z'));
}

TEST_F(GcsStoreRangeTest, ContentRangeEndingElsewhereThanAskedIsRejected) {
  http_->Push(Reply206("bytes 5-12/100", "8", 8));
  std::string buf(10, 'z');
  Status s = Read(7, 5, buf);
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("with Content-Range bytes 5-12/100 to a request for bytes 5-14"));
  EXPECT_EQ(buf, std::string(10, 'z'));
}

TEST_F(GcsStoreRangeTest, ContentRangeBeyondItsOwnTotalIsRejected) {
  http_->Push(Reply206("bytes 5-14/10", "10", 10));
  std::string buf(10, 'z');
  Status s = Read(7, 5, buf);
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("with Content-Range bytes 5-14/10 to a request for bytes 5-14"));
}

TEST_F(GcsStoreRangeTest, Http200OfALargerObjectIsRejectedBeforeItsBytes) {
  FakeReply r;
  r.status = 200;
  r.headers = {{"content-length", "100"}, {"x-goog-generation", "7"}};
  r.body = Bytes(100);
  http_->Push(r);
  std::string buf(10, 'z');
  Status s = Read(7, 0, buf);
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_THAT(s.message(),
              HasSubstr("ignored the Range header (HTTP 200 with Content-Length 100 to a request for 10 bytes)"));
  EXPECT_EQ(buf, std::string(10, 'z'));
}

TEST_F(GcsStoreRangeTest, PinnedReadAnsweredWithoutAGenerationIsRejected) {
  http_->Push(Media(Bytes(100), ""));
  std::string buf(10, 'z');
  Status s = Read(7, 5, buf);
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("answered without x-goog-generation, so the bytes cannot be known to be of "
                                     "generation 7"));
  EXPECT_EQ(buf, std::string(10, 'z'));
}

TEST_F(GcsStoreRangeTest, ResumedUnpinnedReadRefusesBytesOfAnotherGeneration) {
  const std::string object = Bytes(100);
  http_->Push(Media(object, "42", 30));  // 30 bytes of generation 42, then a clean close
  http_->Push(Media(object, "43"));      // the rest, of another version
  std::string buf(100, 'z');
  Status s = Read(0, 0, buf);
  EXPECT_EQ(s.code(), ErrorCode::kStale);
  EXPECT_THAT(s.message(), HasSubstr("changed while mounted (generation 42 is gone; the server has generation 43)"));
  EXPECT_EQ(buf.substr(30), std::string(70, 'z'));
}

TEST_F(GcsStoreRangeTest, ResumedUnpinnedReadAnsweredWithoutAGenerationIsRejected) {
  const std::string object = Bytes(100);
  http_->Push(Media(object, "42", 30));
  http_->Push(Media(object, ""));
  std::string buf(100, 'z');
  Status s = Read(0, 0, buf);
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("cannot be known to be of generation 42"));
}

TEST_F(GcsStoreRangeTest, RangeReadTimeoutIsAnAllowancePlusTheBytesAtTheMinimumRate) {
  EXPECT_EQ(RangeReadTimeout(0), milliseconds(30000));
  EXPECT_EQ(RangeReadTimeout(32 << 10), milliseconds(31000));
  EXPECT_EQ(RangeReadTimeout(8 << 20), milliseconds(30000 + 256000));
  EXPECT_EQ(RangeReadTimeout(1000), milliseconds(30000 + 30));  // 1000 bytes at 32768 B/s: 30.5 ms
}

TEST_F(GcsStoreRangeTest, EachRangeRequestCarriesTheTotalTimeoutOfItsSize) {
  const std::string object = Bytes(1 << 20);
  http_->Push(Media(object, "7", 512 << 10));  // half, then a clean close
  http_->Push(Media(object, "7"));
  std::string buf(1 << 20, 'z');
  ASSERT_TRUE(Read(7, 0, buf).ok());
  const std::vector<HttpRequest> requests = http_->requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].total_timeout, RangeReadTimeout(1 << 20));
  EXPECT_EQ(requests[0].total_timeout, milliseconds(30000 + 32000));
  EXPECT_EQ(requests[1].total_timeout, RangeReadTimeout(512 << 10));  // the resumed rest
}

TEST_F(GcsStoreRangeTest, RequestsStoppedByTheirTotalTimeoutDoNotKeepTheReadAlive) {
  // Every request brings 10 bytes and then runs out of time: the bytes are
  // kept, but the read gives up once retry_deadline (120 s) has passed since
  // the first such request, long before the 2000 bytes are complete.
  const std::string object = Bytes(2000);
  http_->SetFallback(Media(object, "7", 10, TransportError::kTimeout));
  std::string buf(2000, 'z');
  Status s = Read(7, 0, buf);
  EXPECT_EQ(s.code(), ErrorCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr("gave up after"));
  const size_t attempts = http_->requests().size();
  EXPECT_LT(attempts, 200u);
  EXPECT_EQ(buf.substr(0, 10 * attempts), object.substr(0, 10 * attempts));  // resumed each time
}

TEST(ParseContentRangeTest, TheRangeMustLieWithinItsTotal) {
  uint64_t a = 0, b = 0;
  EXPECT_TRUE(ParseContentRange("bytes 5-14/15", &a, &b));
  EXPECT_TRUE(ParseContentRange("bytes 5-14/*", &a, &b));
  EXPECT_FALSE(ParseContentRange("bytes 5-14/14", &a, &b));
  EXPECT_FALSE(ParseContentRange("bytes 5-14/abc", &a, &b));
  EXPECT_FALSE(ParseContentRange("bytes 5-14/", &a, &b));
  EXPECT_FALSE(ParseContentRange("bytes 5-14/-1", &a, &b));
}

}  // namespace
}  // namespace tensorfs
