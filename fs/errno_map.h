// The one place a core Status becomes an errno.
#ifndef TENSORFS_FS_ERRNO_MAP_H_
#define TENSORFS_FS_ERRNO_MAP_H_

#include "core/util/status.h"

namespace tensorfs {

// ENOENT, EACCES, ESTALE, ... ; anything without a better match is EIO.
int ToErrno(const Status& status);

}  // namespace tensorfs

#endif  // TENSORFS_FS_ERRNO_MAP_H_
