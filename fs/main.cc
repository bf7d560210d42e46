// The tensorfs command: mount a checkpoint source, or inspect one.
//
//   tensorfs SOURCE MOUNTPOINT [options]
//   tensorfs inspect SOURCE [--json]
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/options/mount_helper.h"
#include "core/options/mount_options.h"
#include "core/safetensors/inspect.h"
#include "core/store/open_store.h"
#include "core/util/logging.h"
#include "fs/exit_status.h"
#include "fs/gke_sidecar.h"
#include "fs/handoff.h"
#include "fs/mount_params.h"
#include "fs/startup.h"
#include "fs/stats.h"

namespace tensorfs {
namespace {

constexpr char kDescription[] =
    "tensorfs mounts safetensors checkpoints from Google Cloud Storage, Amazon S3 (or an S3-compatible\n"
    "store) or a local directory, read-only, for loaders that open, read and mmap the files.\n\n"
    "  tensorfs SOURCE MOUNTPOINT [options]   mount (in the background unless -f)\n"
    "  tensorfs inspect SOURCE [--json]       print a checkpoint's files, tensors and layers\n"
    "  tensorfs stats MOUNTPOINT [--json]     print a mount's requests, bytes, cache and latency\n"
    "  tensorfs handoff SOCKET_DIR            serve the mounts a node plugin hands over (see README)\n"
    "  tensorfs gke-sidecar [--tmp-dir DIR]   be the gke-gcsfuse-sidecar of GKE's Cloud Storage FUSE CSI\n"
    "                                         driver (see docs/GKE.md)\n\n"
    "SOURCE is a local directory, gs://bucket[/prefix] or s3://bucket[/prefix]. MOUNTPOINT is a\n"
    "directory, or /dev/fd/N: a /dev/fuse descriptor that a parent has opened and mounted (fd=N) and\n"
    "hands over; tensorfs then serves it without mounting or privileges. Options can also be given\n"
    "fstab-style: -o name[=value],...\n\n";

int Fail(const Status& status) {
  std::fprintf(stderr, "tensorfs: %s\n", status.message().c_str());
  return 1;
}

// An invalid command line or option of a mount: a permanent error.
int FailUsage(const MountOptions& options, const Status& status) {
  const bool names_help = status.message().find("--help") != std::string::npos;
  return FailStartup(options, ExitStatus::kUsage,
                     names_help ? status : Status(status.code(), status.message() + " (see tensorfs --help)"));
}

int RunInspect(const MountOptions& options, bool json, const std::string& layer_regex) {
  StatusOr<std::unique_ptr<ObjectStore>> store = OpenStore(options);
  if (!store.ok()) return Fail(store.status());
  StatusOr<InspectReport> report = Inspect(**store, "", layer_regex);
  if (!report.ok()) return Fail(report.status());
  std::string text = json ? RenderInspectJson(*report) : RenderInspectText(*report);
  std::fwrite(text.data(), 1, text.size(), stdout);
  // A corrupt file (or an index that disagrees with the shards) is reported,
  // and makes the command fail so scripts notice.
  return report->ok() ? 0 : 2;
}

int RunStats(const std::string& mountpoint, bool json) {
  StatusOr<nlohmann::json> stats = ReadMountStats(mountpoint);
  if (!stats.ok()) return Fail(stats.status());
  std::string text = json ? stats->dump(2) + "\n" : RenderStatsText(*stats);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

// What `tensorfs SOURCE DIR` and mount.tensorfs share once options are parsed.
int ValidateAndMount(MountOptions options) {
  // The background process changes to /: relative paths would break there.
  auto make_absolute = [](std::string& path) {
    std::error_code ec;
    std::filesystem::path p = std::filesystem::absolute(path, ec).lexically_normal();
    if (!p.has_filename() && p.has_relative_path()) p = p.parent_path();  // "dir/" -> "dir"
    if (!ec) path = p.string();
  };
  if (!options.source.empty() && !IsObjectStoreSource(options.source)) make_absolute(options.source);
  if (!options.mountpoint.empty()) make_absolute(options.mountpoint);
  SetUpLogging(options.log_level);
  if (Status s = ValidateMountOptions(options); !s.ok()) return FailUsage(options, s);
  if (FuseFdOfMountPoint(options.mountpoint)) {  // the parent owns the kernel mount
    if (std::string note = KernelMountOptionsNote(options); !note.empty()) spdlog::warn("{}", note);
  }
  return MountAndServe(options);
}

// mount(8) runs /sbin/mount.tensorfs SOURCE DIR [-sfnv] [-o OPTIONS] for
// `mount -t tensorfs` and fstab lines; see core/options/mount_helper.h.
int RunMountHelper(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  StatusOr<MountHelperArgs> helper = ParseMountHelperArgs(args);
  if (!helper.ok()) return FailUsage(MountOptions{}, helper.status());
  for (const std::string& warning : helper->warnings) std::fprintf(stderr, "mount.tensorfs: %s\n", warning.c_str());
  if (helper->verbose) {
    std::fprintf(stderr, "mount.tensorfs: tensorfs %s %s -o %s\n", helper->source.c_str(),
                 helper->mountpoint.c_str(), helper->options.c_str());
  }
  MountOptions options;
  options.source = helper->source;
  options.mountpoint = helper->mountpoint;
  if (Status s = ApplyMountOptionList(options, helper->options); !s.ok()) return FailUsage(options, s);
  if (helper->fake) {  // mount -f: check everything, mount nothing
    if (Status s = ValidateMountOptions(options); !s.ok()) return FailUsage(options, s);
    if (Status s = CheckMountPointDirectory(options.mountpoint); !s.ok()) {
      return FailStartup(options, ExitStatus::kMountPoint, s);
    }
    return 0;
  }
  return ValidateAndMount(options);
}

int Main(int argc, char** argv) {
  if (argc > 0 && IsMountHelperInvocation(argv[0])) return RunMountHelper(argc, argv);
  CLI::App app(std::string(kDescription) + std::string(kExitStatusHelp), "tensorfs");
  app.set_help_flag("-h,--help", "print this help and exit");
  app.require_subcommand(0, 1);

  MountOptions options;
  std::vector<std::pair<std::string, std::optional<std::string>>> given;  // in command-line order
  app.add_option("SOURCE", options.source,
                 "local directory, gs://bucket[/prefix] or s3://bucket[/prefix] holding the checkpoint(s)");
  app.add_option("MOUNTPOINT", options.mountpoint, "existing directory to mount on");
  std::vector<std::string> o_lists;
  app.add_option("-o", o_lists, "comma-separated options, as in fstab: -o allow_other,log_level=debug")
      ->type_name("OPTS")
      ->allow_extra_args(false);
  app.add_flag_callback("-f", [&] { given.emplace_back("foreground", std::nullopt); }, "stay in the foreground");
  app.add_flag_callback("-d", [&] { given.emplace_back("debug", std::nullopt); },
                        "print every FUSE request (implies -f)");
  for (const OptionSpec& spec : AllMountOptions()) {
    std::string flag = "--" + std::string(spec.name);
    for (char& c : flag) c = c == '_' ? '-' : c;
    std::string name(spec.name);
    if (spec.value_name.empty()) {
      app.add_flag_callback(flag, [&given, name] { given.emplace_back(name, std::nullopt); },
                            std::string(spec.help));
    } else {
      app.add_option_function<std::string>(
             flag, [&given, name](const std::string& v) { given.emplace_back(name, v); },
             std::string(spec.help))
          ->type_name(std::string(spec.value_name));
    }
  }

  CLI::App* inspect = app.add_subcommand("inspect", "print a checkpoint's files, tensors, dtypes, shapes, "
                                                    "bytes and layer groups; a corrupt file's exact problem");
  MountOptions inspect_options;
  std::vector<std::string> inspect_o_lists;
  bool inspect_json = false;
  std::string inspect_regex;
  inspect->add_option("-o", inspect_o_lists, "source options, e.g. -o endpoint=URL,key_file=PATH or -o region=REGION")
      ->type_name("OPTS")
      ->allow_extra_args(false);
  inspect->add_option("SOURCE", inspect_options.source, "checkpoint directory, gs://bucket/prefix or s3://bucket/prefix")
      ->required();
  inspect->add_flag("--json", inspect_json, "print JSON for machines");
  inspect->add_option("--layer-regex", inspect_regex, "override the layer grouping (see tensorfs --help)");

  CLI::App* stats = app.add_subcommand("stats", "print a mount's counters: requests issued, bytes fetched "
                                                "and served, cache hits, misses and evictions, fetch latency, "
                                                "retries by cause, reads failed with EIO");
  std::string stats_mountpoint;
  bool stats_json = false;
  stats->add_option("MOUNTPOINT", stats_mountpoint, "a tensorfs mount point")->required();
  stats->add_flag("--json", stats_json, "print JSON for machines");

  CLI::App* handoff = app.add_subcommand("handoff", "serve the /dev/fuse descriptors a Kubernetes node plugin "
                                                    "hands over on the Unix sockets in SOCKET_DIR, one child "
                                                    "tensorfs per mount; exit when all have ended");
  std::string handoff_dir;
  int handoff_wait_s = 30;
  handoff->add_option("SOCKET_DIR", handoff_dir, "directory holding the node plugin's sockets")->required();
  handoff->add_option("--wait", handoff_wait_s, "seconds to wait for the first socket (default 30)");
  CLI::App* gke = app.add_subcommand("gke-sidecar", "be the gke-gcsfuse-sidecar container of GKE's Cloud Storage "
                                                    "FUSE CSI driver: serve each volume its node plugin hands over "
                                                    "under TMP/.volumes, one child tensorfs per volume");
  std::string gke_tmp_dir = "/gcsfuse-tmp";
  gke->add_option("--tmp-dir", gke_tmp_dir, "the pod's gke-gcsfuse-tmp emptyDir (default /gcsfuse-tmp)")
      ->type_name("DIR");
  gke->allow_extras();  // klog's --v=5, which the driver's webhook passes
  bool print_mount_params = false;
  app.add_flag("--print-mount-params", print_mount_params,
               "print the mount(2) data, flags and read_ahead_kb that a parent mounting for "
               "tensorfs SOURCE /dev/fd/N should apply, for the -o options given, and exit");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);  // --help is a "success" ParseError
    return rc == 0 ? 0 : static_cast<int>(ExitStatus::kUsage);
  }
  // What the subcommands log goes to stderr: their stdout is the report (JSON with --json).
  if (stats->parsed()) {
    SetUpLogging("info");
    return RunStats(stats_mountpoint, stats_json);
  }
  if (handoff->parsed()) {
    SetUpLogging("info");
    return RunHandoff(handoff_dir, std::chrono::seconds(handoff_wait_s));
  }
  if (gke->parsed()) {
    // Children inherit the environment: their log lines must have the shape
    // the sidecar relays (a container has no systemd to talk to anyway).
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("JOURNAL_STREAM");
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a line relayed is a line seen
    SetUpSplitLogging("info");
    return RunGkeSidecar(GkeSidecarOptionsFrom(gke_tmp_dir, gke->remaining(), std::getenv("NATIVE_SIDECAR")));
  }
  if (inspect->parsed()) {
    SetUpLogging("info");
    for (const std::string& list : inspect_o_lists) {
      if (Status s = ApplyMountOptionList(inspect_options, list); !s.ok()) return Fail(s);
    }
    return RunInspect(inspect_options, inspect_json, inspect_regex);
  }

  if (FuseFdOfMountPoint(options.mountpoint)) {
    // A parent such as mount.fuse3 -o drop_privileges hands the file system it
    // runs on /dev/fd/N its whole -o list, mount(8)'s generic flags (rw, dev,
    // suid...) included: drop those as mount.tensorfs does.
    std::vector<std::string> warnings;
    for (std::string& list : o_lists) list = FilterMountHelperOptions(list, /*sloppy=*/false, warnings);
    for (const std::string& warning : warnings) std::fprintf(stderr, "tensorfs: %s\n", warning.c_str());
  }
  for (const std::string& list : o_lists) {
    if (Status s = ApplyMountOptionList(options, list); !s.ok()) return FailUsage(options, s);
  }
  for (const auto& [name, value] : given) {
    if (Status s = ApplyMountOption(options, name, value); !s.ok()) return FailUsage(options, s);
  }
  if (print_mount_params) {
    std::string text = RenderMountParams(MountParamsFor(options, ::getuid(), ::getgid()));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  return ValidateAndMount(options);
}

}  // namespace
}  // namespace tensorfs

int main(int argc, char** argv) { return tensorfs::Main(argc, argv); }
