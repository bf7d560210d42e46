#include "core/store/open_store.h"

#include <chrono>

#include "core/store/gcs/gcs_options.h"
#include "core/store/gcs/gcs_store.h"
#include "core/store/local_store.h"

namespace tensorfs {

StatusOr<std::unique_ptr<ObjectStore>> OpenStore(const MountOptions& options, Metrics* metrics) {
  if (options.source.starts_with("gs://")) {
    ASSIGN_OR_RETURN(GcsOptions gcs, ParseGcsUrl(options.source));
    gcs.endpoint = options.endpoint;
    gcs.key_file = options.key_file;
    gcs.ca_file = options.ca_file;
    gcs.anonymous = options.anonymous;
    gcs.retry_deadline = std::chrono::seconds(static_cast<int64_t>(options.retry_deadline_s));
    gcs.stall_timeout = std::chrono::seconds(static_cast<int64_t>(options.stall_timeout_s));
    GcsStore::Dependencies deps;
    deps.metrics = metrics;
    ASSIGN_OR_RETURN(std::unique_ptr<GcsStore> store, GcsStore::Create(gcs, std::move(deps)));
    return std::unique_ptr<ObjectStore>(std::move(store));
  }
  if (options.source.find("://") != std::string::npos) {
    return InvalidArgumentError("unsupported source " + options.source +
                                ": give a local directory or gs://bucket[/prefix]");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LocalStore> store, LocalStore::Create(options.source));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace tensorfs
