// Opens the ObjectStore a SOURCE names.
#ifndef TENSORFS_CORE_STORE_OPEN_STORE_H_
#define TENSORFS_CORE_STORE_OPEN_STORE_H_

#include <memory>

#include "core/metrics/metrics.h"
#include "core/options/mount_options.h"
#include "core/store/object_store.h"

namespace tensorfs {

// A local directory, gs://bucket[/prefix] or s3://bucket[/prefix]. The message
// says what to fix. A gs:// or s3:// store counts its retries in `metrics` when
// given (which must then outlive the store).
StatusOr<std::unique_ptr<ObjectStore>> OpenStore(const MountOptions& options, Metrics* metrics = nullptr);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_OPEN_STORE_H_
