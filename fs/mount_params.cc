#include "fs/mount_params.h"

#include <sys/mount.h>

#include <vector>

#include "core/engine/readahead_policy.h"
#include "fs/fuse_server.h"

namespace tensorfs {

// The kernel's readahead of a FUSE mount when nobody sets it.
constexpr unsigned kKernelDefaultReadAheadKb = 128;

MountParams MountParamsFor(const MountOptions& options, uid_t uid, gid_t gid) {
  MountParams p;
  p.fstype = "fuse.tensorfs";
  p.flags = MS_NOSUID | MS_NODEV | MS_RDONLY;
  p.flag_names = "MS_NOSUID|MS_NODEV|MS_RDONLY";
  p.data = "rootmode=40000,user_id=" + std::to_string(uid) + ",group_id=" + std::to_string(gid) +
           ",default_permissions,max_read=" + std::to_string(FuseServer::kMaxRead);
  if (options.allow_other || options.allow_root) p.data += ",allow_other";  // allow_root: libfuse refuses the others
  // The readahead the mount's files start with (readahead_policy.h); serving a
  // descriptor, tensorfs cannot change it later, so it stays.
  const uint64_t wanted = ReadaheadPolicy(ReadaheadPolicy::ForMount(options.given.contains("read_ahead"),
                                                                    options.read_ahead, options.engine.shard_world))
                              .Wanted();
  p.read_ahead_kb = wanted == 0 ? kKernelDefaultReadAheadKb : static_cast<unsigned>(wanted >> 10);
  return p;
}

std::string RenderMountParams(const MountParams& p) {
  return "# The mount tensorfs wants when it serves a descriptor: tensorfs SOURCE /dev/fd/N.\n"
         "# Open /dev/fuse read-write as N, mount(\"SOURCE\", DIR, fstype, flags, \"fd=N,\" + data),\n"
         "# write read_ahead_kb to /sys/class/bdi/MAJOR:MINOR/read_ahead_kb (the mount's device),\n"
         "# then hand N to tensorfs.\n"
         "fstype=" + p.fstype + "\n" +
         "flags=" + p.flag_names + "\n" +
         "data=" + p.data + "\n" +
         "read_ahead_kb=" + std::to_string(p.read_ahead_kb) + "\n";
}

std::string KernelMountOptionsNote(const MountOptions& options) {
  std::vector<std::string> parts;
  if (options.given.contains("allow_other")) {
    parts.push_back("allow_other (put allow_other in the mount data)");
  }
  if (options.given.contains("read_ahead")) {
    parts.push_back("read_ahead (write " + std::to_string(options.read_ahead >> 10) +
                    " to the mount's /sys/class/bdi/MAJOR:MINOR/read_ahead_kb)");
  }
  if (options.given.contains("ro")) {
    parts.push_back("ro (mount with MS_RDONLY; tensorfs refuses writes either way)");
  }
  if (parts.empty()) return "";
  std::string list;
  for (const std::string& part : parts) list += (list.empty() ? "" : ", ") + part;
  return "serving a descriptor, tensorfs cannot change the kernel mount, so it ignores " + list +
         ": the parent that mounted sets these (see tensorfs --print-mount-params)";
}

}  // namespace tensorfs
