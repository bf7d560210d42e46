#include "fs/mount_recovery.h"

#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

extern char** environ;

namespace tensorfs {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string UnescapeMountinfo(const std::string& field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits = field.substr(i + 1, 3);
      if (digits.find_first_not_of("01234567") == std::string::npos) {
        out += static_cast<char>(std::strtol(digits.c_str(), nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

// The file system type mounted at exactly `path` (the topmost one), or "".
std::string MountedFsType(const std::string& path) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line, type;
  while (std::getline(in, line)) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    std::istringstream fields(line);
    std::string id, parent, dev, root, mount_point;
    fields >> id >> parent >> dev >> root >> mount_point;
    if (UnescapeMountinfo(mount_point) != path) continue;
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    tail >> type;  // later lines are mounted on top of earlier ones: keep the last
  }
  return type;
}

// Runs `fusermount3 -u -z path`; returns its exit status (or -1).
int RunFusermountLazy(const std::string& path) {
  std::vector<std::string> args = {"fusermount3", "-u", "-z", path};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid;
  if (::posix_spawnp(&pid, "fusermount3", nullptr, nullptr, argv.data(), environ) != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::string CanonicalMountPath(const std::string& path) {
  namespace fsys = std::filesystem;
  fsys::path p = fsys::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();  // "dir/" -> "dir"
  std::error_code ec;
  fsys::path parent = fsys::canonical(p.has_parent_path() ? p.parent_path() : fsys::current_path(), ec);
  if (ec) return fsys::absolute(p, ec).lexically_normal().string();
  return (parent / p.filename()).string();
}

StatusOr<bool> RecoverDeadMountPoint(const std::string& mountpoint) {
  if (mountpoint.empty()) return false;
  const std::string path = CanonicalMountPath(mountpoint);
  const std::string type = MountedFsType(path);
  if (type != "fuse" && !type.starts_with("fuse.")) return false;  // not ours to recover, and not looked at
  // stat() may be answered from the kernel's attribute cache for a while after
  // the daemon died; statfs() always asks the daemon.
  // ECONNABORTED: the connection is being torn down (the daemon's last thread
  // is still exiting); a moment later it reads ENOTCONN. Either is dead.
  auto gone = [] { return errno == ENOTCONN || errno == ECONNABORTED; };
  struct stat st;
  struct statfs sfs;
  bool dead = (::stat(mountpoint.c_str(), &st) != 0 && gone()) ||
              (::statfs(mountpoint.c_str(), &sfs) != 0 && gone());
  if (!dead) return false;
  std::string how;
  if (::umount2(path.c_str(), MNT_DETACH) == 0) {
    how = "umount2(MNT_DETACH)";
  } else {
    int err = errno;
    if (err != EPERM || RunFusermountLazy(path) != 0) {
      return UnavailableError("mount point " + mountpoint + " is a dead " + type +
                              " mount (Transport endpoint is not connected) and could not be unmounted (" +
                              std::strerror(err) + "): run fusermount3 -uz " + path);
    }
    how = "fusermount3 -uz";
  }
  spdlog::warn("{}: the {} mount there had died (Transport endpoint is not connected); detached it with {} "
               "before mounting again",
               path, type, how);
  return true;
}

}  // namespace tensorfs
