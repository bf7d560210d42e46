// The tensorfs command: mount a checkpoint source, or inspect one.
//
//   tensorfs SOURCE MOUNTPOINT [options]
//   tensorfs inspect SOURCE [--json]
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/options/mount_options.h"
#include "core/safetensors/inspect.h"
#include "core/store/open_store.h"
#include "core/vfs/namespace.h"
#include "fs/daemon.h"
#include "fs/fuse_server.h"

namespace tensorfs {
namespace {

constexpr char kDescription[] =
    "tensorfs mounts a directory of safetensors checkpoints read-only, for loaders that open, read "
    "and mmap the files.\n\n"
    "  tensorfs SOURCE MOUNTPOINT [options]   mount (in the background unless -f)\n"
    "  tensorfs inspect SOURCE [--json]       print a checkpoint's files, tensors and layers\n\n"
    "SOURCE is a local directory or gs://bucket[/prefix]. Options can also be given fstab-style:\n"
    "-o name[=value],...";

void SetUpLogging(const std::string& level) {
  auto logger = spdlog::stderr_color_mt("tensorfs");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  spdlog::set_level(spdlog::level::from_str(level));
}

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
  // A corrupt file is reported, and makes the command fail so scripts notice.
  return report->AllFilesOk() ? 0 : 2;
}

int RunMount(const MountOptions& options) {
  Daemon daemon;
  if (!options.foreground) daemon.Start();  // before any thread exists
  auto fail = [&](const Status& status) {
    if (options.foreground) return Fail(status);
    daemon.Failed(status.message());  // the waiting parent prints it
    return 1;
  };
  StatusOr<std::unique_ptr<ObjectStore>> store = OpenStore(options);
  if (!store.ok()) return fail(store.status());
  Namespace ns(**store);
  if (Status s = ns.CheckReachable(); !s.ok()) return fail(s);
  StatusOr<std::unique_ptr<FuseServer>> server = FuseServer::Mount(ns, options);
  if (!server.ok()) return fail(server.status());
  daemon.Ready();
  Status status = (*server)->Run();
  if (!status.ok()) {
    spdlog::error("{}", status.message());
    return 1;
  }
  return 0;
}

int Main(int argc, char** argv) {
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

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
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
  if (Status s = ValidateMountOptions(options); !s.ok()) {
    std::fprintf(stderr, "tensorfs: %s\nRun tensorfs --help for usage.\n", s.message().c_str());
    return 1;
  }
  SetUpLogging(options.log_level);
  return RunMount(options);
}

}  // namespace
}  // namespace tensorfs

int main(int argc, char** argv) { return tensorfs::Main(argc, argv); }
