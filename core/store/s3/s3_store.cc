#include "core/store/s3/s3_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/store/http/encoding.h"
#include "core/store/http/range_read.h"
#include "core/store/list_util.h"
#include "core/store/s3/sigv4.h"

namespace tensorfs {
namespace {

std::string GetEnv(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? std::string() : std::string(v);
}

bool ParseUint(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// The first non-empty value, and where it came from.
struct Setting {
  std::string value;
  std::string source;
};
Setting FirstOf(std::initializer_list<Setting> candidates) {
  for (const Setting& s : candidates) {
    if (!s.value.empty()) return s;
  }
  return {};
}

// scheme://host[:port] of an endpoint URL, the default port dropped (the Host
// header and the signature then agree whatever the client sends). An endpoint
// without a scheme gets https://.
StatusOr<std::string> NormalizeEndpoint(std::string endpoint, const std::string& source) {
  if (endpoint.find("://") == std::string::npos) endpoint = "https://" + endpoint;
  if (!endpoint.starts_with("https://") && !endpoint.starts_with("http://")) {
    return InvalidArgumentError("endpoint '" + endpoint + "' (" + source +
                                ") must start with https:// (or http:// for a store without TLS)");
  }
  while (endpoint.ends_with('/')) endpoint.pop_back();
  const size_t authority = endpoint.find("://") + 3;
  if (endpoint.find('/', authority) != std::string::npos || endpoint.find('?', authority) != std::string::npos) {
    return InvalidArgumentError("endpoint '" + endpoint + "' (" + source +
                                ") has a path; give only scheme://host[:port], e.g. https://minio.example:9000");
  }
  if (endpoint.size() == authority) return InvalidArgumentError("endpoint '" + endpoint + "' (" + source + ") names no host");
  const bool https = endpoint.starts_with("https://");
  for (std::string_view port : {https ? ":443" : ":80"}) {
    if (endpoint.ends_with(port)) endpoint.resize(endpoint.size() - port.size());
  }
  return endpoint;
}

// The host of scheme://host[:port], brackets of an IPv6 literal kept.
std::string HostOf(std::string_view endpoint) {
  std::string_view authority = endpoint.substr(endpoint.find("://") + 3);
  if (authority.starts_with('[')) return std::string(authority.substr(0, authority.find(']') + 1));
  return std::string(authority.substr(0, authority.find(':')));
}

}  // namespace

std::string NormalizeEtag(std::string_view etag) {
  if (etag.starts_with("W/")) etag.remove_prefix(2);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') etag = etag.substr(1, etag.size() - 2);
  return std::string(etag);
}

StatusOr<ObjectInfo> ToObjectInfo(const ListedObject& object, std::string_view prefix) {
  if (!std::string_view(object.key).starts_with(prefix)) {
    return InternalError("the listing holds " + object.key + ", which is outside the prefix " + std::string(prefix));
  }
  ObjectInfo info;
  info.name = object.key.substr(prefix.size());
  info.size = object.size;
  info.generation.token = NormalizeEtag(object.etag);
  if (!object.last_modified.empty()) {
    StatusOr<int64_t> t = ParseRfc3339Nanos(object.last_modified);
    if (t.ok()) info.mtime_ns = *t;
  }
  return info;
}

StatusOr<std::unique_ptr<S3Store>> S3Store::Create(const S3Options& options) {
  return Create(options, Dependencies{});
}

StatusOr<std::unique_ptr<S3Store>> S3Store::Create(const S3Options& given, Dependencies deps) {
  S3Options options = given;
  const AwsProfile profile = LoadAwsProfile(options.profile);
  auto from_profile = [&](const char* key) {
    auto it = profile.settings.find(key);
    return it == profile.settings.end() ? std::string() : it->second;
  };
  const std::string profile_source = "profile " + profile.name + " in " + profile.where;

  const Setting region = FirstOf({{options.region, "-o region"},
                                  {GetEnv("AWS_REGION"), "AWS_REGION"},
                                  {GetEnv("AWS_DEFAULT_REGION"), "AWS_DEFAULT_REGION"},
                                  {from_profile("region"), profile_source}});
  options.region = region.value;
  const Setting endpoint = FirstOf({{options.endpoint, "-o endpoint"},
                                    {GetEnv("AWS_ENDPOINT_URL_S3"), "AWS_ENDPOINT_URL_S3"},
                                    {GetEnv("AWS_ENDPOINT_URL"), "AWS_ENDPOINT_URL"},
                                    {from_profile("endpoint_url"), profile_source}});
  const Setting ca_file = FirstOf({{options.ca_file, "-o ca_file"},
                                   {GetEnv("AWS_CA_BUNDLE"), "AWS_CA_BUNDLE"},
                                   {from_profile("ca_bundle"), profile_source}});
  options.ca_file = ca_file.value;
  std::string normalized;
  if (!endpoint.value.empty()) {
    ASSIGN_OR_RETURN(normalized, NormalizeEndpoint(endpoint.value, endpoint.source));
    options.endpoint = normalized;
  }
  if (Status s = ValidateS3Options(options); !s.ok()) {
    if (!ca_file.value.empty() && ca_file.source != "-o ca_file" && s.message().starts_with("ca_file")) {
      return s.WithContext("from " + ca_file.source);
    }
    if (!region.value.empty() && region.source != "-o region" && s.message().starts_with("region")) {
      return s.WithContext("from " + region.source);
    }
    return s;
  }

  if (deps.clock == nullptr) deps.clock = &SystemClock();
  if (!deps.jitter) deps.jitter = DefaultJitter();
  if (!deps.wall_clock) deps.wall_clock = [] { return std::chrono::system_clock::now(); };
  if (deps.http == nullptr) {
    ASSIGN_OR_RETURN(deps.http, MakeCurlHttpClient(CurlOptionsFor(options)));
  }
  if (deps.credentials == nullptr) {
    AwsChainOptions chain;
    chain.profile = options.profile;
    chain.no_sign_request = options.no_sign_request;
    // STS is asked in the SDKs' client region ($AWS_REGION, which Mountpoint's
    // CSI driver sets to the STS region), else in the bucket's.
    chain.region = FirstOf({{GetEnv("AWS_REGION"), "AWS_REGION"},
                            {GetEnv("AWS_DEFAULT_REGION"), "AWS_DEFAULT_REGION"},
                            {options.region, "the bucket's region"}})
                       .value;
    chain.defer_instance_metadata = options.defer_instance_metadata;
    ASSIGN_OR_RETURN(deps.credentials, MakeAwsCredentials(chain, *deps.http, *deps.clock));
  }
  const bool region_given = !options.region.empty();
  std::string initial_region = region_given ? options.region : std::string(kDefaultS3Region);
  const bool aws_endpoint = options.endpoint.empty();
  auto store = std::unique_ptr<S3Store>(
      new S3Store(options, std::move(initial_region), region_given, options.endpoint, aws_endpoint, std::move(deps)));
  spdlog::info("{}: {} ({}), region {} ({}), using {}", store->Describe(), store->BucketUrl(),
               store->path_style_ ? "path-style" : "virtual-hosted", store->region(),
               region_given ? region.source : "discovered from the bucket if it is elsewhere",
               store->credentials_->Describe());
  return store;
}

S3Store::S3Store(const S3Options& options, std::string region, bool region_given, std::string endpoint,
                 bool aws_endpoint, Dependencies deps)
    : options_(options),
      region_given_(region_given),
      endpoint_(std::move(endpoint)),
      aws_endpoint_(aws_endpoint),
      path_style_(options.force_path_style || (!aws_endpoint_ && IsIpLiteral(HostOf(endpoint_))) ||
                  !IsVirtualHostable(options.bucket, aws_endpoint_ || endpoint_.starts_with("https://"))),
      clock_(*deps.clock),
      wall_clock_(std::move(deps.wall_clock)),
      http_(std::move(deps.http)),
      credentials_(std::move(deps.credentials)),
      own_metrics_(deps.metrics == nullptr ? std::make_unique<Metrics>() : nullptr),
      metrics_(deps.metrics != nullptr ? *deps.metrics : *own_metrics_),
      retries_(RetryOptions{.initial_backoff = options.initial_backoff,
                            .max_backoff = options.max_backoff,
                            .max_reconnect_backoff = std::min(std::chrono::milliseconds(1000), options.max_backoff),
                            .deadline = options.retry_deadline},
               clock_, std::move(deps.jitter), metrics_, "S3 request retries"),
      region_(std::move(region)) {}

S3Store::~S3Store() = default;

std::string S3Store::Describe() const { return S3Url(options_.bucket, options_.prefix); }

std::string S3Store::region() const {
  MutexLock lock(mu_);
  return region_;
}

S3Store::Counters S3Store::counters() const {
  return Counters{requests_.load(), retries_.retries(), bytes_received_.load()};
}

S3Store::Target S3Store::TargetFor(std::string region) const {
  Target t;
  if (aws_endpoint_) {
    t.scheme = "https";
    t.host = "s3." + region + ".amazonaws.com";
  } else {
    const size_t sep = endpoint_.find("://");
    t.scheme = endpoint_.substr(0, sep);
    t.host = endpoint_.substr(sep + 3);
  }
  if (!path_style_) t.host = options_.bucket + "." + t.host;
  t.region = std::move(region);
  return t;
}

S3Store::Target S3Store::CurrentTarget() const { return TargetFor(region()); }

std::string S3Store::BucketUrl() const {
  const Target t = CurrentTarget();
  return t.scheme + "://" + t.host + (path_style_ ? "/" + options_.bucket : std::string());
}

void S3Store::SwitchRegion(const std::string& from, const std::string& to) {
  {
    MutexLock lock(mu_);
    if (region_ != from) return;  // another request switched already
    region_ = to;
  }
  if (region_given_) {
    spdlog::warn("bucket s3://{} is in region {}, not {} as configured; using {} (set region={})", options_.bucket,
                 to, from, to, to);
  } else {
    spdlog::info("bucket s3://{} is in region {}; using it (set region={} to skip this discovery)", options_.bucket,
                 to, to);
  }
}

S3RequestContext S3Store::Context(std::string what, std::string_view full_name) const {
  S3RequestContext c;
  c.what = std::move(what);
  c.object_url = S3Url(options_.bucket, full_name);
  c.bucket = options_.bucket;
  c.credentials = credentials_->Describe();
  c.anonymous = credentials_->anonymous();
  return c;
}

StatusOr<HttpResponse> S3Store::Send(const Call& call, HttpRequest request) {
  bool refreshed = false;
  bool moved = false;
  for (;;) {
    const Target target = CurrentTarget();
    std::string path = path_style_ ? "/" + options_.bucket : std::string();
    if (!call.key.empty() || !path_style_) path += "/" + UriEncode(call.key, /*encode_slash=*/false);
    HttpRequest req = request;
    req.method = call.method;
    req.url = target.scheme + "://" + target.host + path;
    if (!call.query.empty()) req.url += "?" + CanonicalQueryString(call.query);
    std::vector<std::pair<std::string, std::string>> headers = call.headers;
    if (options_.requester_pays) headers.emplace_back("x-amz-request-payer", "requester");
    if (!options_.expected_bucket_owner.empty()) {
      headers.emplace_back("x-amz-expected-bucket-owner", options_.expected_bucket_owner);
    }
    std::string authorization;
    if (!credentials_->anonymous()) {
      ASSIGN_OR_RETURN(AwsCredentials creds, credentials_->Get());
      const auto now = wall_clock_();
      headers.emplace_back("x-amz-date", AmzDate(now));
      headers.emplace_back("x-amz-content-sha256", std::string(kUnsignedPayload));
      if (!creds.session_token.empty()) headers.emplace_back("x-amz-security-token", creds.session_token);
      SignableRequest signable{call.method, path, call.query, headers, std::string(kUnsignedPayload)};
      signable.headers.emplace_back("host", target.host);
      authorization = SignV4(signable, {creds.access_key_id, creds.secret_access_key}, target.region, "s3", now)
                          .authorization;
    }
    req.headers.clear();
    for (const auto& [name, value] : headers) req.headers.push_back(name + ": " + value);
    if (!authorization.empty()) req.headers.push_back("Authorization: " + authorization);
    ++requests_;
    HttpResponse r = http_->Perform(req);
    if (!refreshed && !credentials_->anonymous() && IsExpiredCredentials(r) && credentials_->Invalidate()) {
      refreshed = true;
      spdlog::info("S3 says the credentials from {} expired ({}); fetching new ones and trying again",
                   credentials_->Describe(), S3ErrorCode(r));
      continue;
    }
    if (!moved) {
      const std::string hint = WrongRegionHint(r);
      if (!hint.empty() && hint != target.region) {
        moved = true;
        SwitchRegion(target.region, hint);
        continue;
      }
    }
    return r;
  }
}

StatusOr<ObjectInfo> S3Store::Stat(std::string_view name) {
  if (name.empty() || name.starts_with('/')) {
    return InvalidArgumentError("invalid object name '" + std::string(name) + "' for " + Describe());
  }
  return StatFullName(options_.prefix + std::string(name));
}

StatusOr<ObjectInfo> S3Store::StatFullName(const std::string& full_name) {
  const S3RequestContext ctx = Context("metadata of " + S3Url(options_.bucket, full_name), full_name);
  Call call;
  call.method = "HEAD";
  call.key = full_name;
  HttpRequest req;
  req.max_body_bytes = 1 << 20;
  ObjectInfo info;
  Status s = retries_.Run(ctx.what, [&]() -> AttemptResult {
    StatusOr<HttpResponse> r = Send(call, req);
    if (!r.ok()) return FromCredentialsError(r.status());
    spdlog::debug("HEAD {}: {}", ctx.object_url, r->Summary());
    if (!r->transport_ok() || r->status != 200) return ClassifyS3Response(*r, ctx);
    ObjectInfo got;
    got.name = full_name.substr(options_.prefix.size());
    if (!ParseUint(r->Header("content-length"), &got.size)) {
      return AttemptResult::Permanent(InternalError(ctx.what + ": the HEAD answer has no valid Content-Length"));
    }
    got.generation.token = NormalizeEtag(r->Header("etag"));
    if (StatusOr<int64_t> t = ParseHttpDateNanos(r->Header("last-modified")); t.ok()) got.mtime_ns = *t;
    info = std::move(got);
    return AttemptResult::Done();
  });
  if (!s.ok()) return s;
  return info;
}

StatusOr<Listing> S3Store::List(std::string_view prefix, std::string_view delimiter) {
  const std::string full_prefix = options_.prefix + std::string(prefix);
  Listing listing;
  std::string token;
  for (int page = 1;; ++page) {
    S3RequestContext ctx = Context("listing of " + S3Url(options_.bucket, full_prefix) + "/ (page " +
                                       std::to_string(page) + ")",
                                   full_prefix);
    ctx.is_listing = true;
    Call call;
    call.query = {{"list-type", "2"}, {"prefix", full_prefix}, {"max-keys", "1000"}, {"encoding-type", "url"}};
    if (!delimiter.empty()) call.query.emplace_back("delimiter", std::string(delimiter));
    if (!token.empty()) call.query.emplace_back("continuation-token", token);
    HttpRequest req;
    req.max_body_bytes = XmlLimits{}.max_bytes;
    std::string next;
    Status s = retries_.Run(ctx.what, [&]() -> AttemptResult {
      StatusOr<HttpResponse> r = Send(call, req);
      if (!r.ok()) return FromCredentialsError(r.status());
      spdlog::debug("GET {} list page {}: {}", ctx.object_url, page, r->Summary());
      if (!r->transport_ok() || r->status != 200) return ClassifyS3Response(*r, ctx);
      StatusOr<ListObjectsPage> parsed = ParseListObjectsV2(r->body);
      if (!parsed.ok()) {
        // A document cut short may come right next time; one the parser refuses will not.
        Status why = parsed.status().WithContext(ctx.what);
        return parsed.status().code() == ErrorCode::kUnavailable ? AttemptResult::Transient(why)
                                                                  : AttemptResult::Permanent(why);
      }
      if (parsed->is_truncated && parsed->next_continuation_token.empty()) {
        return AttemptResult::Permanent(
            InternalError(ctx.what + ": the page is truncated but has no NextContinuationToken"));
      }
      Listing page_listing;
      for (const ListedObject& o : parsed->objects) {
        StatusOr<ObjectInfo> info = ToObjectInfo(o, options_.prefix);
        if (!info.ok()) return AttemptResult::Permanent(info.status().WithContext(ctx.what));
        if (info->name.empty() || info->name.ends_with('/')) continue;  // folder placeholders
        page_listing.objects.push_back(std::move(info).value());
      }
      for (const std::string& p : parsed->common_prefixes) {
        if (!std::string_view(p).starts_with(options_.prefix)) continue;
        page_listing.prefixes.push_back(p.substr(options_.prefix.size()));
      }
      next = parsed->is_truncated ? parsed->next_continuation_token : std::string();
      for (ObjectInfo& o : page_listing.objects) listing.objects.push_back(std::move(o));
      for (std::string& p : page_listing.prefixes) listing.prefixes.push_back(std::move(p));
      return AttemptResult::Done();
    });
    if (!s.ok()) return s;
    if (next.empty()) break;
    if (next == token) return InternalError(ctx.what + ": the server returned the same continuation token twice");
    token = std::move(next);
  }
  auto by_name = [](const ObjectInfo& a, const ObjectInfo& b) { return a.name < b.name; };
  std::sort(listing.objects.begin(), listing.objects.end(), by_name);
  std::sort(listing.prefixes.begin(), listing.prefixes.end());
  listing.prefixes.erase(std::unique(listing.prefixes.begin(), listing.prefixes.end()), listing.prefixes.end());
  return listing;
}

Status S3Store::Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) {
  if (out.empty()) return OkStatus();
  if (object.name.empty() || object.name.starts_with('/')) {
    return InvalidArgumentError("invalid object name '" + object.name + "' for " + Describe());
  }
  const std::string full_name = options_.prefix + object.name;
  const uint64_t last = offset + out.size() - 1;
  const std::string& pinned_etag = object.generation.token;
  const bool pinned = !pinned_etag.empty();
  S3RequestContext ctx = Context("read of " + RangeText(offset, last) + " of " + S3Url(options_.bucket, full_name) +
                                     (pinned ? " (ETag " + pinned_etag + ")" : ""),
                                 full_name);
  if (pinned) ctx.version = object.generation;
  // An unpinned read is pinned, once bytes arrived, to the ETag they came
  // with, so a resumed read never mixes two versions.
  std::string seen_etag;
  RangeReadHooks hooks;
  hooks.send = [&](HttpRequest& request, uint64_t first, uint64_t last_byte) {
    Call call;
    call.key = full_name;
    call.headers = {{"Range", "bytes=" + std::to_string(first) + "-" + std::to_string(last_byte)}};
    const std::string& etag = pinned ? pinned_etag : seen_etag;
    if (!etag.empty()) call.headers.emplace_back("If-Match", "\"" + etag + "\"");
    return Send(call, request);
  };
  hooks.check_version = [&](const HttpHeaders& headers) -> Status {
    auto it = headers.find("etag");
    const std::string& expected = pinned ? pinned_etag : seen_etag;
    if (expected.empty()) {
      if (it != headers.end()) seen_etag = NormalizeEtag(it->second);
      return OkStatus();
    }
    if (it == headers.end()) {
      return InternalError(ctx.what + ": the server answered without an ETag, so the bytes cannot be known to be "
                                      "of ETag " + expected);
    }
    if (NormalizeEtag(it->second) != expected) {
      return StaleError(ctx.object_url + " changed while mounted (ETag " + expected +
                        " is gone; the server has ETag " + NormalizeEtag(it->second) + ")");
    }
    return OkStatus();
  };
  hooks.classify = [&](const HttpResponse& r) {
    S3RequestContext c = ctx;
    if (!pinned && !seen_etag.empty()) c.version = Generation{.token = seen_etag};
    return ClassifyS3Response(r, c);
  };
  RangeRead read(ctx.what, ctx.object_url, offset, out, clock_, metrics_, bytes_received_, std::move(hooks));
  const RetryWindows::Range range{full_name, object.generation, offset, last};
  Status s = retries_.Run(ctx.what, [&] { return read.Attempt(); }, &range);
  if (s.ok() || s.code() != ErrorCode::kStale || !pinned) return s;
  // The ETag is gone: tell a replaced object (kStale) from a deleted one.
  StatusOr<ObjectInfo> now = StatFullName(full_name);
  if (!now.ok() && now.status().code() == ErrorCode::kNotFound) {
    return NotFoundError(ctx.object_url + " was deleted while mounted (ETag " + pinned_etag + " is gone)");
  }
  if (now.ok() && now->generation != object.generation) {
    return StaleError(ctx.object_url + " changed while mounted (ETag " + pinned_etag + " is gone; now ETag " +
                      now->generation.ToString() + "); remount to see the new version");
  }
  return s;
}

}  // namespace tensorfs
