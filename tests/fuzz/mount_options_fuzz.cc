// libFuzzer target: the mount-option parsers. The bytes are a NUL-separated
// argument list: the first is applied as a tensorfs -o list to a default
// MountOptions (then fitted to the cache, as start-up does), and the whole
// list is parsed as the mount(8) helper's command line, whose resulting -o
// list is applied in turn. Every path returns a Status; none may crash.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/options/mount_helper.h"
#include "core/options/mount_options.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensorfs;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  size_t start = 0;
  while (start <= text.size()) {
    size_t nul = text.find('\0', start);
    if (nul == std::string_view::npos) nul = text.size();
    args.emplace_back(text.substr(start, nul - start));
    start = nul + 1;
  }

  MountOptions options;
  if (ApplyMountOptionList(options, args.front()).ok()) (void)FitEngineToCache(options);

  StatusOr<MountHelperArgs> helper = ParseMountHelperArgs(args);
  if (helper.ok()) {
    MountOptions from_helper;
    if (ApplyMountOptionList(from_helper, helper->options).ok()) (void)FitEngineToCache(from_helper);
  }
  return 0;
}
