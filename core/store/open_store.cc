#include "core/store/open_store.h"

#include <chrono>

#include "core/store/gcs/gcs_options.h"
#include "core/store/gcs/gcs_store.h"
#include "core/store/local_store.h"
#include "core/store/s3/s3_options.h"
#include "core/store/s3/s3_store.h"

namespace tensorfs {
namespace {

void SetHttpClientOptions(const MountOptions& options, HttpClientOptions& http) {
  http.ca_file = options.ca_file;
  http.retry_deadline = std::chrono::seconds(static_cast<int64_t>(options.retry_deadline_s));
  http.stall_timeout = std::chrono::seconds(static_cast<int64_t>(options.stall_timeout_s));
  http.user_agent_prefix = options.user_agent_prefix;
}

StatusOr<std::unique_ptr<ObjectStore>> OpenGcs(const MountOptions& options, Metrics* metrics) {
  ASSIGN_OR_RETURN(GcsOptions gcs, ParseGcsUrl(options.source));
  gcs.endpoint = options.endpoint;
  gcs.key_file = options.key_file;
  gcs.anonymous = options.anonymous;
  SetHttpClientOptions(options, gcs);
  GcsStore::Dependencies deps;
  deps.metrics = metrics;
  ASSIGN_OR_RETURN(std::unique_ptr<GcsStore> store, GcsStore::Create(gcs, std::move(deps)));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

StatusOr<std::unique_ptr<ObjectStore>> OpenS3(const MountOptions& options, Metrics* metrics) {
  ASSIGN_OR_RETURN(S3Options s3, ParseS3Url(options.source));
  s3.region = options.region;
  s3.endpoint = options.endpoint;
  s3.force_path_style = options.force_path_style;
  s3.profile = options.profile;
  s3.no_sign_request = options.no_sign_request;
  s3.requester_pays = options.requester_pays;
  s3.expected_bucket_owner = options.expected_bucket_owner;
  s3.defer_instance_metadata = FuseFdOfMountPoint(options.mountpoint).has_value();
  SetHttpClientOptions(options, s3);
  S3Store::Dependencies deps;
  deps.metrics = metrics;
  ASSIGN_OR_RETURN(std::unique_ptr<S3Store> store, S3Store::Create(s3, std::move(deps)));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace

StatusOr<std::unique_ptr<ObjectStore>> OpenStore(const MountOptions& options, Metrics* metrics) {
  if (options.source.starts_with("gs://")) return OpenGcs(options, metrics);
  if (options.source.starts_with("s3://")) return OpenS3(options, metrics);
  if (options.source.find("://") != std::string::npos) {
    return InvalidArgumentError("unsupported source " + options.source +
                                ": give a local directory, gs://bucket[/prefix] or s3://bucket[/prefix]");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LocalStore> store, LocalStore::Create(options.source));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace tensorfs
