#include "fs/errno_map.h"

#include <cerrno>

namespace tensorfs {

int ToErrno(const Status& status) {
  switch (status.code()) {
    case ErrorCode::kOk: return 0;
    case ErrorCode::kNotFound: return ENOENT;
    case ErrorCode::kPermissionDenied: return EACCES;
    case ErrorCode::kStale: return ESTALE;
    case ErrorCode::kInvalidArgument: return EINVAL;
    case ErrorCode::kUnimplemented: return ENOTSUP;
    case ErrorCode::kCorrupt:
    case ErrorCode::kUnavailable:
    case ErrorCode::kDeadlineExceeded:
    case ErrorCode::kInternal: return EIO;
  }
  return EIO;
}

}  // namespace tensorfs
