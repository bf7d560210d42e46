// S3Options: everything the S3 backend is configured with, built once at
// start-up from the s3:// URL, -o options and the environment (as the AWS SDKs
// read it), then handed down by const&.
//
// Thread-safety: plain values and pure functions (the Resolve* functions read
// the environment, which callers must not modify concurrently).
#ifndef TENSORFS_CORE_STORE_S3_S3_OPTIONS_H_
#define TENSORFS_CORE_STORE_S3_S3_OPTIONS_H_

#include <chrono>
#include <string>
#include <string_view>

#include "core/store/http/client_options.h"
#include "core/util/status.h"

namespace tensorfs {

// The region signed for when none is configured, and the first one tried
// before a bucket's own region is discovered.
inline constexpr std::string_view kDefaultS3Region = "us-east-1";

struct S3Options : HttpClientOptions {
  std::string bucket;
  // Key prefix ("models/llama/"), empty or ending in '/'. Names passed to the
  // ObjectStore are relative to it.
  std::string prefix;
  // -o region: "" means $AWS_REGION, $AWS_DEFAULT_REGION, the profile's
  // region, else discovered from the bucket (see S3Store).
  std::string region;
  // -o endpoint: an S3-compatible store's URL ("https://minio.example:9000").
  // "" means $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL, the profile's
  // endpoint_url, else AWS (https://s3.REGION.amazonaws.com).
  std::string endpoint;
  // Bucket in the path (https://host/bucket/key) rather than in the host name
  // (https://bucket.host/key). Also used when the endpoint is an IP address or
  // the bucket name cannot be a host name.
  bool force_path_style = false;
  // -o profile: the only credentials source, and the profile read for region
  // and endpoint ("" = $AWS_PROFILE, else "default").
  std::string profile;
  bool no_sign_request = false;  // anonymous: public buckets
  bool requester_pays = false;   // x-amz-request-payer: requester
  std::string expected_bucket_owner;  // x-amz-expected-bucket-owner (a 12-digit account ID)
  // Instance metadata, the chain's last source, is probed at the first
  // request rather than by Create(): a mount that serves /dev/fd/N answers the
  // kernel before any network call.
  bool defer_instance_metadata = false;
  // HttpClientOptions::ca_file "" means $AWS_CA_BUNDLE, the profile's
  // ca_bundle, else the system's CA certificates.
};

// Parses "s3://bucket" or "s3://bucket/some/prefix[/]" into bucket and prefix
// (normalised to end in '/' unless empty). The bucket name is checked against
// the S3 naming rules (the legacy ones too: upper case and '_' are accepted
// with path-style addressing) so a typo fails here, not as a 404 later.
StatusOr<S3Options> ParseS3Url(std::string_view url);

// Checks a bucket name against the S3 naming rules.
Status ValidateS3BucketName(std::string_view bucket);

// Checks the options: bucket, prefix form, endpoint scheme (https, or http),
// region form, expected_bucket_owner form, ca_file, limits and timeouts.
Status ValidateS3Options(const S3Options& options);

// "s3://bucket/prefix" as users write it (no trailing '/' on the prefix).
std::string S3Url(std::string_view bucket, std::string_view key);

// True when `host` (no port) is an IPv4 or bracketed IPv6 literal.
bool IsIpLiteral(std::string_view host);

// True when `bucket` can be the first label of a host name: 3-63 characters
// of a-z 0-9 '-', and '.' only where TLS certificates still match (never
// with https).
bool IsVirtualHostable(std::string_view bucket, bool https);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_S3_S3_OPTIONS_H_
