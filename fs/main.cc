// The tensorfs command: mount a checkpoint source, or inspect one.
//
//   tensorfs SOURCE MOUNTPOINT [options]
//   tensorfs inspect SOURCE [--json]
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/engine/read_engine.h"
#include "core/metrics/metrics.h"
#include "core/metrics/prometheus.h"
#include "core/options/mount_helper.h"
#include "core/options/mount_options.h"
#include "core/safetensors/inspect.h"
#include "core/store/open_store.h"
#include "core/util/log_limiter.h"
#include "core/util/logging.h"
#include "core/vfs/namespace.h"
#include "fs/daemon.h"
#include "fs/fuse_server.h"
#include "fs/mount_recovery.h"
#include "fs/service_notifier.h"
#include "fs/stats.h"

namespace tensorfs {
namespace {

constexpr char kDescription[] =
    "tensorfs mounts safetensors checkpoints from Google Cloud Storage or a local directory, read-only,\n"
    "for loaders that open, read and mmap the files.\n\n"
    "  tensorfs SOURCE MOUNTPOINT [options]   mount (in the background unless -f)\n"
    "  tensorfs inspect SOURCE [--json]       print a checkpoint's files, tensors and layers\n"
    "  tensorfs stats MOUNTPOINT [--json]     print a mount's requests, bytes, cache and latency\n\n"
    "SOURCE is a local directory or gs://bucket[/prefix]. Options can also be given fstab-style:\n"
    "-o name[=value],...";

int Fail(const Status& status) {
  std::fprintf(stderr, "tensorfs: %s\n", status.message().c_str());
  return 1;
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

int RunMount(const MountOptions& options) {
  Daemon daemon;
  if (!options.foreground) daemon.Start();  // before any thread exists
  auto fail = [&](const Status& status) {
    if (options.foreground) return Fail(status);
    daemon.Failed(status.message());  // the waiting parent prints it
    return 1;
  };
  Metrics metrics;  // outlives the store and the engine, which count into it
  StatusOr<std::unique_ptr<ObjectStore>> store = OpenStore(options, &metrics);
  if (!store.ok()) return fail(store.status());
  EngineOptions engine_options = options.engine;
  if (const char* trace = std::getenv("TENSORFS_TRACE_READS")) engine_options.trace_reads = trace;  // see read_trace.h
  ReadEngine engine(**store, engine_options, metrics);
  StatusOr<LayerGrouper> grouper = LayerGrouper::Create(options.layer_regex);
  if (!grouper.ok()) return fail(grouper.status());
  Namespace ns(**store, engine,
               ViewOptions{.kinds = options.views,
                           .grouper = std::make_shared<const LayerGrouper>(std::move(*grouper)),
                           .prefetch_window = options.engine.prefetch_window});
  if (Status s = ns.CheckReachable(); !s.ok()) return fail(s);
  StatusOr<std::unique_ptr<FuseServer>> server = FuseServer::Mount(ns, options, metrics);
  if (!server.ok()) return fail(server.status());
  std::unique_ptr<PrometheusServer> prometheus;
  if (options.prometheus_port != 0) {
    StatusOr<std::unique_ptr<PrometheusServer>> started = PrometheusServer::Start(metrics, options.prometheus_port);
    if (!started.ok()) {
      server->reset();  // unmount before the waiting parent reports the failure
      return fail(started.status());
    }
    prometheus = std::move(*started);
    spdlog::info("serving metrics at http://127.0.0.1:{}/metrics", prometheus->port());
  }
  ServiceNotifier notifier(options.source, options.mountpoint);  // systemd: READY=1, STOPPING=1
  (*server)->OnStopping([&notifier] { notifier.Stopping(); });
  daemon.Ready();
  notifier.NotifyWhenServing();
  Status status = (*server)->Run();
  if (!status.ok()) spdlog::error("{}", status.message());
  // Unmounted. Fetches still retrying against a slow server hold nothing worth
  // waiting for (the mount is read-only): leave without joining them, after
  // reporting the warnings the rate limiters held back.
  FlushHeldBackWarnings();
  spdlog::default_logger()->flush();
  std::_Exit(status.ok() ? 0 : 1);
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
  if (!options.source.empty() && !options.source.starts_with("gs://")) make_absolute(options.source);
  if (!options.mountpoint.empty()) make_absolute(options.mountpoint);
  SetUpLogging(options.log_level);
  // A mount point left dead by a tensorfs that was killed would fail validation.
  if (StatusOr<bool> recovered = RecoverDeadMountPoint(options.mountpoint); !recovered.ok()) {
    return Fail(recovered.status());
  }
  if (Status s = ValidateMountOptions(options); !s.ok()) {
    std::fprintf(stderr, "tensorfs: %s\nRun tensorfs --help for usage.\n", s.message().c_str());
    return 1;
  }
  return RunMount(options);
}

// mount(8) runs /sbin/mount.tensorfs SOURCE DIR [-sfnv] [-o OPTIONS] for
// `mount -t tensorfs` and fstab lines; see core/options/mount_helper.h.
int RunMountHelper(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  StatusOr<MountHelperArgs> helper = ParseMountHelperArgs(args);
  if (!helper.ok()) return Fail(helper.status());
  for (const std::string& warning : helper->warnings) std::fprintf(stderr, "mount.tensorfs: %s\n", warning.c_str());
  if (helper->verbose) {
    std::fprintf(stderr, "mount.tensorfs: tensorfs %s %s -o %s\n", helper->source.c_str(),
                 helper->mountpoint.c_str(), helper->options.c_str());
  }
  MountOptions options;
  options.source = helper->source;
  options.mountpoint = helper->mountpoint;
  if (Status s = ApplyMountOptionList(options, helper->options); !s.ok()) return Fail(s);
  if (helper->fake) {  // mount -f: check everything, mount nothing
    if (Status s = ValidateMountOptions(options); !s.ok()) return Fail(s);
    return 0;
  }
  return ValidateAndMount(options);
}

int Main(int argc, char** argv) {
  if (argc > 0 && IsMountHelperInvocation(argv[0])) return RunMountHelper(argc, argv);
  CLI::App app(kDescription, "tensorfs");
  app.set_help_flag("-h,--help", "print this help and exit");
  app.require_subcommand(0, 1);

  MountOptions options;
  std::vector<std::pair<std::string, std::optional<std::string>>> given;  // in command-line order
  app.add_option("SOURCE", options.source, "local directory or gs://bucket[/prefix] holding the checkpoint(s)");
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
  inspect->add_option("-o", inspect_o_lists, "source options, e.g. -o endpoint=URL,key_file=PATH")
      ->type_name("OPTS")
      ->allow_extra_args(false);
  inspect->add_option("SOURCE", inspect_options.source, "checkpoint directory or gs://bucket/prefix")->required();
  inspect->add_flag("--json", inspect_json, "print JSON for machines");
  inspect->add_option("--layer-regex", inspect_regex, "override the layer grouping (see tensorfs --help)");

  CLI::App* stats = app.add_subcommand("stats", "print a mount's counters: requests issued, bytes fetched "
                                                "and served, cache hits, misses and evictions, fetch latency, "
                                                "retries by cause, reads failed with EIO");
  std::string stats_mountpoint;
  bool stats_json = false;
  stats->add_option("MOUNTPOINT", stats_mountpoint, "a tensorfs mount point")->required();
  stats->add_flag("--json", stats_json, "print JSON for machines");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (stats->parsed()) return RunStats(stats_mountpoint, stats_json);
  if (inspect->parsed()) {
    for (const std::string& list : inspect_o_lists) {
      if (Status s = ApplyMountOptionList(inspect_options, list); !s.ok()) return Fail(s);
    }
    return RunInspect(inspect_options, inspect_json, inspect_regex);
  }

  for (const std::string& list : o_lists) {
    if (Status s = ApplyMountOptionList(options, list); !s.ok()) return Fail(s);
  }
  for (const auto& [name, value] : given) {
    if (Status s = ApplyMountOption(options, name, value); !s.ok()) return Fail(s);
  }
  return ValidateAndMount(options);
}

}  // namespace
}  // namespace tensorfs

int main(int argc, char** argv) { return tensorfs::Main(argc, argv); }
