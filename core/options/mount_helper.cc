#include "core/options/mount_helper.h"

#include <algorithm>
#include <array>

#include "core/options/mount_options.h"

namespace tensorfs {
namespace {

// mount(8), fstab and systemd options with no meaning for tensorfs (see the header).
constexpr std::array<std::string_view, 37> kDropped = {
    "ro",         "defaults",    "auto",        "noauto",      "user",     "nouser",    "users",
    "owner",      "group",       "_netdev",     "nofail",      "exec",     "noexec",    "suid",
    "nosuid",     "dev",         "nodev",       "sync",        "async",    "dirsync",   "atime",
    "noatime",    "diratime",    "nodiratime",  "relatime",    "norelatime", "strictatime",
    "nostrictatime", "lazytime", "nolazytime",  "iversion",    "noiversion", "mand",    "nomand",
    "loud",       "silent",      "nosymfollow",
};

bool IsDropped(std::string_view name) {
  if (name.starts_with("x-") || name == "comment") return true;
  return std::find(kDropped.begin(), kDropped.end(), name) != kDropped.end();
}

bool IsTensorfsOption(std::string_view name) {
  for (const OptionSpec& spec : AllMountOptions()) {
    if (spec.name == name) return true;
  }
  return false;
}

// Splits at commas that are not escaped as "\,"; items keep their escapes.
std::vector<std::string_view> SplitOptionList(std::string_view list) {
  std::vector<std::string_view> items;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    if (i < list.size() && list[i] == '\\' && i + 1 < list.size()) {
      ++i;  // skip the escaped character
      continue;
    }
    if (i == list.size() || list[i] == ',') {
      if (i > start) items.push_back(list.substr(start, i - start));
      start = i + 1;
    }
  }
  return items;
}

constexpr char kReadOnlyWarning[] = "tensorfs is read-only: mounting read-only (give -o ro to silence this)";

}  // namespace

bool IsMountHelperInvocation(std::string_view argv0) {
  size_t slash = argv0.rfind('/');
  std::string_view base = slash == std::string_view::npos ? argv0 : argv0.substr(slash + 1);
  return base == kMountHelperName;
}

std::string FilterMountHelperOptions(std::string_view list, bool sloppy, std::vector<std::string>& warnings) {
  std::string out;
  for (std::string_view item : SplitOptionList(list)) {
    std::string_view name = item.substr(0, item.find('='));
    if (IsDropped(name)) continue;
    if (name == "rw") {
      if (std::find(warnings.begin(), warnings.end(), kReadOnlyWarning) == warnings.end()) {
        warnings.emplace_back(kReadOnlyWarning);
      }
      continue;
    }
    if (sloppy && !IsTensorfsOption(name)) {
      warnings.push_back("ignoring unknown option '" + std::string(item) + "' (sloppy mount)");
      continue;
    }
    if (!out.empty()) out += ',';
    out += item;
  }
  return out;
}

StatusOr<MountHelperArgs> ParseMountHelperArgs(std::span<const std::string> args) {
  MountHelperArgs result;
  std::vector<std::string> positional;
  std::vector<std::string> option_lists;
  bool sloppy = false;
  bool read_write = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 2 || arg[0] != '-') {
      positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      positional.insert(positional.end(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      break;
    }
    // Short flags, possibly combined ("-sfnv"); -o, -t and -N take a value,
    // attached ("-oro") or as the next argument.
    for (size_t j = 1; j < arg.size(); ++j) {
      char flag = arg[j];
      if (flag == 'o' || flag == 't' || flag == 'N') {
        std::string value;
        if (j + 1 < arg.size()) {
          value = arg.substr(j + 1);
        } else if (i + 1 < args.size()) {
          value = args[++i];
        } else {
          return InvalidArgumentError(std::string("-") + flag + " needs a value");
        }
        if (flag == 'o') option_lists.push_back(value);
        if (flag == 'N') {
          return InvalidArgumentError("-N (mounting in another mount namespace) is not supported");
        }
        break;  // -t: the type is tensorfs[.subtype]; nothing to do
      }
      switch (flag) {
        case 's': sloppy = true; break;
        case 'f': result.fake = true; break;
        case 'n': break;  // no mtab to write: /etc/mtab is /proc/self/mounts
        case 'v': result.verbose = true; break;
        case 'r': break;  // read-only, as always
        case 'w': read_write = true; break;
        default:
          return InvalidArgumentError(std::string("unknown flag -") + flag +
                                      " (usage: mount.tensorfs SOURCE DIR [-sfnv] [-o OPTIONS])");
      }
    }
  }
  if (positional.size() != 2) {
    return InvalidArgumentError("expected SOURCE and DIR (usage: mount.tensorfs SOURCE DIR "
                                "[-sfnv] [-o OPTIONS]), got " + std::to_string(positional.size()) +
                                " arguments");
  }
  result.source = positional[0];
  result.mountpoint = positional[1];
  if (read_write) result.warnings.emplace_back(kReadOnlyWarning);
  for (const std::string& list : option_lists) {
    std::string filtered = FilterMountHelperOptions(list, sloppy, result.warnings);
    if (filtered.empty()) continue;
    if (!result.options.empty()) result.options += ',';
    result.options += filtered;
  }
  return result;
}

}  // namespace tensorfs
