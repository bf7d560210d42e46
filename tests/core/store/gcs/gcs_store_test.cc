// GcsStore over a scripted transport: request shapes, resumed reads, retries,
// token refresh on 401, generation pinning and listing pagination, all without
// network or real sleeps.
#include "core/store/gcs/gcs_store.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/core/store/http/fakes.h"
#include "tests/core/store/http/scoped_env.h"

namespace tensorfs {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::tensorfs::testing::Deliver;
using ::tensorfs::testing::FakeClock;
using ::tensorfs::testing::FakeHttpClient;
using ::tensorfs::testing::FakeReply;
using ::tensorfs::testing::RequestHeader;
using std::chrono::milliseconds;

// Hands out "tok-N"; Invalidate() moves to the next N.
class FakeCredentials : public CredentialsProvider {
 public:
  StatusOr<std::string> AuthorizationHeader() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (!errors_.empty()) {
      Status s = errors_.front();
      errors_.pop_front();
      return s;
    }
    return "Authorization: Bearer tok-" + std::to_string(token_);
  }
  std::string Describe() const override { return "service account key /k.json (client_email x@y)"; }
  void Invalidate() override EXCLUDES(mu_) {
    MutexLock lock(mu_);
    ++token_;
    ++invalidations_;
  }
  void FailNext(Status s) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    errors_.push_back(std::move(s));
  }
  int invalidations() const EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return invalidations_;
  }

 private:
  mutable Mutex mu_;
  int token_ GUARDED_BY(mu_) = 1;
  int invalidations_ GUARDED_BY(mu_) = 0;
  std::deque<Status> errors_ GUARDED_BY(mu_);
};

std::string Bytes(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + 7) % 251);
  return s;
}

// A media reply for `req` over `object`: 206 with the requested range, cut to
// `deliver` bytes (npos: all), then `error`.
FakeHttpClient::Handler Media(std::string object, int64_t generation, size_t deliver = std::string::npos,
                              TransportError error = TransportError::kNone) {
  return [=](const HttpRequest& req) {
    std::string range = RequestHeader(req, "Range");
    uint64_t first = 0, last = 0;
    EXPECT_EQ(std::sscanf(range.c_str(), "bytes=%lu-%lu", &first, &last), 2) << range;
    FakeReply r;
    r.status = 206;
    r.headers["content-range"] =
        "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" + std::to_string(object.size());
    r.headers["x-goog-generation"] = std::to_string(generation);
    r.body = object.substr(first, last - first + 1);
    if (deliver != std::string::npos) r.body.resize(std::min(deliver, r.body.size()));
    r.error = error;
    if (error != TransportError::kNone) r.error_message = "Recv failure: Connection reset by peer";
    return Deliver(req, r);
  };
}

FakeReply Json(long status, const nlohmann::json& j) {
  FakeReply r;
  r.status = status;
  r.body = j.dump();
  return r;
}

FakeReply ErrorReply(long status) {
  return Json(status, {{"error", {{"code", status}, {"message", "scripted " + std::to_string(status)}}}});
}

class GcsStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { MakeStore(); }

  void MakeStore(std::chrono::seconds retry_deadline = std::chrono::seconds(120), double jitter = 1.0) {
    auto http = std::make_unique<FakeHttpClient>();
    auto creds = std::make_unique<FakeCredentials>();
    http_ = http.get();
    creds_ = creds.get();
    GcsOptions options;
    options.bucket = "bkt";
    options.prefix = "models/";
    options.endpoint = "http://fake";
    options.retry_deadline = retry_deadline;
    GcsStore::Dependencies deps;
    deps.http = std::move(http);
    deps.credentials = std::move(creds);
    deps.clock = &clock_;
    deps.jitter = [jitter] { return jitter; };
    StatusOr<std::unique_ptr<GcsStore>> store = GcsStore::Create(options, std::move(deps));
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    store_ = std::move(store).value();
  }

  std::vector<std::string> Ranges() const {
    std::vector<std::string> out;
    for (const HttpRequest& r : http_->requests()) out.push_back(RequestHeader(r, "Range"));
    return out;
  }

  FakeClock clock_;
  FakeHttpClient* http_ = nullptr;
  FakeCredentials* creds_ = nullptr;
  std::unique_ptr<GcsStore> store_;
};

TEST_F(GcsStoreTest, DescribeIsTheGsUrl) { EXPECT_EQ(store_->Describe(), "gs://bkt/models"); }

TEST_F(GcsStoreTest, ReadSendsAPinnedRangedMediaRequest) {
  const std::string object = Bytes(100);
  http_->Push(Media(object, 7));
  std::string buf(10, '\0');
  Status s = store_->Read(ObjectId{"w x/#1.bin", Generation{7}}, 10, std::as_writable_bytes(std::span(buf)));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(buf, object.substr(10, 10));
  ASSERT_EQ(http_->requests().size(), 1u);
  const HttpRequest r = http_->requests()[0];
  EXPECT_EQ(r.url, "http://fake/storage/v1/b/bkt/o/models%2Fw%20x%2F%231.bin?alt=media&generation=7");
  EXPECT_EQ(RequestHeader(r, "Range"), "bytes=10-19");
  EXPECT_EQ(RequestHeader(r, "Authorization"), "Bearer tok-1");
}

TEST_F(GcsStoreTest, EmptyReadSendsNothing) {
  std::span<std::byte> none;
  EXPECT_TRUE(store_->Read(ObjectId{"w", Generation{7}}, 5, none).ok());
  EXPECT_TRUE(http_->requests().empty());
}

TEST_F(GcsStoreTest, CutShortBodyAndResetResumeFromTheFirstMissingByte) {
  const std::string object = Bytes(1000);
  http_->Push(Media(object, 7, 300));                                    // clean EOF after 300 bytes
  http_->Push(Media(object, 7, 200, TransportError::kConnectionLost));  // reset after 200 more
  http_->Push(Media(object, 7));
  std::string buf(800, '\0');
  Status s = store_->Read(ObjectId{"w", Generation{7}}, 100, std::as_writable_bytes(std::span(buf)));
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(buf, object.substr(100, 800));
  EXPECT_THAT(Ranges(), ElementsAre("bytes=100-899", "bytes=400-899", "bytes=600-899"));
  // Both failed attempts made progress, so the backoff restarted each time.
  EXPECT_THAT(clock_.sleeps(), ElementsAre(milliseconds(100), milliseconds(100)));
  EXPECT_EQ(store_->counters().bytes_received, 800u);
  EXPECT_EQ(store_->counters().retries, 2u);
  EXPECT_EQ(store_->counters().requests, 3u);
}

TEST_F(GcsStoreTest, UnpinnedReadIsPinnedToTheFirstGenerationSeenWhenResumed) {
  const std::string object = Bytes(100);
  http_->Push(Media(object, 42, 30));
  http_->Push(Media(object, 42));
  std::string buf(100, '\0');
  ASSERT_TRUE(store_->Read(ObjectId{"w", Generation{0}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  EXPECT_EQ(buf, object);
  ASSERT_EQ(http_->requests().size(), 2u);
  EXPECT_EQ(http_->requests()[0].url, "http://fake/storage/v1/b/bkt/o/models%2Fw?alt=media");
  EXPECT_EQ(http_->requests()[1].url, "http://fake/storage/v1/b/bkt/o/models%2Fw?alt=media&generation=42");
  EXPECT_EQ(RequestHeader(http_->requests()[1], "Range"), "bytes=30-99");
}

TEST_F(GcsStoreTest, TransientStatusesAreRetriedWithBackoff) {
  const std::string object = Bytes(50);
  http_->Push(ErrorReply(503));
  http_->Push(ErrorReply(429));
  http_->Push(ErrorReply(500));
  http_->Push(Media(object, 7));
  std::string buf(50, '\0');
  ASSERT_TRUE(store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  EXPECT_EQ(buf, object);
  EXPECT_THAT(clock_.sleeps(), ElementsAre(milliseconds(100), milliseconds(200), milliseconds(400)));
  EXPECT_THAT(Ranges(), ElementsAre("bytes=0-49", "bytes=0-49", "bytes=0-49", "bytes=0-49"));
}

TEST_F(GcsStoreTest, PermanentUnavailableGivesUpAtTheDeadlineNamingObjectAndRange) {
  MakeStore(std::chrono::seconds(2));
  http_->SetFallback([](const HttpRequest& req) { return Deliver(req, ErrorReply(503)); });
  std::string buf(10, '\0');
  Status s = store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), ErrorCode::kUnavailable);
  // Sleeps 0.1, 0.2, 0.4, 0.8 (1.5 s); the next (1.6 s) would pass 2 s.
  EXPECT_EQ(s.message(),
            "read of bytes 0-9 of gs://bkt/models/w (generation 7): gave up after 5 attempts over 1.5 s: "
            "HTTP 503 (server said: scripted 503)");
}

TEST_F(GcsStoreTest, RetriesAreCountedByCauseWithTheBytesKept) {
  const std::string object = Bytes(100);
  http_->Push(ErrorReply(503));
  http_->Push(ErrorReply(429));
  http_->Push(FakeReply{.error = TransportError::kConnectFailed, .error_message = "Connection refused"});
  http_->Push(Media(object, 7, 10, TransportError::kConnectionLost));  // 10 bytes, then a reset
  http_->Push(Media(object, 7, 20));                                   // 20 more, then a clean close
  http_->Push(Media(object, 7, 5, TransportError::kStalled));          // 5 more, then silence
  http_->Push(Media(object, 7));
  std::string buf(100, '\0');
  ASSERT_TRUE(store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  EXPECT_EQ(buf, object);
  const RetryCounters& retries = store_->metrics().retries;
  EXPECT_EQ(retries.ByCauseJson(), nlohmann::json({{"http_503", 1},
                                                   {"http_429", 1},
                                                   {"connect", 1},
                                                   {"reset", 1},
                                                   {"truncated", 1},
                                                   {"stall", 1}}));
  EXPECT_EQ(retries.total(), 6u);
  EXPECT_EQ(retries.resumed_bytes.load(), 35u);
  EXPECT_EQ(retries.exhausted.load(), 0u);
  EXPECT_EQ(store_->counters().retries, 6u);
}

TEST_F(GcsStoreTest, ARepeatedReadContinuesTheRetryWindowOfItsFirstFailure) {
  MakeStore(std::chrono::seconds(2));
  http_->SetFallback([](const HttpRequest& req) { return Deliver(req, ErrorReply(503)); });
  std::string buf(4096, '\0');
  auto bytes = std::as_writable_bytes(std::span(buf));
  ASSERT_FALSE(store_->Read(ObjectId{"w", Generation{7}}, 0, bytes).ok());
  const size_t first_read_requests = http_->requests().size();
  EXPECT_EQ(first_read_requests, 5u);
  // What the kernel does after an EIO: read (part of) the same bytes again.
  // The first read stopped at 1.5 s (a 1.6 s wait would have passed 2 s); this
  // one has the 0.5 s left of the first failure's window, not 2 s of its own.
  Status again = store_->Read(ObjectId{"w", Generation{7}}, 1024, bytes.subspan(0, 1024));
  EXPECT_EQ(again.code(), ErrorCode::kUnavailable);
  EXPECT_THAT(again.message(),
              HasSubstr("gave up after 3 attempts over 0.3 s (1.8 s since these bytes first failed)"));
  EXPECT_EQ(http_->requests().size(), first_read_requests + 3);
  EXPECT_EQ(store_->metrics().retries.exhausted.load(), 2u);
}

TEST_F(GcsStoreTest, AFailureNotRepeatedForTenSecondsIsForgotten) {
  MakeStore(std::chrono::seconds(2));
  http_->SetFallback([](const HttpRequest& req) { return Deliver(req, ErrorReply(503)); });
  std::string buf(10, '\0');
  ASSERT_FALSE(store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  clock_.Advance(std::chrono::seconds(11));
  ASSERT_FALSE(store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  EXPECT_EQ(http_->requests().size(), 10u) << "a full window again";
}

TEST_F(GcsStoreTest, ASuccessfulReadForgetsEarlierFailuresOfItsBytes) {
  MakeStore(std::chrono::seconds(2));
  const std::string object = Bytes(10);
  http_->SetFallback([](const HttpRequest& req) { return Deliver(req, ErrorReply(503)); });
  std::string buf(10, '\0');
  ASSERT_FALSE(store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  http_->Push(Media(object, 7));
  ASSERT_TRUE(store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  ASSERT_FALSE(store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  EXPECT_EQ(http_->requests().size(), 11u) << "5 + 1 + a full window of 5";
}

TEST_F(GcsStoreTest, RetriesCountIntoTheMetricsGiven) {
  Metrics metrics;
  auto http = std::make_unique<FakeHttpClient>();
  http->Push(ErrorReply(503));
  http->Push(Json(200, {{"name", "models/w"}, {"size", "5"}, {"generation", "3"}}));
  GcsOptions options;
  options.bucket = "bkt";
  options.prefix = "models/";
  options.endpoint = "http://fake";
  GcsStore::Dependencies deps;
  deps.http = std::move(http);
  deps.credentials = std::make_unique<FakeCredentials>();
  deps.clock = &clock_;
  deps.metrics = &metrics;
  auto store = GcsStore::Create(options, std::move(deps));
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE((*store)->Stat("w").ok());
  EXPECT_EQ(metrics.retries.by_http_status[503].load(), 1u);
  EXPECT_EQ(metrics.ToJson()["retries"]["by_cause"], nlohmann::json({{"http_503", 1}}));
}

TEST_F(GcsStoreTest, NonRetryableStatusIsNotRetried) {
  http_->Push(ErrorReply(403));
  std::string buf(10, '\0');
  Status s = store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr("using service account key /k.json (client_email x@y)"));
  EXPECT_EQ(http_->requests().size(), 1u);
  EXPECT_TRUE(clock_.sleeps().empty());
}

TEST_F(GcsStoreTest, UnauthorizedRefreshesTheTokenOnceAndRetries) {
  const std::string object = Bytes(20);
  http_->Push(ErrorReply(401));
  http_->Push(Media(object, 7));
  std::string buf(20, '\0');
  ASSERT_TRUE(store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf))).ok());
  ASSERT_EQ(http_->requests().size(), 2u);
  EXPECT_EQ(RequestHeader(http_->requests()[0], "Authorization"), "Bearer tok-1");
  EXPECT_EQ(RequestHeader(http_->requests()[1], "Authorization"), "Bearer tok-2");
  EXPECT_EQ(creds_->invalidations(), 1);
  EXPECT_TRUE(clock_.sleeps().empty());
}

TEST_F(GcsStoreTest, UnauthorizedTwiceIsPermissionDenied) {
  http_->Push(ErrorReply(401));
  http_->Push(ErrorReply(401));
  StatusOr<ObjectInfo> info = store_->Stat("w");
  EXPECT_EQ(info.status().code(), ErrorCode::kPermissionDenied);
  EXPECT_THAT(info.status().message(), HasSubstr("credentials rejected (HTTP 401) for gs://bkt/models/w"));
  EXPECT_EQ(http_->requests().size(), 2u);
}

TEST_F(GcsStoreTest, CredentialsOutageIsRetried) {
  creds_->FailNext(UnavailableError("getting an access token: connection refused"));
  http_->Push(Json(200, {{"name", "models/w"}, {"size", "5"}, {"generation", "3"}}));
  StatusOr<ObjectInfo> info = store_->Stat("w");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(clock_.sleeps().size(), 1u);
}

TEST_F(GcsStoreTest, GenerationHeaderMismatchIsStaleAndWritesNothing) {
  const std::string object = Bytes(20);
  http_->Push(Media(object, 8));
  http_->Push(Json(200, {{"name", "models/w"}, {"size", "20"}, {"generation", "8"}}));  // the follow-up stat
  std::string buf(20, 'z');
  Status s = store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), ErrorCode::kStale);
  EXPECT_THAT(s.message(), HasSubstr("gs://bkt/models/w changed while mounted (generation 7 is gone"));
  EXPECT_EQ(buf, std::string(20, 'z'));
}

TEST_F(GcsStoreTest, GoneGenerationOfAReplacedObjectIsStale) {
  http_->Push(ErrorReply(404));
  http_->Push(Json(200, {{"name", "models/w"}, {"size", "20"}, {"generation", "9"}}));
  std::string buf(20, '\0');
  Status s = store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), ErrorCode::kStale);
  EXPECT_THAT(s.message(), HasSubstr("changed while mounted (generation 7 is gone; now generation 9)"));
}

TEST_F(GcsStoreTest, GoneGenerationOfADeletedObjectIsNotFound) {
  http_->Push(ErrorReply(404));
  http_->Push(ErrorReply(404));
  std::string buf(20, '\0');
  Status s = store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), ErrorCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("gs://bkt/models/w was deleted while mounted (generation 7 is gone)"));
}

TEST_F(GcsStoreTest, WrongContentRangeIsRejected) {
  http_->Push(FakeReply{.status = 206, .headers = {{"content-range", "bytes 0-9/100"}}, .body = Bytes(10)});
  std::string buf(10, 'z');
  Status s = store_->Read(ObjectId{"w", Generation{7}}, 5, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("Content-Range bytes 0-9/100 to a request for bytes 5-14"));
  EXPECT_EQ(buf, std::string(10, 'z'));
}

TEST_F(GcsStoreTest, IgnoredRangeHeaderIsRejected) {
  http_->Push(FakeReply{.status = 200, .body = Bytes(100)});
  std::string buf(10, '\0');
  Status s = store_->Read(ObjectId{"w", Generation{7}}, 5, std::as_writable_bytes(std::span(buf)));
  EXPECT_EQ(s.code(), ErrorCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("ignored the Range header"));
}

TEST_F(GcsStoreTest, StatParsesTheObjectResource) {
  http_->Push(Json(200, {{"name", "models/sub/w.safetensors"},
                         {"size", "123456789012"},
                         {"generation", "1700000000000000001"},
                         {"updated", "2024-05-01T12:34:56.789Z"},
                         {"crc32c", "yZRlqg=="},
                         {"md5Hash", "XrY7u+Ae7tCTyyK7j1rNww=="}}));
  StatusOr<ObjectInfo> info = store_->Stat("sub/w.safetensors");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->name, "sub/w.safetensors");
  EXPECT_EQ(info->size, 123456789012u);
  EXPECT_EQ(info->generation.value, 1700000000000000001);
  EXPECT_EQ(info->mtime_ns, 1714566896789000000);
  EXPECT_EQ(info->crc32c, std::optional<uint32_t>(0xC99465AAu));
  EXPECT_EQ(info->md5_base64, "XrY7u+Ae7tCTyyK7j1rNww==");
  EXPECT_THAT(http_->requests()[0].url,
              ::testing::StartsWith("http://fake/storage/v1/b/bkt/o/models%2Fsub%2Fw.safetensors?fields="));
}

TEST_F(GcsStoreTest, StatWithoutSizeMeansZero) {
  http_->Push(Json(200, {{"name", "models/empty"}, {"generation", "4"}}));
  StatusOr<ObjectInfo> info = store_->Stat("empty");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->size, 0u);
}

TEST_F(GcsStoreTest, StatOfAMissingObjectIsNotFound) {
  http_->Push(ErrorReply(404));
  StatusOr<ObjectInfo> info = store_->Stat("missing");
  EXPECT_EQ(info.status().code(), ErrorCode::kNotFound);
  EXPECT_EQ(info.status().message(), "gs://bkt/models/missing not found");
}

TEST_F(GcsStoreTest, ListFollowsPagesAndStripsTheStorePrefix) {
  http_->Push(Json(200, {{"items",
                          {{{"name", "models/a"}, {"size", "1"}, {"generation", "1"}},
                           {{"name", "models/b"}, {"size", "2"}, {"generation", "2"}}}},
                         {"prefixes", {"models/sub/"}},
                         {"nextPageToken", "t/1+"}}));
  http_->Push(Json(200, {{"items",
                          {{{"name", "models/c"}, {"size", "3"}, {"generation", "3"}},
                           {{"name", "models/dir/"}, {"size", "0"}, {"generation", "4"}}}},
                         {"prefixes", {"models/sub/", "models/z/"}}}));
  StatusOr<Listing> l = store_->List("", "/");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  std::vector<std::string> names;
  for (const ObjectInfo& o : l->objects) names.push_back(o.name);
  EXPECT_THAT(names, ElementsAre("a", "b", "c"));  // the "dir/" placeholder is left out
  EXPECT_THAT(l->prefixes, ElementsAre("sub/", "z/"));
  ASSERT_EQ(http_->requests().size(), 2u);
  const std::string first = http_->requests()[0].url;
  const std::string second = http_->requests()[1].url;
  EXPECT_THAT(first, ::testing::StartsWith("http://fake/storage/v1/b/bkt/o?prefix=models%2F&maxResults=1000"));
  EXPECT_THAT(first, HasSubstr("&delimiter=%2F"));
  EXPECT_THAT(first, ::testing::Not(HasSubstr("pageToken")));
  EXPECT_THAT(second, HasSubstr("&pageToken=t%2F1%2B"));
}

TEST_F(GcsStoreTest, ListEncodesOddPrefixes) {
  http_->Push(Json(200, nlohmann::json::object()));
  StatusOr<Listing> l = store_->List("a b/#?%+&=\xC3\xA9/", "");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_TRUE(l->objects.empty());
  EXPECT_THAT(http_->requests()[0].url, HasSubstr("?prefix=models%2Fa%20b%2F%23%3F%25%2B%26%3D%C3%A9%2F&"));
  EXPECT_THAT(http_->requests()[0].url, ::testing::Not(HasSubstr("delimiter")));
}

TEST_F(GcsStoreTest, ListPageIsRetriedWithItsToken) {
  http_->Push(Json(200, {{"items", {{{"name", "models/a"}, {"generation", "1"}}}}, {"nextPageToken", "p2"}}));
  http_->Push(ErrorReply(503));
  http_->Push(Json(200, {{"items", {{{"name", "models/b"}, {"generation", "1"}}}}}));
  StatusOr<Listing> l = store_->List("", "");
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_EQ(l->objects.size(), 2u);
  EXPECT_THAT(http_->requests()[2].url, HasSubstr("pageToken=p2"));
}

TEST_F(GcsStoreTest, ListOfAMissingBucketSaysSo) {
  http_->Push(ErrorReply(404));
  StatusOr<Listing> l = store_->List("", "/");
  EXPECT_EQ(l.status().code(), ErrorCode::kNotFound);
  EXPECT_THAT(l.status().message(), HasSubstr("bucket gs://bkt not found"));
}

TEST_F(GcsStoreTest, RetryWarningsAreRateLimitedPerStore) {
  MakeStore(std::chrono::seconds(120), /*jitter=*/0.0);  // zero sleeps: all retries in one instant
  std::ostringstream log;
  auto logger = std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(log));
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(logger);
  const std::string object = Bytes(10);
  for (int i = 0; i < 5; ++i) http_->Push(ErrorReply(503));
  http_->Push(Media(object, 7));
  std::string buf(10, '\0');
  Status s1 = store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf)));
  clock_.Advance(std::chrono::seconds(2));
  http_->Push(ErrorReply(503));
  http_->Push(Media(object, 7));
  Status s2 = store_->Read(ObjectId{"w", Generation{7}}, 0, std::as_writable_bytes(std::span(buf)));
  spdlog::set_default_logger(previous);
  ASSERT_TRUE(s1.ok() && s2.ok());
  const std::string text = log.str();
  size_t lines = 0;
  for (size_t p = text.find("retrying in"); p != std::string::npos; p = text.find("retrying in", p + 1)) ++lines;
  EXPECT_EQ(lines, 2u) << text;
  EXPECT_THAT(text, HasSubstr("read of bytes 0-9 of gs://bkt/models/w (generation 7): HTTP 503"));
  EXPECT_THAT(text, HasSubstr("[4 similar warnings suppressed]"));
}

TEST(GcsStoreCreateTest, EmulatorHostImpliesAnonymousAccess) {
  ::tensorfs::testing::ScopedEnv env("STORAGE_EMULATOR_HOST", "localhost:9023");
  GcsOptions options;
  options.bucket = "bkt";
  GcsStore::Dependencies deps;
  deps.http = std::make_unique<FakeHttpClient>();
  StatusOr<std::unique_ptr<GcsStore>> store = GcsStore::Create(options, std::move(deps));
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  EXPECT_EQ((*store)->endpoint(), "http://localhost:9023");
  EXPECT_TRUE((*store)->credentials().anonymous());
}

TEST(GcsStoreCreateTest, InvalidOptionsAreRejected) {
  GcsOptions options;
  options.bucket = "Bad_Bucket";
  GcsStore::Dependencies deps;
  deps.http = std::make_unique<FakeHttpClient>();
  Status s = GcsStore::Create(options, std::move(deps)).status();
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("upper-case"));
}

TEST(ParseContentRangeTest, ParsesAndRejects) {
  uint64_t a = 0, b = 0;
  EXPECT_TRUE(ParseContentRange("bytes 5-14/100", &a, &b));
  EXPECT_EQ(a, 5u);
  EXPECT_EQ(b, 14u);
  EXPECT_TRUE(ParseContentRange("bytes 0-0/*", &a, &b));
  EXPECT_FALSE(ParseContentRange("bytes */100", &a, &b));
  EXPECT_FALSE(ParseContentRange("bytes 9-5/100", &a, &b));
  EXPECT_FALSE(ParseContentRange("items 0-1/2", &a, &b));
}

}  // namespace
}  // namespace tensorfs
