// The version of this build, for `tensorfs --version`. Its definitions are
// generated at build time by fs/version.cmake: CMake's project version, and
// `git describe` of the checkout the build came from (none when built from a
// tarball without .git).
//
// Thread-safety: constants.
#ifndef TENSORFS_FS_VERSION_H_
#define TENSORFS_FS_VERSION_H_

#include <string>
#include <string_view>

namespace tensorfs {

std::string_view ProjectVersion();  // "0.1.0"
std::string_view GitDescribe();     // "v0.1.0-12-gbf5f3a2-dirty", "bf5f3a2"; "" outside a checkout

// "tensorfs 0.1.0", with " (git bf5f3a2-dirty)" when built from a checkout.
inline std::string VersionLine() {
  std::string line = "tensorfs " + std::string(ProjectVersion());
  if (!GitDescribe().empty()) line += " (git " + std::string(GitDescribe()) + ")";
  return line;
}

}  // namespace tensorfs

#endif  // TENSORFS_FS_VERSION_H_
