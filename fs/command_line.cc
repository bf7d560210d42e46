#include "fs/command_line.h"

#include <algorithm>
#include <span>

#include "fs/exit_status.h"
#include "fs/mount_s3.h"

namespace tensorfs {
namespace {

constexpr std::string_view kSummary =
    "mount safetensors checkpoints from GCS, S3 or a local directory, read-only";

// The command's own description, after its usage lines. Paragraphs are
// separated by a blank line.
constexpr std::string_view kMountDescription =
    "tensorfs serves safetensors checkpoints to loaders that open, read and mmap the files, from "
    "few large parallel range requests planned from each file's header.\n\n"
    "SOURCE is gs://bucket[/prefix], s3://bucket[/prefix] (Amazon S3 or an S3-compatible store) or a "
    "local directory. MOUNTPOINT is an existing directory, or "
    "/dev/fd/N: a /dev/fuse descriptor that a parent opened and mounted, which tensorfs then serves "
    "without mounting or privileges.\n\n"
    "Options are flags (--cache-size 4G) or, as in fstab, items of -o (-o cache_size=4G,allow_other).";

constexpr std::string_view kDetails =
    "Every option in detail: docs/CONFIGURATION.md, installed in /usr/share/doc/tensorfs/.";

constexpr std::string_view kGeneralGroup = "General";

constexpr std::string_view kMountS3Summary = "run as mount-s3 by Mountpoint for Amazon S3's CSI driver";
constexpr std::string_view kMountS3Description =
    "Named mount-s3 (the package's /usr/lib/tensorfs/bin/mount-s3, or the bundle packaging/build-eks-image.sh "
    "makes), tensorfs takes the command line of Mountpoint for Amazon S3, as the Mountpoint for Amazon S3 CSI "
    "driver runs it: mount-s3 BUCKET /dev/fd/N [OPTIONS], the /dev/fuse descriptor mounted by the driver's node "
    "plugin. BUCKET is a bucket name (with --prefix) or s3://BUCKET/PREFIX/. It serves s3://BUCKET/PREFIX as "
    "tensorfs s3://BUCKET/PREFIX /dev/fd/N would, logging on stdout and errors on stderr. tensorfs' own options "
    "travel as --tensorfs=OPTIONS, as for -o (a volume's mountOptions entry \"tensorfs cache_size=4G\"). "
    "How to deploy it: docs/EKS.md.";

// A subcommand's text beyond its options.
struct ExitStatusLine {
  int status;
  std::string_view meaning;
};
struct SubcommandDoc {
  std::string_view name;
  std::string_view usage;        // after "tensorfs "
  std::string_view summary;      // one line, for the command's usage list
  std::string_view description;  // paragraphs
  std::span<const ExitStatusLine> exit_statuses;
};

constexpr ExitStatusLine kInspectExit[] = {
    {0, "every file is valid"},
    {1, "the source cannot be opened or listed"},
    {2, "a file or the index is not valid; or an invalid command line"},
};
constexpr ExitStatusLine kStatsExit[] = {
    {0, "printed"},
    {1, "MOUNTPOINT is not a tensorfs mount, or its counters cannot be read"},
    {2, "an invalid command line"},
};
constexpr ExitStatusLine kHandoffExit[] = {
    {0, "every mount handed over ended cleanly"},
    {1, "SOCKET_DIR is not a directory, no socket appeared, or a mount failed (see SOCKET.error)"},
    {2, "an invalid command line"},
};

constexpr ExitStatusLine kGkeSidecarExit[] = {
    {0, "stopped; a volume's failure goes to its error file, never to the exit status"},
    {2, "the --tmp-dir given is not a directory; or an invalid command line"},
};

constexpr SubcommandDoc kSubcommands[] = {
    {"inspect", "inspect SOURCE [OPTIONS]", "print a checkpoint's files, tensors and layers",
     "Prints each file of SOURCE (a checkpoint directory, gs://bucket/prefix, s3://bucket/prefix, or a directory "
     "on a mount) with "
     "its tensors' dtypes, shapes and bytes, and the layer groups. For a file that is not valid "
     "safetensors it says what is wrong.",
     kInspectExit},
    {"stats", "stats MOUNTPOINT [--json]", "print a mount's requests, bytes, cache and latency",
     "Prints the counters of the tensorfs mount on MOUNTPOINT: reads served, range requests, bytes fetched "
     "and served, cache hits, misses and evictions, fetches in flight, fetch latency, retries by cause, "
     "reads failed with EIO.",
     kStatsExit},
    {"handoff", "handoff SOCKET_DIR [OPTIONS]", "serve the mounts a node plugin hands over",
     "Connects to each Unix socket in SOCKET_DIR, receives a /dev/fuse descriptor that a Kubernetes node "
     "plugin mounted, with the source and options to serve on it, and runs one tensorfs per descriptor. "
     "Exits once all have ended. The protocol: docs/KUBERNETES.md.",
     kHandoffExit},
    {"gke-sidecar", "gke-sidecar [--tmp-dir DIR]", "be the sidecar of GKE's Cloud Storage FUSE CSI driver",
     "Runs as the gke-gcsfuse-sidecar container of GKE's Cloud Storage FUSE CSI driver: serves each volume its "
     "node plugin hands over under TMP/.volumes, one child tensorfs per volume. Other arguments (the driver's "
     "klog flags) are accepted and ignored. How to deploy it: docs/GKE.md.",
     kGkeSidecarExit},
};

const SubcommandDoc* FindSubcommandDoc(std::string_view name) {
  for (const SubcommandDoc& doc : kSubcommands) {
    if (doc.name == name) return &doc;
  }
  return nullptr;
}

std::string FlagName(std::string_view option_name) {
  std::string flag = "--" + std::string(option_name);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

const OptionSpec* FindTableOption(std::string_view flag) {
  for (const OptionSpec& spec : AllMountOptions()) {
    if (FlagName(spec.name) == flag) return &spec;
  }
  return nullptr;
}

std::string Described(const OptionSpec& spec) {
  std::string text(spec.help);
  if (!spec.default_value.empty()) text += " (default " + std::string(spec.default_value) + ")";
  return text;
}

// --- Plain text ------------------------------------------------------------

// `text` wrapped at word boundaries into lines of at most `width` columns: the
// first starts with `first`, the others with `indent` spaces. A word longer than
// a line stands alone.
std::string Wrap(std::string_view text, std::string_view first, size_t indent, size_t width = kHelpWidth) {
  std::string out(first);
  size_t column = first.size();
  bool line_empty = true;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && text[i] == ' ') ++i;
    const size_t end = std::min(text.find(' ', i), text.size());
    if (end == i) break;
    const std::string_view word = text.substr(i, end - i);
    i = end;
    if (!line_empty && column + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      column = indent;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++column;
    }
    out += word;
    column += word.size();
    line_empty = false;
  }
  return out + "\n";
}

// Paragraphs separated by "\n\n", each wrapped, a blank line between.
std::string Paragraphs(std::string_view text) {
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find("\n\n", start), text.size());
    if (!out.empty()) out += "\n";
    out += Wrap(text.substr(start, end - start), "", 0);
    start = end + 2;
  }
  return out;
}

// "  NAME" padded to `column`, then `text` wrapped beside it; NAME too wide for
// the column puts the text on the next line.
std::string Item(std::string_view name, std::string_view text, size_t column) {
  std::string first = "  " + std::string(name);
  if (first.size() + 2 > column) return first + "\n" + Wrap(text, std::string(column, ' '), column);
  first.resize(column, ' ');
  return Wrap(text, first, column);
}

// Whether `option` takes a value: a flag has no type name.
bool TakesValue(const CLI::Option& option) { return !option.get_type_name().empty(); }

// "-f, --foreground", "--cache-size SIZE", "-o OPTIONS".
std::string OptionNames(const CLI::Option& option) {
  std::string names;
  for (const std::string& s : option.get_snames()) names += (names.empty() ? "-" : ", -") + s;
  for (const std::string& l : option.get_lnames()) names += (names.empty() ? "--" : ", --") + l;
  if (TakesValue(option)) names += " " + option.get_type_name();
  return names;
}

// The named options of `app` by group, groups in the order their first option
// was added.
std::vector<std::pair<std::string, std::vector<const CLI::Option*>>> OptionsByGroup(const CLI::App& app) {
  std::vector<std::pair<std::string, std::vector<const CLI::Option*>>> groups;
  for (const CLI::Option* option : app.get_options()) {
    if (!option->nonpositional() || option->get_group().empty()) continue;
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == option->get_group(); });
    if (it == groups.end()) it = groups.insert(groups.end(), {option->get_group(), {}});
    it->second.push_back(option);
  }
  return groups;
}

std::string OptionSections(const CLI::App& app) {
  constexpr size_t kColumn = 32;
  std::string out;
  for (const auto& [group, options] : OptionsByGroup(app)) {
    out += "\n" + group + ":\n";
    for (const CLI::Option* option : options) out += Item(OptionNames(*option), option->get_description(), kColumn);
  }
  return out;
}

std::string CommandHelp(const CLI::App& app) {
  std::vector<std::pair<std::string, std::string>> usage = {
      {"tensorfs SOURCE MOUNTPOINT [OPTIONS]", "mount; in the background unless -f"}};
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    const SubcommandDoc* doc = FindSubcommandDoc(sub->get_name());
    usage.emplace_back("tensorfs " + (doc ? std::string(doc->usage) : sub->get_name() + " ..."),
                       sub->get_description());
  }
  usage.emplace_back("mount-s3 BUCKET /dev/fd/N [OPTIONS]", kMountS3Summary);
  usage.emplace_back("tensorfs COMMAND --help", "a command's own options");
  usage.emplace_back("fusermount3 -u MOUNTPOINT", "unmount");
  size_t column = 0;
  for (const auto& [line, _] : usage) column = std::max(column, line.size() + 4);

  std::string out = "tensorfs: " + std::string(kSummary) + "\n\nUsage:\n";
  for (const auto& [line, what] : usage) out += Item(line, what, column);
  out += "\n" + Paragraphs(kMountDescription);
  out += OptionSections(app);
  out += "\n" + Wrap(kDetails, "", 0);
  out += "\nExit status:\n";
  for (const ExitStatusDoc& doc : kExitStatusDocs) {
    out += Item(std::to_string(static_cast<int>(doc.status)), doc.meaning, 6);
  }
  return out;
}

std::string SubcommandHelp(const CLI::App& app) {
  const SubcommandDoc* doc = FindSubcommandDoc(app.get_name());
  std::string out = "Usage: tensorfs " + (doc ? std::string(doc->usage) : app.get_name() + " [OPTIONS]") + "\n\n";
  out += Paragraphs(doc ? doc->description : std::string_view(app.get_description()));
  out += OptionSections(app);
  if (doc) {
    out += "\nExit status:\n";
    for (const ExitStatusLine& line : doc->exit_statuses) out += Item(std::to_string(line.status), line.meaning, 6);
  }
  return out;
}

// --- roff ------------------------------------------------------------------

// `text` safe in a roff line: backslashes and hyphens escaped, and a leading
// '.' or '\'' kept from being read as a request.
std::string Roff(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\') {
      out += "\\e";
    } else if (c == '-') {
      out += "\\-";
    } else {
      out += c;
    }
  }
  if (!out.empty() && (out[0] == '.' || out[0] == '\'')) out.insert(0, "\\&");
  return out;
}

std::string RoffParagraphs(std::string_view text) {
  std::string out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find("\n\n", start), text.size());
    out += ".PP\n" + Roff(text.substr(start, end - start)) + "\n";
    start = end + 2;
  }
  return out;
}

// ".TP" tag of an option: "\fB\-\-cache\-size\fR \fISIZE\fR", and for an
// option of the table (`with_o`) ", \fB\-o cache_size=\fISIZE\fR".
std::string RoffOptionTag(const CLI::Option& option, bool with_o) {
  std::string tag;
  auto add = [&tag](const std::string& part) { tag += (tag.empty() ? "" : ", ") + part; };
  const bool takes_value = TakesValue(option);
  const std::string value = takes_value ? " \\fI" + Roff(option.get_type_name()) + "\\fR" : "";
  for (const std::string& s : option.get_snames()) add("\\fB\\-" + Roff(s) + "\\fR" + value);
  for (const std::string& l : option.get_lnames()) add("\\fB\\-\\-" + Roff(l) + "\\fR" + value);
  const OptionSpec* spec =
      with_o && !option.get_lnames().empty() ? FindTableOption("--" + option.get_lnames()[0]) : nullptr;
  if (spec != nullptr) {
    add("\\fB\\-o " + Roff(spec->name) + (takes_value ? "=\\fI" + Roff(option.get_type_name()) : "") + "\\fR");
  }
  return tag;
}

std::string RoffOptions(const CLI::App& app, std::string_view heading) {
  std::string out;
  for (const auto& [group, options] : OptionsByGroup(app)) {
    out += std::string(heading) + " " + Roff(group) + "\n";
    for (const CLI::Option* option : options) {
      out += ".TP\n" + RoffOptionTag(*option, /*with_o=*/true) + "\n" + Roff(option->get_description()) + "\n";
    }
  }
  return out;
}

constexpr std::string_view kManMountHelper =
    "The package links /sbin/mount.tensorfs to tensorfs, so mount \\-t tensorfs and fstab lines work: "
    "mount(8) runs mount.tensorfs SOURCE MOUNTPOINT \\-o OPTIONS. Options that belong to mount(8), fstab "
    "or systemd (ro, defaults, auto, noauto, user, users, owner, group, _netdev, nofail, comment=, x\\-*) and "
    "the generic flags (exec, suid, dev, atime and their no* forms, sync, async, lazytime, ...) are dropped "
    "before tensorfs sees them. rw draws a warning: the mount is read\\-only anyway. With mount \\-s, "
    "options tensorfs does not know are dropped with a warning; without it they are refused. mount \\-f "
    "checks the options and the mount point without mounting.";

constexpr std::string_view kManEnvironment =
    ".TP\n.B STORAGE_EMULATOR_HOST\n"
    "host:port of a GCS\\-compatible server, spoken to over plain http (\\-o endpoint overrides it).\n"
    ".TP\n.B GOOGLE_APPLICATION_CREDENTIALS\n"
    "A service\\-account key or authorized_user file, tried after \\-o key_file.\n"
    ".TP\n.B CLOUDSDK_CONFIG\n"
    "gcloud's configuration directory, holding application_default_credentials.json "
    "(default ~/.config/gcloud).\n"
    ".TP\n.B GCE_METADATA_HOST\n"
    "The metadata server's address, tried last for credentials (default 169.254.169.254).\n"
    ".TP\n.B KUBERNETES_SERVICE_HOST\n"
    "Set in a pod: the metadata server (Workload Identity) is then waited for up to 30 s.\n"
    ".TP\n.BR NOTIFY_SOCKET \", \" JOURNAL_STREAM\n"
    "Set by systemd: tensorfs reports readiness with sd_notify, and logs without timestamps, "
    "with each line's priority.\n";

constexpr std::string_view kManFiles =
    ".TP\n.B /sbin/mount.tensorfs\nThe mount(8) helper: a link to tensorfs.\n"
    ".TP\n.B /usr/lib/tensorfs/bin/mount\\-s3\nA link to tensorfs, which takes mount\\-s3's command line by this "
    "name: the MOUNTPOINT_BIN_DIR of Mountpoint's CSI driver.\n"
    ".TP\n.B /lib/systemd/system/tensorfs@.service\n"
    "One mount per instance; the instance is the mount point escaped with systemd\\-escape \\-\\-path.\n"
    ".TP\n.B /etc/tensorfs/INSTANCE.conf\n"
    "The unit's configuration: TENSORFS_SOURCE and TENSORFS_OPTIONS.\n"
    ".TP\n.B /usr/share/doc/tensorfs/\n"
    "README.md, and every option, behaviour and message in detail: CONFIGURATION.md, SEMANTICS.md, "
    "VIEWS.md, TROUBLESHOOTING.md, PERFORMANCE.md, KUBERNETES.md, EKS.md.\n";

constexpr std::string_view kManExamples =
    ".PP\nMount a bucket, load from it, unmount:\n"
    ".PP\n.RS\n.nf\n"
    "mkdir \\-p /mnt/models\n"
    "tensorfs gs://my\\-bucket/models /mnt/models\n"
    "ls /mnt/models/llama\n"
    "fusermount3 \\-u /mnt/models\n"
    ".fi\n.RE\n"
    ".PP\nOne host of a job of 8, each reading its eighth of every tensor:\n"
    ".PP\n.RS\n.nf\n"
    "tensorfs gs://my\\-bucket/models /mnt/models \\-o shard=3/8\n"
    ".fi\n.RE\n"
    ".PP\nAn fstab line, mounted at boot once the network is up:\n"
    ".PP\n.RS\n.nf\n"
    "gs://my\\-bucket/models  /mnt/models  tensorfs  ro,_netdev,nofail,allow_other  0 0\n"
    ".fi\n.RE\n";

}  // namespace

std::unique_ptr<CLI::App> MakeCommandLine(CommandLine& line) {
  auto app = std::make_unique<CLI::App>(std::string(kSummary), "tensorfs");
  app->formatter_fn([](const CLI::App* a, std::string, CLI::AppFormatMode) { return RenderHelp(*a); });
  app->set_help_flag("-h,--help", "print this help and exit")->group(std::string(kGeneralGroup));
  app->require_subcommand(0, 1);

  app->add_option("SOURCE", line.mount.source,
                  "local directory, gs://bucket[/prefix] or s3://bucket[/prefix] holding the checkpoint(s)");
  app->add_option("MOUNTPOINT", line.mount.mountpoint, "existing directory to mount on, or /dev/fd/N");
  app->add_flag("--version", line.version, "print the version and exit")->group(std::string(kGeneralGroup));
  app->add_option("-o", line.o_lists, "fstab-style options, comma-separated (a comma in a value: \\,)")
      ->type_name("OPTIONS")
      ->allow_extra_args(false)
      ->group(std::string(kGeneralGroup));
  app->add_flag("--print-mount-params", line.print_mount_params,
                "print the mount(2) settings a parent of /dev/fd/N applies, and exit")
      ->group(std::string(kGeneralGroup));
  // The option table, group by group.
  for (OptionGroup group : kAllOptionGroups) {
    for (const OptionSpec& spec : AllMountOptions()) {
      if (spec.group != group) continue;
      const std::string names = spec.alias.empty() ? FlagName(spec.name) : std::string(spec.alias) + "," + FlagName(spec.name);
      const std::string name(spec.name);
      CLI::Option* option =
          spec.value_name.empty()
              ? app->add_flag_callback(names, [&line, name] { line.flags.emplace_back(name, std::nullopt); },
                                       Described(spec))
              : app->add_option_function<std::string>(
                       names, [&line, name](const std::string& v) { line.flags.emplace_back(name, v); },
                       Described(spec))
                    ->type_name(std::string(spec.value_name));
      option->group(std::string(OptionGroupTitle(group)));
    }
  }

  const SubcommandDoc& inspect_doc = *FindSubcommandDoc("inspect");
  CLI::App* inspect = app->add_subcommand("inspect", std::string(inspect_doc.summary));
  inspect->formatter_fn([](const CLI::App* a, std::string, CLI::AppFormatMode) { return RenderHelp(*a); });
  inspect->add_option("SOURCE", line.inspect.source, "checkpoint directory, gs://bucket/prefix or s3://bucket/prefix")
      ->required();
  inspect->add_flag("--json", line.inspect_json, "print JSON for machines");
  inspect->add_option("-o", line.inspect_o_lists, "source options, e.g. -o endpoint=URL,key_file=PATH")
      ->type_name("OPTIONS")
      ->allow_extra_args(false);
  inspect->add_option("--layer-regex", line.inspect_layer_regex,
                      "group tensors into layers by this regex's first capture group")
      ->type_name("REGEX");

  const SubcommandDoc& stats_doc = *FindSubcommandDoc("stats");
  CLI::App* stats = app->add_subcommand("stats", std::string(stats_doc.summary));
  stats->formatter_fn([](const CLI::App* a, std::string, CLI::AppFormatMode) { return RenderHelp(*a); });
  stats->add_option("MOUNTPOINT", line.stats_mountpoint, "a tensorfs mount point")->required();
  stats->add_flag("--json", line.stats_json, "print JSON for machines");

  const SubcommandDoc& handoff_doc = *FindSubcommandDoc("handoff");
  CLI::App* handoff = app->add_subcommand("handoff", std::string(handoff_doc.summary));
  handoff->formatter_fn([](const CLI::App* a, std::string, CLI::AppFormatMode) { return RenderHelp(*a); });
  handoff->add_option("SOCKET_DIR", line.handoff_dir, "directory holding the node plugin's sockets")->required();
  handoff->add_option("--wait", line.handoff_wait_s, "seconds to wait for the first socket (default 30)")
      ->type_name("SECONDS");

  const SubcommandDoc& gke_doc = *FindSubcommandDoc("gke-sidecar");
  CLI::App* gke = app->add_subcommand("gke-sidecar", std::string(gke_doc.summary));
  gke->formatter_fn([](const CLI::App* a, std::string, CLI::AppFormatMode) { return RenderHelp(*a); });
  gke->add_option("--tmp-dir", line.gke_tmp_dir, "the pod's gke-gcsfuse-tmp emptyDir (default /gcsfuse-tmp)")
      ->type_name("DIR");
  gke->allow_extras();  // klog's --v=5, which the driver's webhook passes
  return app;
}

std::string RenderMountS3Help() {
  std::string out = "mount-s3 (tensorfs): " + std::string(kSummary) +
                    "\n\nUsage: mount-s3 [OPTIONS] <BUCKET_NAME> <DIRECTORY>\n\n" + Paragraphs(kMountS3Description);
  constexpr size_t kColumn = 44;
  for (auto [kind, heading] : {std::pair<std::string_view, std::string_view>{"mapped", "Options and what they become"},
                               {"unused", "Accepted without effect (one log line each)"},
                               {"refused", "Refused (the mount fails, saying why)"}}) {
    out += "\n" + std::string(heading) + ":\n";
    for (const MountS3OptionDoc& doc : MountS3Options()) {
      if (doc.kind == kind) out += Item(doc.names, doc.meaning, kColumn);
    }
  }
  out += "\nAny other option is refused as mount-s3 refuses it. Every tensorfs option: tensorfs --help.\n";
  out += "\nExit status:\n";
  for (const ExitStatusDoc& doc : kExitStatusDocs) {
    out += Item(std::to_string(static_cast<int>(doc.status)), doc.meaning, 6);
  }
  return out;
}

std::string RenderHelp(const CLI::App& app) {
  return app.get_parent() == nullptr ? CommandHelp(app) : SubcommandHelp(app);
}

std::string RenderManPage(const CLI::App& app, std::string_view version) {
  std::string out = ".\\\" Generated from the tensorfs command line at build time: do not edit.\n";
  out += ".TH TENSORFS 8 \"\" \"tensorfs " + Roff(version) + "\" \"System Administration\"\n";
  out += ".SH NAME\ntensorfs, mount.tensorfs \\- " + Roff(kSummary) + "\n";
  out += ".SH SYNOPSIS\n.B tensorfs\n.I SOURCE MOUNTPOINT\n.RI [ OPTIONS ]\n";
  const std::vector<const CLI::App*> subcommands = app.get_subcommands([](const CLI::App*) { return true; });
  for (const CLI::App* sub : subcommands) {
    const SubcommandDoc* doc = FindSubcommandDoc(sub->get_name());
    out += ".br\n.B tensorfs " + Roff(sub->get_name()) + "\n";
    if (doc) out += Roff(std::string_view(doc->usage).substr(sub->get_name().size() + 1)) + "\n";
  }
  out += ".br\n.B mount \\-t tensorfs\n.I SOURCE MOUNTPOINT\n.RB [ \\-o\n.IR OPTIONS ]\n";
  out += ".br\n.B mount\\-s3\n.I BUCKET\n.B /dev/fd/\\fIN\\fR\n.RI [ OPTIONS ]\n";
  out += ".SH DESCRIPTION\n" + RoffParagraphs(kMountDescription);
  out += ".PP\n" + std::string(kManMountHelper) + "\n";
  out += ".PP\nUnmount with fusermount3 \\-u MOUNTPOINT (or umount as root), or stop a foreground tensorfs "
         "with SIGTERM or Ctrl\\-C.\n";
  out += ".SH OPTIONS\n" + RoffOptions(app, ".SS");
  out += ".SH COMMANDS\n";
  for (const CLI::App* sub : subcommands) {
    const SubcommandDoc* doc = FindSubcommandDoc(sub->get_name());
    out += ".SS \"tensorfs " + Roff(doc ? doc->usage : std::string_view(sub->get_name())) + "\"\n";
    out += RoffParagraphs(doc ? doc->description : std::string_view(sub->get_description()));
    for (const CLI::Option* option : sub->get_options()) {
      if (!option->nonpositional() || option->get_group().empty()) continue;
      out += ".TP\n" + RoffOptionTag(*option, /*with_o=*/false) + "\n" + Roff(option->get_description()) + "\n";
    }
    if (doc) {
      out += ".PP\nExit status:";
      for (const ExitStatusLine& line : doc->exit_statuses) {
        out += " " + std::to_string(line.status) + " " + Roff(line.meaning) + ";";
      }
      out.back() = '.';
      out += "\n";
    }
  }
  out += ".SS \"mount\\-s3 BUCKET /dev/fd/N [OPTIONS]\"\n" + RoffParagraphs(kMountS3Description);
  for (const MountS3OptionDoc& doc : MountS3Options()) {
    out += ".TP\n\\fB" + Roff(doc.names) + "\\fR\n" +
           (doc.kind == "mapped" ? "" : std::string(doc.kind == "unused" ? "Accepted, no effect: " : "Refused: ")) +
           Roff(doc.meaning) + "\n";
  }
  out += ".SH EXIT STATUS\n";
  for (const ExitStatusDoc& doc : kExitStatusDocs) {
    out += ".TP\n.B " + std::to_string(static_cast<int>(doc.status)) + "\n" + Roff(doc.meaning) + "\n";
  }
  out += ".PP\ntensorfs@.service restarts after status 1 and not after 2 to 5.\n";
  out += ".SH ENVIRONMENT\n" + std::string(kManEnvironment);
  out += ".SH FILES\n" + std::string(kManFiles);
  out += ".SH EXAMPLES\n" + std::string(kManExamples);
  out += ".SH SEE ALSO\n.BR fusermount3 (1),\n.BR mount (8),\n.BR fstab (5),\n.BR systemd.mount (5),\n"
         ".BR journalctl (1)\n";
  return out;
}

}  // namespace tensorfs
