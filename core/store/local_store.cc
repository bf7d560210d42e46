#include "core/store/local_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>

#include "core/store/list_util.h"

namespace tensorfs {
namespace {

Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = what + ": " + std::strerror(err);
  switch (err) {
    case ENOENT:
    case ENOTDIR: return NotFoundError(msg);
    case EACCES:
    case EPERM: return PermissionDeniedError(msg);
    default: return UnavailableError(msg);
  }
}

Generation GenerationOf(const struct stat& st) {
  // Any change of file identity, size or content time gives another value.
  uint64_t h = std::hash<uint64_t>{}(static_cast<uint64_t>(st.st_ino));
  h ^= static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + st.st_mtim.tv_nsec + 0x9e3779b97f4a7c15ull +
       (h << 6) + (h >> 2);
  h ^= static_cast<uint64_t>(st.st_size) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return Generation{static_cast<int64_t>(h >> 1) | 1};  // positive, never 0
}

ObjectInfo InfoOf(std::string name, const struct stat& st) {
  return ObjectInfo{.name = std::move(name),
                    .size = static_cast<uint64_t>(st.st_size),
                    .generation = GenerationOf(st),
                    .mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

}  // namespace

StatusOr<std::unique_ptr<LocalStore>> LocalStore::Create(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  struct stat st;
  if (::stat(root.c_str(), &st) != 0) return ErrnoStatus(errno, "cannot open source directory " + root);
  if (!S_ISDIR(st.st_mode)) return InvalidArgumentError("source " + root + " is not a directory");
  if (::access(root.c_str(), R_OK | X_OK) != 0) return ErrnoStatus(errno, "cannot read source directory " + root);
  return std::unique_ptr<LocalStore>(new LocalStore(std::move(root)));
}

std::string LocalStore::PathOf(std::string_view name) const {
  std::string path = root_;
  path += '/';
  path += name;
  return path;
}

StatusOr<ObjectInfo> LocalStore::Stat(std::string_view name) {
  struct stat st;
  if (::stat(PathOf(name).c_str(), &st) != 0) return ErrnoStatus(errno, "stat " + PathOf(name));
  if (!S_ISREG(st.st_mode)) return NotFoundError(PathOf(name) + " is not a regular file");
  return InfoOf(std::string(name), st);
}

Status LocalStore::ListDir(const std::string& dir, std::string_view prefix, std::string_view delimiter,
                           Listing& listing) {
  std::string path = dir.empty() ? root_ : PathOf(dir);
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) {
    if (errno == ENOENT || errno == ENOTDIR) return OkStatus();  // an empty listing, as GCS gives
    return ErrnoStatus(errno, "list " + path);
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    names.emplace_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    std::string full = dir + n;
    // Only entries that can still match the prefix.
    size_t common = std::min(full.size(), prefix.size());
    if (full.compare(0, common, prefix.substr(0, common)) != 0) continue;
    struct stat st;
    if (::stat(PathOf(full).c_str(), &st) != 0) continue;  // a dangling link or a race: skip
    if (S_ISDIR(st.st_mode)) {
      std::string sub = full + "/";
      if (sub.size() <= prefix.size() || delimiter.empty()) {
        RETURN_IF_ERROR(ListDir(sub, prefix, delimiter, listing));
      } else {
        listing.prefixes.push_back(std::move(sub));  // the delimiter follows the prefix: roll up
      }
    } else if (S_ISREG(st.st_mode) && full.size() >= prefix.size()) {
      AddToListing(InfoOf(full, st), prefix, delimiter, listing);
    }
  }
  return OkStatus();
}

StatusOr<Listing> LocalStore::List(std::string_view prefix, std::string_view delimiter) {
  if (!delimiter.empty() && delimiter != "/") {
    return InvalidArgumentError("a local directory can only be listed with delimiter '/'");
  }
  // Start at the deepest directory the prefix names, so listing "a/b/" reads only a/b.
  size_t slash = prefix.rfind('/');
  std::string dir = slash == std::string_view::npos ? "" : std::string(prefix.substr(0, slash + 1));
  Listing listing;
  RETURN_IF_ERROR(ListDir(dir, prefix, delimiter, listing));
  return listing;
}

Status LocalStore::Read(const ObjectId& object, uint64_t offset, std::span<std::byte> out) {
  std::string path = PathOf(object.name);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "open " + path);
  struct stat st;
  Status status;
  if (::fstat(fd, &st) != 0) {
    status = ErrnoStatus(errno, "stat " + path);
  } else if (GenerationOf(st) != object.generation) {
    status = StaleError(path + " changed while mounted (generation " + object.generation.ToString() +
                        " is gone); open it again to read the new version");
  } else {
    status = CheckRangeWithin(object, offset, out.size(), static_cast<uint64_t>(st.st_size));
  }
  size_t done = 0;
  while (status.ok() && done < out.size()) {
    ssize_t n = ::pread(fd, out.data() + done, out.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      status = ErrnoStatus(errno, "read " + path);
    } else if (n == 0) {
      status = StaleError(path + " was truncated while mounted");
    } else {
      done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  return status;
}

}  // namespace tensorfs
