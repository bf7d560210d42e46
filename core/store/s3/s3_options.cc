#include "core/store/s3/s3_options.h"

#include <arpa/inet.h>

namespace tensorfs {
namespace {

constexpr std::string_view kNamingRules =
    "bucket names are 3-63 characters of lowercase letters, digits, '.' and '-', starting and ending with a "
    "letter or digit (https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html)";

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }

bool LooksLikeIpv4(std::string_view s) {
  in_addr addr;
  return ::inet_pton(AF_INET, std::string(s).c_str(), &addr) == 1;
}

}  // namespace

bool IsIpLiteral(std::string_view host) {
  if (host.starts_with('[')) return true;  // IPv6
  return LooksLikeIpv4(host);
}

bool IsVirtualHostable(std::string_view bucket, bool https) {
  if (bucket.size() < 3 || bucket.size() > 63) return false;
  for (char c : bucket) {
    if (!IsLowerAlnum(c) && c != '-' && c != '.') return false;
    // A dot would add a level below the certificate's *.s3.amazonaws.com.
    if (c == '.' && https) return false;
  }
  return IsLowerAlnum(bucket.front()) && IsLowerAlnum(bucket.back()) && !LooksLikeIpv4(bucket);
}

Status ValidateS3BucketName(std::string_view bucket) {
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("bucket name '" + std::string(bucket) + "' is invalid: " + std::string(why) + "; " +
                                std::string(kNamingRules));
  };
  if (bucket.empty()) return InvalidArgumentError("the bucket name is empty (expected s3://BUCKET[/PREFIX])");
  if (bucket.size() < 3) return bad("it is shorter than 3 characters");
  // Buckets made before March 2018 in us-east-1 may hold upper case and '_'
  // and be up to 255 characters long; they are reached with path-style URLs.
  bool legacy = false;
  for (char c : bucket) {
    if (c == '_' || (c >= 'A' && c <= 'Z')) {
      legacy = true;
    } else if (!IsLowerAlnum(c) && c != '-' && c != '.') {
      return bad(std::string("it contains the character '") + c + "'");
    }
  }
  if (bucket.size() > (legacy ? 255u : 63u)) return bad("it is too long");
  if (!IsAlnum(bucket.front()) || !IsAlnum(bucket.back())) return bad("it must start and end with a letter or digit");
  if (bucket.find("..") != std::string_view::npos) return bad("it contains two adjacent periods");
  if (LooksLikeIpv4(bucket)) return bad("it looks like an IP address");
  return OkStatus();
}

StatusOr<S3Options> ParseS3Url(std::string_view url) {
  constexpr std::string_view kScheme = "s3://";
  if (!url.starts_with(kScheme)) {
    std::string hint;
    if (url.starts_with("s3a://") || url.starts_with("s3n://") || url.starts_with("s3:/")) {
      hint = " (write it as s3://BUCKET/PREFIX)";
    } else if (url.starts_with("https://") || url.starts_with("http://")) {
      hint = " (use the s3:// form, s3://BUCKET/PREFIX, and give an S3-compatible store's URL with "
             "-o endpoint=URL)";
    }
    return InvalidArgumentError("'" + std::string(url) + "' is not an s3:// URL" + hint +
                                "; expected s3://BUCKET[/PREFIX]");
  }
  std::string_view rest = url.substr(kScheme.size());
  const size_t slash = rest.find('/');
  std::string_view bucket = rest.substr(0, slash);
  std::string_view prefix = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
  if (bucket.empty()) {
    return InvalidArgumentError("'" + std::string(url) + "' names no bucket; expected s3://BUCKET[/PREFIX]");
  }
  if (Status s = ValidateS3BucketName(bucket); !s.ok()) return s.WithContext(std::string(url));
  while (prefix.ends_with('/')) prefix.remove_suffix(1);
  S3Options options;
  options.bucket = std::string(bucket);
  if (!prefix.empty()) {
    if (prefix.starts_with('/') || prefix.find("//") != std::string_view::npos) {
      return InvalidArgumentError("'" + std::string(url) +
                                  "' has an empty path component ('//'); expected s3://BUCKET/PREFIX");
    }
    for (char c : prefix) {
      if (c == '\0') return InvalidArgumentError("the prefix in '" + std::string(url) + "' contains a NUL byte");
    }
    if (prefix.size() + 1 > 1024) {
      return InvalidArgumentError("the prefix in '" + std::string(url) +
                                  "' is longer than the 1024-byte limit on S3 keys");
    }
    options.prefix = std::string(prefix) + "/";
  }
  return options;
}

Status ValidateS3Options(const S3Options& options) {
  RETURN_IF_ERROR(ValidateS3BucketName(options.bucket));
  if (!options.prefix.empty() && !options.prefix.ends_with('/')) {
    return InvalidArgumentError("the key prefix '" + options.prefix + "' must end with '/'");
  }
  if (!options.endpoint.empty() && !options.endpoint.starts_with("http://") &&
      !options.endpoint.starts_with("https://")) {
    return InvalidArgumentError("endpoint '" + options.endpoint +
                                "' must start with https:// (or http:// for a store without TLS)");
  }
  for (char c : options.region) {
    if (!IsLowerAlnum(c) && c != '-') {
      return InvalidArgumentError("region '" + options.region +
                                  "' is not a region name (lower-case letters, digits and '-', e.g. eu-west-1)");
    }
  }
  if (!options.expected_bucket_owner.empty()) {
    bool digits = options.expected_bucket_owner.size() == 12;
    for (char c : options.expected_bucket_owner) digits = digits && c >= '0' && c <= '9';
    if (!digits) {
      return InvalidArgumentError("expected_bucket_owner=" + options.expected_bucket_owner +
                                  " is not an AWS account ID (12 digits)");
    }
  }
  return ValidateHttpClientOptions(options);
}

std::string S3Url(std::string_view bucket, std::string_view key) {
  std::string url = "s3://" + std::string(bucket);
  if (!key.empty()) {
    url += '/';
    url += key;
  }
  while (url.ends_with('/') && url.size() > 5 + bucket.size()) url.pop_back();
  return url;
}

}  // namespace tensorfs
