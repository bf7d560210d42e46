#include "core/options/memory_limit.h"

#include <charconv>
#include <fstream>
#include <sstream>
#include <string_view>
#include <vector>

#include "core/options/mount_options.h"

namespace tensorfs {
namespace {

// cgroup v1 spells "no limit" as a page-rounded LONG_MAX; anything this large is none.
constexpr uint64_t kUnlimited = 1ull << 60;

std::optional<uint64_t> ReadLimitFile(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || v >= kUnlimited) return std::nullopt;
  return v;
}

// /proc/self/mountinfo's octal escapes ("\040" for a space) undone.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      auto [ptr, ec] = std::from_chars(s.data() + i + 1, s.data() + i + 4, v, 8);
      if (ec == std::errc() && ptr == s.data() + i + 4) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

struct CgroupMount {
  std::string root;   // the hierarchy's path that is mounted
  std::string point;  // where
};

// The mount of the cgroup2 hierarchy (v2) or of the v1 hierarchy with the memory controller.
std::optional<CgroupMount> FindMount(const std::string& mountinfo, bool v2) {
  std::ifstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::istringstream tail(line.substr(dash + 3));
    std::string id, parent, dev, root, point, fstype, source, super;
    if (!(head >> id >> parent >> dev >> root >> point) || !(tail >> fstype >> source >> super)) continue;
    if (v2 && fstype != "cgroup2") continue;
    if (!v2) {
      if (fstype != "cgroup") continue;
      bool memory = false;
      std::istringstream opts(super);
      for (std::string opt; std::getline(opts, opt, ',');) memory |= opt == "memory";
      if (!memory) continue;
    }
    return CgroupMount{Unescape(root), Unescape(point)};
  }
  return std::nullopt;
}

// The smallest limit in `file` from the cgroup at `path` up to the mount's root.
std::optional<MemoryLimit> SmallestLimit(const CgroupMount& mount, std::string path, const std::string& file) {
  // A path outside the mounted part of the hierarchy (another cgroup namespace) is read from the top.
  if (mount.root != "/" && path.starts_with(mount.root)) path = path.substr(mount.root.size());
  if (!path.starts_with("/")) path = "/" + path;
  std::optional<MemoryLimit> best;
  while (true) {
    std::string dir = mount.point + (path == "/" ? "" : path);
    std::string limit_file = dir + "/" + file;
    if (std::optional<uint64_t> v = ReadLimitFile(limit_file); v && (!best || *v < best->bytes)) {
      best = MemoryLimit{*v, limit_file};
    }
    if (path == "/") break;
    path = path.substr(0, path.rfind('/'));
    if (path.empty()) path = "/";
  }
  return best;
}

}  // namespace

std::optional<MemoryLimit> FindCgroupMemoryLimit(const CgroupPaths& paths) {
  std::ifstream in(paths.proc_self_cgroup);
  std::string line;
  std::optional<std::string> v2_path, v1_path;
  while (std::getline(in, line)) {
    // "hierarchy-id:controllers:path"; v2 is "0::path".
    const size_t first = line.find(':');
    const size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.substr(0, first) == "0" && controllers.empty()) v2_path = path;
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');) {
      if (c == "memory") v1_path = path;
    }
  }
  // Where v1 has the memory controller, v2's memory.max is absent (hybrid hosts).
  if (v1_path) {
    if (std::optional<CgroupMount> mount = FindMount(paths.proc_self_mountinfo, /*v2=*/false)) {
      return SmallestLimit(*mount, *v1_path, "memory.limit_in_bytes");
    }
  }
  if (v2_path) {
    if (std::optional<CgroupMount> mount = FindMount(paths.proc_self_mountinfo, /*v2=*/true)) {
      return SmallestLimit(*mount, *v2_path, "memory.max");
    }
  }
  return std::nullopt;
}

static_assert(kCgroupCacheFraction == 0.75, "the note below says 3/4");

StatusOr<std::string> FitCacheToMemoryLimit(MountOptions& options, const std::optional<MemoryLimit>& limit) {
  if (!limit) return std::string();
  const uint64_t mib = 1ull << 20;
  const uint64_t usable = limit->bytes > kMountOverhead ? limit->bytes - kMountOverhead : 0;
  if (options.given.contains("cache_size")) {
    // A cache the limit cannot hold gets the process killed on a later read,
    // taking the mount with it: refused now, saying what fits.
    if (options.engine.cache_size <= usable) return std::string();
    return InvalidArgumentError(
        "cache_size=" + std::to_string(options.engine.cache_size / mib) + "M does not fit the memory limit of this "
        "cgroup (" + std::to_string(limit->bytes / mib) + " MiB, " + limit->file + "): the cache and tensorfs's ~" +
        std::to_string(kMountOverhead / mib) + " MiB of overhead must stay under it; set cache_size to at most " +
        std::to_string(usable / mib) + "M (leave out cache_size for " +
        std::to_string(static_cast<uint64_t>(static_cast<double>(usable) * kCgroupCacheFraction) / mib) +
        "M, which leaves room for the page cache), or raise the container's memory limit");
  }
  // Whole MiB, so that the value reads back as an option.
  const uint64_t derived = static_cast<uint64_t>(static_cast<double>(usable) * kCgroupCacheFraction) / mib * mib;
  if (derived >= options.engine.cache_size) return std::string();
  if (derived < kMinDerivedCache) {
    return InvalidArgumentError("the memory limit of this cgroup (" + std::to_string(limit->bytes / mib) +
                                " MiB, " + limit->file + ") leaves too little for a cache beside tensorfs's ~" +
                                std::to_string(kMountOverhead / mib) +
                                " MiB of overhead: raise the container's memory limit, or set cache_size");
  }
  const uint64_t before = options.engine.cache_size;
  options.engine.cache_size = derived;
  return "cache_size=" + std::to_string(derived / mib) + "M (default " + std::to_string(before / mib) +
         "M): 3/4 of the cgroup memory limit " + std::to_string(limit->bytes / mib) + " MiB (" + limit->file +
         ") less " + std::to_string(kMountOverhead / mib) + " MiB of overhead; set cache_size to choose another";
}

}  // namespace tensorfs
