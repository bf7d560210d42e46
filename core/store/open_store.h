// Opens the ObjectStore a SOURCE names.
#ifndef TENSORFS_CORE_STORE_OPEN_STORE_H_
#define TENSORFS_CORE_STORE_OPEN_STORE_H_

#include <memory>

#include "core/options/mount_options.h"
#include "core/store/object_store.h"

namespace tensorfs {

// A local directory, or gs://bucket[/prefix]. The message says what to fix.
StatusOr<std::unique_ptr<ObjectStore>> OpenStore(const MountOptions& options);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_STORE_OPEN_STORE_H_
