// The tensorfs command: mount a checkpoint source, or inspect one.
//
//   tensorfs SOURCE MOUNTPOINT [options]
//   tensorfs inspect SOURCE [--json]
//   tensorfs stats MOUNTPOINT [--json]
//   tensorfs handoff SOCKET_DIR
//   tensorfs gke-sidecar [--tmp-dir DIR]
//   mount-s3 BUCKET /dev/fd/N [--foreground] [OPTIONS]   (argv[0] mount-s3: fs/mount_s3.h)
//
// The command line itself is defined in fs/command_line.h.
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
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
#include "core/views/gguf_view.h"
#include "fs/command_line.h"
#include "fs/exit_status.h"
#include "fs/gke_sidecar.h"
#include "fs/handoff.h"
#include "fs/mount_params.h"
#include "fs/mount_s3.h"
#include "fs/startup.h"
#include "fs/stats.h"
#include "fs/version.h"

namespace tensorfs {
namespace {

int Fail(const Status& status) {
  std::fprintf(stderr, "tensorfs: %s\n", status.message().c_str());
  return 1;
}

// An invalid command line or option of a mount: a permanent error.
// `help` is the command whose --help lists the options.
int FailUsage(const MountOptions& options, const Status& status, std::string_view help = "tensorfs") {
  const bool names_help = status.message().find("--help") != std::string::npos;
  return FailStartup(options, ExitStatus::kUsage,
                     names_help ? status
                                : Status(status.code(), status.message() + " (see " + std::string(help) + " --help)"));
}

int RunInspect(const MountOptions& options, bool json, const std::string& layer_regex) {
  StatusOr<std::unique_ptr<ObjectStore>> store = OpenStore(options);
  if (!store.ok()) return Fail(store.status());
  StatusOr<InspectReport> report = Inspect(**store, "", layer_regex);
  if (!report.ok()) return Fail(report.status());
  report->gguf = DescribeGgufOf(**store, "", GgufNameOfSource(options.source));
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

// Who started the mount: a person or fstab (logs on stderr), or Mountpoint's
// CSI driver as mount-s3 (logs on stdout, errors on stderr: it keeps stderr
// for the user to see when the mount fails).
enum class Caller { kTensorfs, kMountS3 };

// What `tensorfs SOURCE DIR`, mount.tensorfs and mount-s3 share once options are parsed.
int ValidateAndMount(MountOptions options, Caller caller = Caller::kTensorfs) {
  // The background process changes to /: relative paths would break there.
  auto make_absolute = [](std::string& path) {
    std::error_code ec;
    std::filesystem::path p = std::filesystem::absolute(path, ec).lexically_normal();
    if (!p.has_filename() && p.has_relative_path()) p = p.parent_path();  // "dir/" -> "dir"
    if (!ec) path = p.string();
  };
  if (!options.source.empty() && !IsObjectStoreSource(options.source)) make_absolute(options.source);
  if (!options.mountpoint.empty()) make_absolute(options.mountpoint);
  if (caller == Caller::kTensorfs) SetUpLogging(options.log_level);  // mount-s3 has set up its own
  if (Status s = ValidateMountOptions(options); !s.ok()) {
    return FailUsage(options, s, caller == Caller::kMountS3 ? "mount-s3" : "tensorfs");
  }
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

// Mountpoint for Amazon S3's command line, as its CSI driver runs it; see fs/mount_s3.h.
int RunMountS3(int argc, char** argv) {
  // The process is the driver's "mount-s3" (it may run through the bundle's
  // loader, whose name the kernel would show).
  ::prctl(PR_SET_NAME, "mount-s3", 0, 0, 0);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // the pod's log, line by line
  StatusOr<MountS3Command> command = TranslateMountS3(std::vector<std::string>(argv + 1, argv + argc));
  if (!command.ok()) {
    const std::string text = MountS3UsageError(command.status().message());
    std::fwrite(text.data(), 1, text.size(), stderr);
    return static_cast<int>(ExitStatus::kUsage);
  }
  if (command->action == MountS3Command::Action::kHelp) {
    const std::string text = RenderMountS3Help();
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (command->action == MountS3Command::Action::kVersion) {
    std::printf("%s, as mount-s3\n", VersionLine().c_str());
    return 0;
  }
  SetUpSplitLogging(command->options.log_level);
  for (const std::string& note : command->notes) spdlog::info("{}", note);
  if (const char* attempts = std::getenv("AWS_MAX_ATTEMPTS"); attempts != nullptr && *attempts != '\0') {
    spdlog::info("ignoring AWS_MAX_ATTEMPTS={}: tensorfs retries a request's transient failures for "
                 "retry_deadline ({:.0f} s) instead",
                 attempts, command->options.retry_deadline_s);
  }
  return ValidateAndMount(std::move(command->options), Caller::kMountS3);
}

int Main(int argc, char** argv) {
  if (argc > 0 && IsMountHelperInvocation(argv[0])) return RunMountHelper(argc, argv);
  if (argc > 0 && IsMountS3Invocation(argv[0])) return RunMountS3(argc, argv);
  CommandLine line;
  std::unique_ptr<CLI::App> app = MakeCommandLine(line);
  try {
    app->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app->exit(e);  // --help is a "success" ParseError
    return rc == 0 ? 0 : static_cast<int>(ExitStatus::kUsage);
  }
  if (line.version) {
    std::printf("%s\n", VersionLine().c_str());
    return 0;
  }
  // What the subcommands log goes to stderr: their stdout is the report (JSON with --json).
  if (app->got_subcommand("stats")) {
    SetUpLogging("info");
    return RunStats(line.stats_mountpoint, line.stats_json);
  }
  if (app->got_subcommand("handoff")) {
    SetUpLogging("info");
    return RunHandoff(line.handoff_dir, std::chrono::seconds(line.handoff_wait_s));
  }
  if (app->got_subcommand("gke-sidecar")) {
    // Children inherit the environment: their log lines must have the shape
    // the sidecar relays (a container has no systemd to talk to anyway).
    ::unsetenv("NOTIFY_SOCKET");
    ::unsetenv("JOURNAL_STREAM");
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // a line relayed is a line seen
    SetUpSplitLogging("info");
    return RunGkeSidecar(GkeSidecarOptionsFrom(line.gke_tmp_dir, app->get_subcommand("gke-sidecar")->remaining(),
                                               std::getenv("NATIVE_SIDECAR")));
  }
  if (app->got_subcommand("inspect")) {
    SetUpLogging("info");
    for (const std::string& list : line.inspect_o_lists) {
      if (Status s = ApplyMountOptionList(line.inspect, list); !s.ok()) return Fail(s);
    }
    return RunInspect(line.inspect, line.inspect_json, line.inspect_layer_regex);
  }

  MountOptions& options = line.mount;
  std::vector<std::string>& o_lists = line.o_lists;
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
  for (const auto& [name, value] : line.flags) {
    if (Status s = ApplyMountOption(options, name, value); !s.ok()) return FailUsage(options, s);
  }
  if (line.print_mount_params) {
    std::string text = RenderMountParams(MountParamsFor(options, ::getuid(), ::getgid()));
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  return ValidateAndMount(options);
}

}  // namespace
}  // namespace tensorfs

int main(int argc, char** argv) { return tensorfs::Main(argc, argv); }
