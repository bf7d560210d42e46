#include "core/store/open_store.h"

#include "core/store/local_store.h"

namespace tensorfs {

StatusOr<std::unique_ptr<ObjectStore>> OpenStore(const MountOptions& options) {
  if (options.source.starts_with("gs://")) {
    return UnimplementedError("gs:// sources are not supported yet: mount a local directory");
  }
  if (options.source.find("://") != std::string::npos) {
    return InvalidArgumentError("unsupported source " + options.source +
                                ": give a local directory or gs://bucket[/prefix]");
  }
  ASSIGN_OR_RETURN(std::unique_ptr<LocalStore> store, LocalStore::Create(options.source));
  return std::unique_ptr<ObjectStore>(std::move(store));
}

}  // namespace tensorfs
