#include "core/store/gcs/gcs_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "core/store/http/encoding.h"
#include "core/store/list_util.h"

namespace tensorfs {
namespace {

using nlohmann::json;

constexpr std::string_view kObjectFields = "name,size,generation,updated,crc32c,md5Hash";
constexpr std::string_view kListFields = "items(name,size,generation,updated,crc32c,md5Hash),prefixes,nextPageToken";

bool ParseUint(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

// A JSON field GCS writes as a decimal string (int64/uint64 values), or a number.
bool JsonUint(const json& j, std::string_view field, uint64_t* out) {
  auto it = j.find(field);
  if (it == j.end()) return false;
  if (it->is_string()) return ParseUint(it->get_ref<const std::string&>(), out);
  if (it->is_number_unsigned() || (it->is_number_integer() && it->get<int64_t>() >= 0)) {
    *out = it->get<uint64_t>();
    return true;
  }
  return false;
}

}  // namespace

StatusOr<ObjectInfo> ParseObjectResource(const json& resource, std::string_view prefix) {
  if (!resource.is_object()) return InternalError("object metadata is not a JSON object");
  auto name_it = resource.find("name");
  if (name_it == resource.end() || !name_it->is_string()) return InternalError("object metadata has no name");
  const std::string& full = name_it->get_ref<const std::string&>();
  if (!std::string_view(full).starts_with(prefix)) {
    return InternalError("object " + full + " is outside the prefix " + std::string(prefix));
  }
  ObjectInfo info;
  info.name = full.substr(prefix.size());
  if (resource.contains("size") && !JsonUint(resource, "size", &info.size)) {
    return InternalError("object " + full + " has a malformed size");
  }
  uint64_t generation = 0;
  if (resource.contains("generation") && !JsonUint(resource, "generation", &generation)) {
    return InternalError("object " + full + " has a malformed generation");
  }
  info.generation = Generation{static_cast<int64_t>(generation)};
  for (const char* field : {"updated", "timeCreated"}) {
    auto it = resource.find(field);
    if (it != resource.end() && it->is_string()) {
      StatusOr<int64_t> t = ParseRfc3339Nanos(it->get_ref<const std::string&>());
      if (t.ok()) {
        info.mtime_ns = *t;
        break;
      }
    }
  }
  if (auto it = resource.find("crc32c"); it != resource.end() && it->is_string()) {
    info.crc32c = DecodeCrc32c(it->get_ref<const std::string&>());
  }
  if (auto it = resource.find("md5Hash"); it != resource.end() && it->is_string()) {
    info.md5_base64 = it->get<std::string>();
  }
  return info;
}

StatusOr<std::unique_ptr<GcsStore>> GcsStore::Create(const GcsOptions& options) {
  return Create(options, Dependencies{});
}

StatusOr<std::unique_ptr<GcsStore>> GcsStore::Create(const GcsOptions& options, Dependencies deps) {
  RETURN_IF_ERROR(ValidateGcsOptions(options));
  std::string endpoint = ResolveEndpoint(options.endpoint);
  if (!endpoint.starts_with("http://") && !endpoint.starts_with("https://")) {
    return InvalidArgumentError("endpoint '" + endpoint + "' (from STORAGE_EMULATOR_HOST) must be http:// or https://");
  }
  if (deps.clock == nullptr) deps.clock = &SystemClock();
  if (!deps.jitter) deps.jitter = DefaultJitter();
  if (deps.http == nullptr) {
    ASSIGN_OR_RETURN(deps.http, MakeCurlHttpClient(CurlOptionsFor(options)));
  }
  if (deps.credentials == nullptr) {
    const bool emulator = options.endpoint.empty() && options.key_file.empty() &&
                          std::getenv("STORAGE_EMULATOR_HOST") != nullptr &&
                          *std::getenv("STORAGE_EMULATOR_HOST") != '\0';
    if (emulator) {
      deps.credentials = MakeAnonymousCredentials();
    } else {
      ASSIGN_OR_RETURN(deps.credentials, MakeCredentials(options, *deps.http, *deps.clock));
    }
  }
  auto store = std::unique_ptr<GcsStore>(new GcsStore(options, std::move(endpoint), std::move(deps)));
  spdlog::info("{}: endpoint {}, using {}", store->Describe(), store->endpoint_, store->credentials_->Describe());
  return store;
}

GcsStore::GcsStore(const GcsOptions& options, std::string endpoint, Dependencies deps)
    : options_(options),
      endpoint_(std::move(endpoint)),
      clock_(*deps.clock),
      http_(std::move(deps.http)),
      credentials_(std::move(deps.credentials)),
      own_metrics_(deps.metrics == nullptr ? std::make_unique<Metrics>() : nullptr),
      metrics_(deps.metrics != nullptr ? *deps.metrics : *own_metrics_),
      retries_(RetryOptions{.initial_backoff = options.initial_backoff,
                            .max_backoff = options.max_backoff,
                            .max_reconnect_backoff = std::min(std::chrono::milliseconds(1000), options.max_backoff),
                            .deadline = options.retry_deadline},
               clock_, std::move(deps.jitter), metrics_, "GCS request retries") {}

GcsStore::~GcsStore() = default;

std::string GcsStore::Describe() const { return GcsUrl(options_.bucket, options_.prefix); }

GcsStore::Counters GcsStore::counters() const {
  return Counters{requests_.load(), retries_.retries(), bytes_received_.load()};
}

std::string GcsStore::ObjectUrl(std::string_view full_name) const {
  return endpoint_ + "/storage/v1/b/" + PercentEncode(options_.bucket) + "/o/" + PercentEncode(full_name);
}

RequestContext GcsStore::Context(std::string what, std::string_view full_name) const {
  RequestContext c;
  c.what = std::move(what);
  c.object_url = GcsUrl(options_.bucket, full_name);
  c.bucket = options_.bucket;
  c.credentials = credentials_->Describe();
  c.anonymous = credentials_->anonymous();
  return c;
}

StatusOr<HttpResponse> GcsStore::Send(const HttpRequest& request) {
  for (int auth_try = 0;; ++auth_try) {
    ASSIGN_OR_RETURN(std::string authorization, credentials_->AuthorizationHeader());
    HttpRequest req = request;
    if (!authorization.empty()) req.headers.push_back(std::move(authorization));
    ++requests_;
    HttpResponse r = http_->Perform(req);
    if (r.transport_ok() && r.status == 401 && auth_try == 0 && !credentials_->anonymous()) {
      spdlog::info("HTTP 401 from {}; refreshing the access token from {} and trying again", endpoint_,
                   credentials_->Describe());
      credentials_->Invalidate();
      continue;
    }
    return r;
  }
}

StatusOr<ObjectInfo> GcsStore::Stat(std::string_view name) {
  if (name.empty() || name.starts_with('/')) {
    return InvalidArgumentError("invalid object name '" + std::string(name) + "' for " + Describe());
  }
  return StatFullName(options_.prefix + std::string(name));
}

StatusOr<ObjectInfo> GcsStore::StatFullName(const std::string& full_name) {
  const RequestContext ctx = Context("metadata of " + GcsUrl(options_.bucket, full_name), full_name);
  HttpRequest req;
  req.url = ObjectUrl(full_name) + "?fields=" + PercentEncode(kObjectFields);
  req.headers = {"Accept: application/json"};
  req.max_body_bytes = 1 << 20;
  ObjectInfo info;
  Status s = retries_.Run(ctx.what, [&]() -> AttemptResult {
    StatusOr<HttpResponse> r = Send(req);
    if (!r.ok()) return FromCredentialsError(r.status());
    spdlog::debug("GET {} metadata: {}", ctx.object_url, r->Summary());
    if (!r->transport_ok() || r->status != 200) return ClassifyHttpResponse(*r, ctx);
    json j = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
    StatusOr<ObjectInfo> parsed = ParseObjectResource(j, options_.prefix);
    if (!parsed.ok()) return AttemptResult::Permanent(parsed.status().WithContext(ctx.what));
    info = std::move(parsed).value();
    return AttemptResult::Done();
  });
  if (!s.ok()) return s;
  return info;
}

StatusOr<Listing> GcsStore::List(std::string_view prefix, std::string_view delimiter) {
  const std::string full_prefix = options_.prefix + std::string(prefix);
  Listing listing;
  std::string page_token;
  for (int page = 1;; ++page) {
    RequestContext ctx = Context("listing of " + GcsUrl(options_.bucket, full_prefix) + "/ (page " +
                                     std::to_string(page) + ")",
                                 full_prefix);
    ctx.is_listing = true;
    HttpRequest req;
    req.url = endpoint_ + "/storage/v1/b/" + PercentEncode(options_.bucket) + "/o?prefix=" +
              PercentEncode(full_prefix) + "&maxResults=1000&fields=" + PercentEncode(kListFields);
    if (!delimiter.empty()) req.url += "&delimiter=" + PercentEncode(delimiter);
    if (!page_token.empty()) req.url += "&pageToken=" + PercentEncode(page_token);
    req.headers = {"Accept: application/json"};
    std::string next_token;
    Status s = retries_.Run(ctx.what, [&]() -> AttemptResult {
      StatusOr<HttpResponse> r = Send(req);
      if (!r.ok()) return FromCredentialsError(r.status());
      spdlog::debug("GET {} list page {}: {}", ctx.object_url, page, r->Summary());
      if (!r->transport_ok() || r->status != 200) return ClassifyHttpResponse(*r, ctx);
      json j = json::parse(r->body, nullptr, /*allow_exceptions=*/false);
      if (!j.is_object()) {
        return AttemptResult::Transient(UnavailableError("the listing reply is not a JSON object"));
      }
      Listing page_listing;
      if (auto items = j.find("items"); items != j.end() && items->is_array()) {
        for (const json& item : *items) {
          StatusOr<ObjectInfo> info = ParseObjectResource(item, options_.prefix);
          if (!info.ok()) return AttemptResult::Permanent(info.status().WithContext(ctx.what));
          if (info->name.empty() || info->name.ends_with('/')) continue;  // folder placeholders
          page_listing.objects.push_back(std::move(info).value());
        }
      }
      if (auto prefixes = j.find("prefixes"); prefixes != j.end() && prefixes->is_array()) {
        for (const json& p : *prefixes) {
          if (!p.is_string()) continue;
          const std::string& full = p.get_ref<const std::string&>();
          if (!std::string_view(full).starts_with(options_.prefix)) continue;
          page_listing.prefixes.push_back(full.substr(options_.prefix.size()));
        }
      }
      if (auto t = j.find("nextPageToken"); t != j.end() && t->is_string()) next_token = t->get<std::string>();
      for (ObjectInfo& o : page_listing.objects) listing.objects.push_back(std::move(o));
      for (std::string& p : page_listing.prefixes) listing.prefixes.push_back(std::move(p));
      return AttemptResult::Done();
    });
    if (!s.ok()) return s;
    if (next_token.empty()) break;
    if (next_token == page_token) {
      return InternalError(ctx.what + ": the server returned the same page token twice");
    }
    page_token = std::move(next_token);
  }
  auto by_name = [](const ObjectInfo& a, const ObjectInfo& b) { return a.name < b.name; };
  std::sort(listing.objects.begin(), listing.objects.end(), by_name);
  std::sort(listing.prefixes.begin(), listing.prefixes.end());
  listing.prefixes.erase(std::unique(listing.prefixes.begin(), listing.prefixes.end()), listing.prefixes.end());
  return listing;
}

Status GcsStore::Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) {
  if (out.empty()) return OkStatus();
  if (object.name.empty() || object.name.starts_with('/')) {
    return InvalidArgumentError("invalid object name '" + object.name + "' for " + Describe());
  }
  const std::string full_name = options_.prefix + object.name;
  const uint64_t last = offset + out.size() - 1;
  const bool pinned = object.generation.value != 0;
  RequestContext ctx = Context("read of " + RangeText(offset, last) + " of " + GcsUrl(options_.bucket, full_name) +
                                   (pinned ? " (generation " + object.generation.ToString() + ")" : ""),
                               full_name);
  if (pinned) ctx.generation = object.generation;
  std::string base_url = ObjectUrl(full_name) + "?alt=media";
  if (pinned) base_url += "&generation=" + object.generation.ToString();
  // An unpinned read is pinned, once bytes arrived, to the generation they came
  // from, so a resumed read never mixes two versions.
  std::string seen_generation;
  RangeReadHooks hooks;
  hooks.send = [&](HttpRequest& request, uint64_t, uint64_t) {
    request.url = base_url;
    if (!pinned && !seen_generation.empty()) request.url += "&generation=" + seen_generation;
    return Send(request);
  };
  hooks.check_version = [&](const HttpHeaders& headers) -> Status {
    // The generation the bytes must come from: the read's, or (unpinned) the
    // one the first bytes came from.
    const std::string expected = pinned ? object.generation.ToString() : seen_generation;
    auto g = headers.find("x-goog-generation");
    if (expected.empty()) {
      if (g != headers.end()) seen_generation = g->second;
      return OkStatus();
    }
    if (g == headers.end()) {
      return InternalError(ctx.what + ": the server answered without x-goog-generation, so the bytes " +
                           "cannot be known to be of generation " + expected);
    }
    if (g->second != expected) {
      return StaleError(ctx.object_url + " changed while mounted (generation " + expected +
                        " is gone; the server has generation " + g->second + ")");
    }
    return OkStatus();
  };
  hooks.classify = [&](const HttpResponse& r) { return ClassifyHttpResponse(r, ctx); };
  RangeRead read(ctx.what, ctx.object_url, offset, out, clock_, metrics_, bytes_received_, std::move(hooks));
  const RetryWindows::Range range{full_name, object.generation, offset, last};
  Status s = retries_.Run(ctx.what, [&] { return read.Attempt(); }, &range);
  if (s.ok() || s.code() != ErrorCode::kStale || !pinned) return s;
  // The generation is gone: tell a replaced object (kStale) from a deleted one.
  StatusOr<ObjectInfo> now = StatFullName(full_name);
  if (!now.ok() && now.status().code() == ErrorCode::kNotFound) {
    return NotFoundError(ctx.object_url + " was deleted while mounted (generation " + object.generation.ToString() +
                         " is gone)");
  }
  if (now.ok() && now->generation != object.generation) {
    return StaleError(ctx.object_url + " changed while mounted (generation " + object.generation.ToString() +
                      " is gone; now generation " + now->generation.ToString() +
                      "); open it again to read the new version");
  }
  return s;
}

}  // namespace tensorfs
