#include "core/store/gcs/gcs_options.h"

#include <cstdlib>
#include <string>

namespace tensorfs {
namespace {

constexpr std::string_view kNamingRules =
    "bucket names are 3-63 characters of lowercase letters, digits, '-', '_' and '.', starting "
    "and ending with a letter or digit (https://cloud.google.com/storage/docs/buckets#naming)";

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

bool LooksLikeIpv4(std::string_view s) {
  int parts = 0;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find('.', i);
    if (j == std::string_view::npos) j = s.size();
    std::string_view part = s.substr(i, j - i);
    if (part.empty() || part.size() > 3) return false;
    for (char c : part) {
      if (c < '0' || c > '9') return false;
    }
    ++parts;
    i = j + 1;
  }
  return parts == 4;
}

bool HasScheme(std::string_view s) { return s.find("://") != std::string_view::npos; }

}  // namespace

Status ValidateBucketName(std::string_view bucket) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("bucket name '" + std::string(bucket) + "' is invalid: " +
                                std::string(why) + "; " + std::string(kNamingRules));
  };
  if (bucket.empty()) return InvalidArgumentError("the bucket name is empty (expected gs://BUCKET[/PREFIX])");
  bool has_dot = bucket.find('.') != std::string_view::npos;
  if (bucket.size() < 3) return bad("it is shorter than 3 characters");
  if (bucket.size() > (has_dot ? 222u : 63u)) return bad("it is too long");
  for (char c : bucket) {
    if (c >= 'A' && c <= 'Z') return bad("it contains upper-case letters (bucket names are lower case)");
    if (!IsLowerAlnum(c) && c != '-' && c != '_' && c != '.') {
      return bad(std::string("it contains the character '") + c + "'");
    }
  }
  if (!IsLowerAlnum(bucket.front()) || !IsLowerAlnum(bucket.back())) {
    return bad("it must start and end with a letter or digit");
  }
  if (has_dot) {
    size_t i = 0;
    while (i <= bucket.size()) {
      size_t j = bucket.find('.', i);
      if (j == std::string_view::npos) j = bucket.size();
      if (j - i == 0) return bad("it contains an empty dot-separated component");
      if (j - i > 63) return bad("a dot-separated component is longer than 63 characters");
      i = j + 1;
    }
    if (LooksLikeIpv4(bucket)) return bad("it looks like an IP address");
  }
  if (bucket.starts_with("goog")) return bad("it starts with \"goog\"");
  return OkStatus();
}

StatusOr<GcsOptions> ParseGcsUrl(std::string_view url) {
  constexpr std::string_view kScheme = "gs://";
  if (!url.starts_with(kScheme)) {
    std::string hint;
    if (url.starts_with("gcs://") || url.starts_with("gs:/")) {
      hint = " (write it as gs://BUCKET/PREFIX)";
    } else if (url.starts_with("https://storage.googleapis.com/") || url.starts_with("https://storage.cloud.google.com/")) {
      hint = " (use the gs:// form: gs://BUCKET/PREFIX, not the https:// console URL)";
    } else if (url.starts_with("s3://") || url.starts_with("http://") || url.starts_with("https://")) {
      hint = " (only Google Cloud Storage gs:// URLs are supported; use -o endpoint=URL for a "
             "GCS-compatible server)";
    }
    return InvalidArgumentError("'" + std::string(url) + "' is not a gs:// URL" + hint +
                                "; expected gs://BUCKET[/PREFIX]");
  }
  std::string_view rest = url.substr(kScheme.size());
  size_t slash = rest.find('/');
  std::string_view bucket = rest.substr(0, slash);
  std::string_view prefix = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (bucket.empty()) {
    return InvalidArgumentError("'" + std::string(url) + "' names no bucket; expected gs://BUCKET[/PREFIX]");
  }
  Status s = ValidateBucketName(bucket);
  if (!s.ok()) return s.WithContext(std::string(url));
  while (prefix.ends_with('/')) prefix.remove_suffix(1);
  GcsOptions options;
  options.bucket = std::string(bucket);
  if (!prefix.empty()) {
    if (prefix.starts_with('/') || prefix.find("//") != std::string_view::npos) {
      return InvalidArgumentError("'" + std::string(url) +
                                  "' has an empty path component ('//'); expected gs://BUCKET/PREFIX");
    }
    for (char c : prefix) {
      if (c == '\r' || c == '\n' || c == '\0') {
        return InvalidArgumentError("the prefix in '" + std::string(url) +
                                    "' contains a control character, which GCS object names cannot hold");
      }
    }
    if (prefix.size() + 1 > 1024) {
      return InvalidArgumentError("the prefix in '" + std::string(url) +
                                  "' is longer than the 1024-byte limit on GCS object names");
    }
    options.prefix = std::string(prefix) + "/";
  }
  return options;
}

std::string ResolveEndpoint(std::string_view explicit_endpoint) {
  std::string endpoint;
  if (!explicit_endpoint.empty()) {
    endpoint = HasScheme(explicit_endpoint) ? std::string(explicit_endpoint)
                                            : "https://" + std::string(explicit_endpoint);
  } else if (const char* env = std::getenv("STORAGE_EMULATOR_HOST"); env != nullptr && *env != '\0') {
    std::string_view host(env);
    endpoint = HasScheme(host) ? std::string(host) : "http://" + std::string(host);
  } else {
    endpoint = std::string(kDefaultGcsEndpoint);
  }
  while (endpoint.ends_with('/')) endpoint.pop_back();
  return endpoint;
}

Status ValidateGcsOptions(const GcsOptions& options) {
  RETURN_IF_ERROR(ValidateBucketName(options.bucket));
  if (!options.prefix.empty() && !options.prefix.ends_with('/')) {
    return InvalidArgumentError("the object prefix '" + options.prefix + "' must end with '/'");
  }
  if (!options.endpoint.empty() && !options.endpoint.starts_with("http://") &&
      !options.endpoint.starts_with("https://")) {
    return InvalidArgumentError("endpoint '" + options.endpoint +
                                "' must start with https:// (or http:// for a local test server)");
  }
  if (options.anonymous && !options.key_file.empty()) {
    return InvalidArgumentError("-o anonymous and -o key_file=" + options.key_file +
                                " contradict each other; pass one of them");
  }
  return ValidateHttpClientOptions(options);
}

std::string GcsUrl(std::string_view bucket, std::string_view object_name) {
  std::string url = "gs://" + std::string(bucket);
  if (!object_name.empty()) {
    url += '/';
    url += object_name;
  }
  while (url.ends_with('/') && url.size() > 5 + bucket.size()) url.pop_back();
  return url;
}

}  // namespace tensorfs
