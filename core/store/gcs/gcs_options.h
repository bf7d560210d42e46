// GcsOptions: everything the GCS backend is configured with, built once at
// start-up from the gs:// URL, -o options and the environment, then handed down
// by const&. ParseGcsUrl and ResolveEndpoint are the only places that read the
// URL and STORAGE_EMULATOR_HOST; ValidateGcsOptions checks the rest.
//
// Thread-safety: plain values and pure functions (ResolveEndpoint reads the
// environment, which callers must not modify concurrently).
#ifndef TENSORFS_CORE_STORE_GCS_GCS_OPTIONS_H_
#define TENSORFS_CORE_STORE_GCS_GCS_OPTIONS_H_

#include <chrono>
#include <string>
#include <string_view>

#include "core/store/http/client_options.h"
#include "core/util/status.h"

namespace tensorfs {

inline constexpr std::string_view kDefaultGcsEndpoint = "https://storage.googleapis.com";

struct GcsOptions : HttpClientOptions {
  std::string bucket;
  // Object-name prefix ("models/llama/"), empty or ending in '/'. Names passed to
  // the ObjectStore are relative to it.
  std::string prefix;
  // "" means https://storage.googleapis.com (TLS, verified). Otherwise an explicit
  // scheme://host[:port], e.g. "http://127.0.0.1:8080"; see ResolveEndpoint.
  std::string endpoint;
  // Send no Authorization header (public buckets).
  bool anonymous = false;
  // -o key_file=PATH: a service-account key (or authorized_user) JSON file that
  // takes precedence over Application Default Credentials.
  std::string key_file;
};

// Parses "gs://bucket" or "gs://bucket/some/prefix[/]" into bucket and prefix
// (normalised to end in '/' unless empty). Other fields keep their defaults.
// The bucket name is checked against the GCS naming rules so a typo fails here,
// with a message saying what is wrong, rather than as a 404 later.
StatusOr<GcsOptions> ParseGcsUrl(std::string_view url);

// The endpoint to use: `explicit_endpoint` (-o endpoint) if non-empty, else
// $STORAGE_EMULATOR_HOST if set, else https://storage.googleapis.com. A value
// without a scheme gets one: "http://" for the emulator variable (its
// convention, "localhost:9000"), "https://" for -o endpoint. A trailing '/' is
// dropped. Plain http is therefore only ever used when explicitly asked for.
std::string ResolveEndpoint(std::string_view explicit_endpoint);

// Checks the options for a store: bucket name, prefix form, endpoint scheme,
// limits and timeouts, that anonymous and key_file are not both given, and
// that a ca_file can be read and holds a PEM certificate.
Status ValidateGcsOptions(const GcsOptions& options);

// Checks a bucket name against the GCS naming rules.
Status ValidateBucketName(std::string_view bucket);

// "gs://bucket/prefix" as users write it (no trailing '/' on the prefix).
std::string GcsUrl(std::string_view bucket, std::string_view object_name);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_GCS_GCS_OPTIONS_H_
