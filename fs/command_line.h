// The tensorfs command line, defined once: the mount's options (the option
// table of core/options/mount_options.h, under its group headings), the few
// flags of the command itself, and the subcommands. `tensorfs --help`, each
// subcommand's --help and the tensorfs(8) man page are rendered from these
// definitions, so none of them can list an option the others lack.
//
// CLI11 2.1 neither wraps nor groups the way a terminal needs: RenderHelp lays
// the text out itself, every line within kHelpWidth columns.
//
// Thread-safety: build, parse and render on one thread.
#ifndef TENSORFS_FS_COMMAND_LINE_H_
#define TENSORFS_FS_COMMAND_LINE_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/options/mount_options.h"

namespace tensorfs {

inline constexpr size_t kHelpWidth = 100;

// What a command line asked for. Each subcommand's fields are set only when it
// was parsed (see CLI::App::parsed on the subcommand of that name).
struct CommandLine {
  // tensorfs SOURCE MOUNTPOINT [options]
  MountOptions mount;
  std::vector<std::string> o_lists;  // each -o, in order
  // Options given as flags (--cache-size 4G, -f), in command-line order.
  std::vector<std::pair<std::string, std::optional<std::string>>> flags;
  bool print_mount_params = false;
  bool version = false;

  // tensorfs inspect SOURCE
  MountOptions inspect;
  std::vector<std::string> inspect_o_lists;
  bool inspect_json = false;
  std::string inspect_layer_regex;

  // tensorfs stats MOUNTPOINT
  std::string stats_mountpoint;
  bool stats_json = false;

  // tensorfs handoff SOCKET_DIR
  std::string handoff_dir;
  int handoff_wait_s = 30;

  // tensorfs gke-sidecar [--tmp-dir DIR] (other arguments: the subcommand's remaining())
  std::string gke_tmp_dir = "/gcsfuse-tmp";
};

// The command, parsing into `line` (which must outlive it), with RenderHelp as
// the --help of the command and of every subcommand.
std::unique_ptr<CLI::App> MakeCommandLine(CommandLine& line);

// The --help text of `app`: the command made by MakeCommandLine or one of its
// subcommands. Every line fits in kHelpWidth columns.
std::string RenderHelp(const CLI::App& app);

// The tensorfs(8) man page (roff, man macros) of the command made by
// MakeCommandLine, for tensorfs `version`.
std::string RenderManPage(const CLI::App& app, std::string_view version);

// `mount-s3 --help` (tensorfs run as mount-s3, fs/mount_s3.h): the usage and
// what becomes of each of mount-s3's options (MountS3Options()). Every line
// fits in kHelpWidth columns.
std::string RenderMountS3Help();

}  // namespace tensorfs

#endif  // TENSORFS_FS_COMMAND_LINE_H_
