#include "fs/mount_s3.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdio>
#include <optional>
#include <set>

namespace tensorfs {
namespace {

// What tensorfs does with one of mount-s3's options.
enum class Kind {
  kMapped,       // becomes a tensorfs option (or is what tensorfs does anyway)
  kUnused,       // accepted, logged as having no effect
  kWrite,        // refused: it asks for writes
  kUnsupported,  // refused: it asks for what tensorfs does not do
  kHelp,
  kVersion,
};

struct Translation;

// One option of mount-s3 (mountpoint-s3/src/cli.rs), as mount-s3 documents it.
struct Option {
  std::string_view name;        // the long name, without "--"
  char short_name = 0;          // 'f' for -f, or 0
  std::string_view value_name;  // "PREFIX", as clap shows it; "" for a flag
  Kind kind = Kind::kMapped;
  // kMapped: what it becomes; kUnused: why it has no effect; refused: why,
  // and what to do instead.
  std::string_view meaning;
  Status (*apply)(Translation&, std::string_view value) = nullptr;  // kMapped only
  bool repeatable = false;
};

// The command line as read so far.
struct Translation {
  MountS3Command& command;
  std::vector<std::string> positionals;
  std::optional<std::string> prefix;
  std::optional<std::string> metadata_ttl;  // as given: seconds, "minimal" or "indefinite"
  std::optional<std::string> negative_ttl;
  bool allow_other = false;
  bool allow_root = false;
  std::vector<std::string> tensorfs_lists;  // --tensorfs=LIST, in order
};

// A tensorfs option of the table (core/options/mount_options.h).
Status Set(Translation& t, std::string_view name, std::optional<std::string_view> value = std::nullopt) {
  return ApplyMountOption(t.command.options, name, value);
}

// An unsigned whole number, the whole of `text`.
template <typename T>
std::optional<T> ParseUnsigned(std::string_view text, int base = 10) {
  T v = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v, base);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return v;
}

// mount-s3's parse_perm_bits.
Status SetMode(Translation& t, std::string_view name, std::string_view value) {
  const std::optional<uint32_t> mode = ParseUnsigned<uint32_t>(value, 8);
  if (!mode || *mode > 0xffff) return InvalidArgumentError("must be a valid octal number");
  if (*mode > 0777) return InvalidArgumentError("only user/group/other permissions are supported");
  char octal[8];
  std::snprintf(octal, sizeof octal, "%o", *mode);
  return Set(t, name, octal);
}

// --uid and --gid take 1 to 2^32 - 1.
Status SetId(Translation& t, std::string_view name, std::string_view value) {
  const std::optional<uint32_t> id = ParseUnsigned<uint32_t>(value);
  if (!id || *id == 0) return InvalidArgumentError("expected a number from 1 to 4294967295");
  return Set(t, name, value);
}

// mount-s3's TimeToLive: seconds, "minimal" or "indefinite".
Status CheckTtl(std::string_view value) {
  if (value == "minimal" || value == "indefinite") return OkStatus();
  const std::optional<uint64_t> seconds = ParseUnsigned<uint64_t>(value);
  if (!seconds) return InvalidArgumentError("TTL must be a valid number of seconds, or 'indefinite', or 'minimal'");
  if (*seconds > 100ull * 365 * 24 * 60 * 60) {
    return InvalidArgumentError("TTL must not be greater than 3153600000s (~100 years), or be 'indefinite', or "
                                "'minimal'");
  }
  return OkStatus();
}

// Keeps a checked TTL for Compose.
Status KeepTtl(std::optional<std::string>& field, std::string_view value) {
  RETURN_IF_ERROR(CheckTtl(value));
  field = std::string(value);
  return OkStatus();
}

// A TTL as tensorfs' seconds: minimal 0, indefinite inf (and so is more than
// tensorfs' 1e9 s, over 31 years).
std::string TtlSeconds(std::string_view value) {
  if (value == "minimal") return "0";
  if (value == "indefinite" || ParseUnsigned<uint64_t>(value).value_or(0) > 1000000000) return "inf";
  return std::string(value);
}

constexpr std::string_view kCacheUnused =
    "a local disk cache (or S3 Express One Zone cache) tensorfs does not have: it caches in memory, "
    "--tensorfs=cache_size=SIZE";
constexpr std::string_view kTuningUnused =
    "tensorfs sizes its range requests and its cache itself (--tensorfs=chunk_size=, max_fetches=, cache_size=)";
constexpr std::string_view kUploadUnused = "it applies to uploads, and tensorfs writes nothing";
constexpr std::string_view kLoggingUnused =
    "tensorfs logs to stdout (errors to stderr), and serves its counters through tensorfs stats and "
    "--tensorfs=prometheus_port=PORT";
constexpr std::string_view kWriteRefused =
    "tensorfs serves the bucket read-only: remove it from the volume's mountOptions (or keep mount-s3 for this "
    "volume)";

const std::array kOptions = {
    // Bucket options.
    Option{.name = "prefix", .value_name = "PREFIX", .meaning = "the key prefix served: s3://BUCKET/PREFIX",
           .apply = [](Translation& t, std::string_view v) {
             if (!v.empty() && !v.ends_with('/')) return InvalidArgumentError("prefix must end in '/'");
             t.prefix = std::string(v);
             return OkStatus();
           }},
    Option{.name = "region", .value_name = "REGION", .meaning = "region=REGION",
           .apply = [](Translation& t, std::string_view v) { return Set(t, "region", v); }},
    Option{.name = "endpoint-url", .value_name = "ENDPOINT_URL", .meaning = "endpoint=URL",
           .apply = [](Translation& t, std::string_view v) { return Set(t, "endpoint", v); }},
    Option{.name = "force-path-style", .meaning = "force_path_style",
           .apply = [](Translation& t, std::string_view) { return Set(t, "force_path_style"); }},
    Option{.name = "requester-pays", .meaning = "requester_pays",
           .apply = [](Translation& t, std::string_view) { return Set(t, "requester_pays"); }},
    Option{.name = "expected-bucket-owner", .value_name = "AWS_ACCOUNT_ID", .meaning = "expected_bucket_owner=ID",
           .apply = [](Translation& t, std::string_view v) { return Set(t, "expected_bucket_owner", v); }},
    Option{.name = "bucket-type", .value_name = "BUCKET_TYPE",
           .meaning = "general-purpose: accepted; directory (S3 Express One Zone) is refused",
           .apply = [](Translation&, std::string_view v) {
             if (v == "general-purpose") return OkStatus();
             if (v == "directory") {
               return InvalidArgumentError("tensorfs does not serve S3 Express One Zone directory buckets");
             }
             return InvalidArgumentError("[possible values: general-purpose, directory]");
           }},
    Option{.name = "transfer-acceleration", .kind = Kind::kUnsupported,
           .meaning = "tensorfs does not use S3 Transfer Acceleration: give its endpoint with "
                      "--endpoint-url=https://s3-accelerate.amazonaws.com and --force-path-style, or remove it"},
    Option{.name = "dual-stack", .kind = Kind::kUnsupported,
           .meaning = "tensorfs does not pick dual-stack endpoints itself: give one with "
                      "--endpoint-url=https://s3.dualstack.REGION.amazonaws.com"},
    Option{.name = "storage-class", .value_name = "STORAGE_CLASS", .kind = Kind::kUnused, .meaning = kUploadUnused},
    Option{.name = "sse", .value_name = "SSE", .kind = Kind::kUnused, .meaning = kUploadUnused},
    Option{.name = "sse-kms-key-id", .value_name = "AWS_KMS_KEY_ARN", .kind = Kind::kUnused, .meaning = kUploadUnused},
    Option{.name = "upload-checksums", .value_name = "ALGORITHM", .kind = Kind::kUnused, .meaning = kUploadUnused},
    Option{.name = "infer-content-type", .kind = Kind::kUnused, .meaning = kUploadUnused},

    // AWS credentials options.
    Option{.name = "no-sign-request", .meaning = "no_sign_request",
           .apply = [](Translation& t, std::string_view) { return Set(t, "no_sign_request"); }},
    Option{.name = "profile", .value_name = "PROFILE", .meaning = "profile=NAME",
           .apply = [](Translation& t, std::string_view v) { return Set(t, "profile", v); }},

    // Mount options.
    Option{.name = "read-only", .meaning = "nothing: tensorfs is always read-only",
           .apply = [](Translation&, std::string_view) { return OkStatus(); }},
    Option{.name = "allow-delete", .kind = Kind::kWrite, .meaning = kWriteRefused},
    Option{.name = "allow-overwrite", .kind = Kind::kWrite, .meaning = kWriteRefused},
    Option{.name = "incremental-upload", .kind = Kind::kWrite, .meaning = kWriteRefused},
    Option{.name = "auto-unmount", .kind = Kind::kUnused,
           .meaning = "tensorfs unmounts what it mounted when it exits; a /dev/fd/N mount is its parent's to unmount"},
    Option{.name = "allow-root",
           .meaning = "allow_root: only root and the user tensorfs runs as may use the mount (the kernel's "
                      "allow_other is the node plugin's)",
           .apply = [](Translation& t, std::string_view) {
             t.allow_root = true;
             return OkStatus();
           }},
    Option{.name = "allow-other",
           .meaning = "every user may use the mount: allow_other (in the node plugin's mount data for /dev/fd/N)",
           .apply = [](Translation& t, std::string_view) {
             t.allow_other = true;
             return OkStatus();
           }},
    Option{.name = "uid", .value_name = "UID", .meaning = "uid=N: the owner files and directories report",
           .apply = [](Translation& t, std::string_view v) { return SetId(t, "uid", v); }},
    Option{.name = "gid", .value_name = "GID", .meaning = "gid=N: the group files and directories report",
           .apply = [](Translation& t, std::string_view v) { return SetId(t, "gid", v); }},
    Option{.name = "dir-mode", .value_name = "DIR_MODE", .meaning = "dir_mode=OCTAL (tensorfs' default 555)",
           .apply = [](Translation& t, std::string_view v) { return SetMode(t, "dir_mode", v); }},
    Option{.name = "file-mode", .value_name = "FILE_MODE", .meaning = "file_mode=OCTAL (tensorfs' default 444)",
           .apply = [](Translation& t, std::string_view v) { return SetMode(t, "file_mode", v); }},
    Option{.name = "foreground", .short_name = 'f', .meaning = "foreground",
           .apply = [](Translation& t, std::string_view) { return Set(t, "foreground"); }},

    // Client options.
    Option{.name = "max-threads", .value_name = "N", .meaning = "max_threads=N: FUSE worker threads",
           .apply = [](Translation& t, std::string_view v) { return Set(t, "max_threads", v); }},
    Option{.name = "ca-bundle", .value_name = "PATH", .meaning = "ca_file=PATH",
           .apply = [](Translation& t, std::string_view v) { return Set(t, "ca_file", v); }},
    Option{.name = "maximum-throughput-gbps", .value_name = "N", .kind = Kind::kUnused, .meaning = kTuningUnused},
    Option{.name = "memory-target", .value_name = "MiB", .kind = Kind::kUnused,
           .meaning = "tensorfs bounds its memory with its cache, --tensorfs=cache_size=SIZE (by default 3/4 of the "
                      "container's memory limit, at most 2G)"},
    Option{.name = "part-size", .value_name = "SIZE", .kind = Kind::kUnused, .meaning = kTuningUnused},
    Option{.name = "read-part-size", .value_name = "SIZE", .kind = Kind::kUnused, .meaning = kTuningUnused},
    Option{.name = "write-part-size", .value_name = "SIZE", .kind = Kind::kUnused, .meaning = kUploadUnused},
    Option{.name = "bind", .value_name = "NETWORK_INTERFACE", .kind = Kind::kUnsupported,
           .meaning = "tensorfs does not bind its connections to network interfaces", .repeatable = true},

    // Logging options.
    Option{.name = "debug", .short_name = 'd', .meaning = "log_level=debug",
           .apply = [](Translation& t, std::string_view) { return Set(t, "log_level", "debug"); }},
    Option{.name = "no-log", .meaning = "log_level=off (a failure still ends with its reason on stderr)",
           .apply = [](Translation& t, std::string_view) { return Set(t, "log_level", "off"); }},
    Option{.name = "debug-crt", .kind = Kind::kUnused,
           .meaning = "tensorfs has no AWS Common Runtime; --debug logs its requests"},
    Option{.name = "log-directory", .short_name = 'l', .value_name = "DIRECTORY", .kind = Kind::kUnused,
           .meaning = kLoggingUnused},
    Option{.name = "log-metrics", .kind = Kind::kUnused, .meaning = kLoggingUnused},
    Option{.name = "otlp-endpoint", .value_name = "ENDPOINT", .kind = Kind::kUnused, .meaning = kLoggingUnused},
    Option{.name = "otlp-export-interval", .value_name = "SECONDS", .kind = Kind::kUnused, .meaning = kLoggingUnused},

    // Caching options.
    Option{.name = "cache", .value_name = "DIRECTORY", .kind = Kind::kUnused, .meaning = kCacheUnused},
    Option{.name = "max-cache-size", .value_name = "MiB", .kind = Kind::kUnused, .meaning = kCacheUnused},
    Option{.name = "cache-xz", .value_name = "BUCKET", .kind = Kind::kUnused, .meaning = kCacheUnused},
    Option{.name = "cache-block-size", .value_name = "KiB", .kind = Kind::kUnused, .meaning = kCacheUnused},
    Option{.name = "metadata-ttl", .value_name = "SECONDS|indefinite|minimal",
           .meaning = "metadata_ttl and negative_ttl: N seconds; indefinite: inf; minimal: 0 (looked up again "
                      "after the kernel's 1 s attr_timeout and entry_timeout). Without it, tensorfs' own 60 s and "
                      "5 s",
           .apply = [](Translation& t, std::string_view v) { return KeepTtl(t.metadata_ttl, v); }},
    Option{.name = "negative-metadata-ttl", .value_name = "SECONDS|indefinite|minimal",
           .meaning = "negative_ttl: N seconds; indefinite: inf; minimal: 0",
           .apply = [](Translation& t, std::string_view v) { return KeepTtl(t.negative_ttl, v); }},

    // Advanced options.
    Option{.name = "user-agent-prefix", .value_name = "PREFIX",
           .meaning = "user_agent_prefix: the User-Agent of every request starts with it",
           .apply = [](Translation& t, std::string_view v) { return Set(t, "user_agent_prefix", v); }},

    // tensorfs' own.
    Option{.name = "tensorfs", .value_name = "OPTIONS",
           .meaning = "tensorfs options as for -o (cache_size=4G,views=none), applied after the rest; from a "
                      "PersistentVolume's mountOptions entry \"tensorfs cache_size=4G,views=none\"",
           .apply = [](Translation& t, std::string_view v) {
             // Checked here, to name the option in the error.
             MountOptions check;
             RETURN_IF_ERROR(ApplyMountOptionList(check, v));
             t.tensorfs_lists.emplace_back(v);
             return OkStatus();
           },
           .repeatable = true},

    Option{.name = "help", .short_name = 'h', .kind = Kind::kHelp, .meaning = "this help"},
    Option{.name = "version", .short_name = 'V', .kind = Kind::kVersion, .meaning = "the version of tensorfs"},
};

const Option* FindLong(std::string_view name) {
  for (const Option& o : kOptions) {
    if (o.name == name) return &o;
  }
  return nullptr;
}

const Option* FindShort(char c) {
  for (const Option& o : kOptions) {
    if (o.short_name == c) return &o;
  }
  return nullptr;
}

// "--prefix <PREFIX>", as clap names an option in its messages.
std::string Named(const Option& o) {
  std::string name = "--" + std::string(o.name);
  if (!o.value_name.empty()) name += " <" + std::string(o.value_name) + ">";
  return name;
}

// The options of an fstab-style -o list: "allow-other,prefix=a/" -> --allow-other --prefix=a/.
StatusOr<std::vector<std::string>> FstabOptions(std::string_view list) {
  std::vector<std::string> out;
  std::string item;
  auto flush = [&]() -> Status {
    if (item.empty()) return OkStatus();
    if (item.starts_with("-")) {
      return InvalidArgumentError("fstab style options must not start with '-': '" + item + "'");
    }
    out.push_back("--" + item);
    item.clear();
    return OkStatus();
  };
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '\\' && i + 1 < list.size()) {
      item += list[++i];
    } else if (list[i] == ',') {
      RETURN_IF_ERROR(flush());
    } else {
      item += list[i];
    }
  }
  RETURN_IF_ERROR(flush());
  return out;
}

// Reads one option (and its value) from args[i], advancing i past what it took.
Status ReadOption(const std::vector<std::string>& args, size_t& i, Translation& t, std::set<std::string_view>& seen) {
  const std::string& arg = args[i];
  const Option* o = nullptr;
  std::optional<std::string> value;
  if (arg.starts_with("--")) {
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    o = FindLong(name);
    if (o == nullptr) {
      return InvalidArgumentError("unexpected argument '--" + name + "' found\n\n  tip: to pass '--" + name +
                                  "' as a value, use '-- --" + name + "'");
    }
    if (eq != std::string::npos) value = arg.substr(eq + 1);
  } else {
    // -f, -d, -fd, -l DIR, -lDIR, -o LIST
    for (size_t k = 1; k < arg.size(); ++k) {
      const char c = arg[k];
      if (c == 'o') {
        std::string list = arg.substr(k + 1);
        if (list.starts_with('=')) list.erase(0, 1);
        if (list.empty()) {
          if (i + 1 >= args.size()) {
            return InvalidArgumentError("a value is required for '-o <OPTIONS>' but none was supplied");
          }
          list = args[++i];
        }
        ASSIGN_OR_RETURN(std::vector<std::string> expanded, FstabOptions(list));
        for (size_t j = 0; j < expanded.size(); ++j) RETURN_IF_ERROR(ReadOption(expanded, j, t, seen));
        return OkStatus();
      }
      const Option* s = FindShort(c);
      if (s == nullptr) {
        return InvalidArgumentError(std::string("unexpected argument '-") + c + "' found");
      }
      if (!s->value_name.empty()) {
        std::string rest = arg.substr(k + 1);
        if (rest.starts_with('=')) rest.erase(0, 1);
        o = s;
        if (!rest.empty()) value = rest;
        break;
      }
      if (k + 1 < arg.size()) {  // a flag among several: apply it, go on
        std::vector<std::string> one = {"--" + std::string(s->name)};
        size_t j = 0;
        RETURN_IF_ERROR(ReadOption(one, j, t, seen));
        continue;
      }
      o = s;
    }
    if (o == nullptr) return OkStatus();
  }
  if (!o->value_name.empty() && !value) {
    if (i + 1 >= args.size()) {
      return InvalidArgumentError("a value is required for '" + Named(*o) + "' but none was supplied");
    }
    value = args[++i];
  }
  if (o->value_name.empty() && value) {
    return InvalidArgumentError("unexpected value '" + *value + "' for '" + Named(*o) +
                                "' found; no more were expected");
  }
  if (!o->repeatable && !seen.insert(o->name).second) {
    return InvalidArgumentError("the argument '" + Named(*o) + "' cannot be used multiple times");
  }
  switch (o->kind) {
    case Kind::kHelp:
      t.command.action = MountS3Command::Action::kHelp;
      return OkStatus();
    case Kind::kVersion:
      if (t.command.action != MountS3Command::Action::kHelp) t.command.action = MountS3Command::Action::kVersion;
      return OkStatus();
    case Kind::kWrite:
      return InvalidArgumentError("--" + std::string(o->name) + " asks for writes, and " + std::string(o->meaning));
    case Kind::kUnsupported:
      return InvalidArgumentError("--" + std::string(o->name) + " is not supported: " + std::string(o->meaning));
    case Kind::kUnused:
      t.command.notes.push_back("ignoring --" + std::string(o->name) + (value ? "=" + *value : "") + ": " +
                                std::string(o->meaning));
      return OkStatus();
    case Kind::kMapped:
      break;
  }
  if (Status s = o->apply(t, value.value_or("")); !s.ok()) {
    if (!value) return s;
    const std::string& message = s.message();
    return InvalidArgumentError("invalid value '" + *value + "' for '" + Named(*o) + "': " + message);
  }
  return OkStatus();
}

// After the arguments: the source, the mount point, the TTLs, allow_other or
// allow_root, and then tensorfs' own options.
Status Compose(Translation& t) {
  MountOptions& options = t.command.options;
  if (t.positionals.size() < 2) {
    std::string missing = t.positionals.empty() ? "\n  <BUCKET_NAME>\n  <DIRECTORY>" : "\n  <DIRECTORY>";
    return InvalidArgumentError("the following required arguments were not provided:" + missing);
  }
  if (t.positionals.size() > 2) return InvalidArgumentError("unexpected argument '" + t.positionals[2] + "' found");
  const std::string& bucket = t.positionals[0];
  if (bucket.starts_with("s3://")) {
    if (t.prefix) return InvalidArgumentError("explicit prefix option not allowed with S3 URI");
    options.source = bucket;
  } else {
    if (bucket.empty() || bucket.find('/') != std::string::npos) {
      return InvalidArgumentError("invalid value '" + bucket + "' for '<BUCKET_NAME>': the bucket must have a valid "
                                  "name (only letters, numbers, . and -) or be an S3 URI (s3://BUCKET/PREFIX/)");
    }
    options.source = "s3://" + bucket + (t.prefix && !t.prefix->empty() ? "/" + *t.prefix : "");
  }
  options.mountpoint = t.positionals[1];
  const bool descriptor = FuseFdOfMountPoint(options.mountpoint).has_value();

  if (t.allow_other && t.allow_root) {
    return InvalidArgumentError("the argument '--allow-other' cannot be used with '--allow-root'");
  }
  // Serving /dev/fd/N, the kernel's allow_other is in the node plugin's mount
  // data; allow_root's other half (refusing users other than root and this
  // one) is libfuse's, here.
  if (t.allow_other && !descriptor) RETURN_IF_ERROR(Set(t, "allow_other"));
  if (t.allow_root) RETURN_IF_ERROR(Set(t, "allow_root"));

  if (t.metadata_ttl) {
    std::string ttl = *t.metadata_ttl;
    if (ttl == "0") {
      t.command.notes.push_back("--metadata-ttl 0 is taken as 'minimal', as mount-s3 does");
      ttl = "minimal";
    }
    RETURN_IF_ERROR(Set(t, "metadata_ttl", TtlSeconds(ttl)));
    if (!t.negative_ttl) RETURN_IF_ERROR(Set(t, "negative_ttl", TtlSeconds(ttl)));
    if (ttl == "minimal") {
      // As mount-s3, which never lets the kernel cache for 0 s: every lookup
      // and open past the kernel's second asks S3 again.
      RETURN_IF_ERROR(Set(t, "attr_timeout", "1"));
      RETURN_IF_ERROR(Set(t, "entry_timeout", "1"));
    }
  }
  if (t.negative_ttl) RETURN_IF_ERROR(Set(t, "negative_ttl", TtlSeconds(*t.negative_ttl)));

  for (const std::string& list : t.tensorfs_lists) RETURN_IF_ERROR(ApplyMountOptionList(options, list));
  return OkStatus();
}

std::string_view KindName(Kind kind) {
  switch (kind) {
    case Kind::kMapped:
    case Kind::kHelp:
    case Kind::kVersion:
      return "mapped";
    case Kind::kUnused:
      return "unused";
    case Kind::kWrite:
    case Kind::kUnsupported:
      return "refused";
  }
  return "";
}

}  // namespace

bool IsMountS3Invocation(std::string_view argv0) {
  const size_t slash = argv0.rfind('/');
  return argv0.substr(slash == std::string_view::npos ? 0 : slash + 1) == "mount-s3";
}

StatusOr<MountS3Command> TranslateMountS3(const std::vector<std::string>& args) {
  MountS3Command command;
  Translation t{command};
  std::set<std::string_view> seen;
  bool only_positionals = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!only_positionals && arg == "--") {
      only_positionals = true;
    } else if (!only_positionals && arg.size() > 1 && arg[0] == '-') {
      RETURN_IF_ERROR(ReadOption(args, i, t, seen));
    } else {
      t.positionals.push_back(arg);
    }
  }
  if (command.action != MountS3Command::Action::kMount) return command;
  RETURN_IF_ERROR(Compose(t));
  return command;
}

std::string MountS3UsageError(std::string_view message) {
  return "error: " + std::string(message) +
         "\n\nUsage: mount-s3 [OPTIONS] <BUCKET_NAME> <DIRECTORY>\n\nFor more information, try '--help'.\n";
}

std::vector<MountS3OptionDoc> MountS3Options() {
  std::vector<MountS3OptionDoc> docs;
  // Names are kept alive by a static table of strings.
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Option& o : kOptions) {
      std::string name = o.short_name != 0 ? std::string("-") + o.short_name + ", " : "";
      name += "--" + std::string(o.name);
      if (!o.value_name.empty()) name += " <" + std::string(o.value_name) + ">";
      out.push_back(std::move(name));
    }
    return out;
  }();
  for (size_t i = 0; i < kOptions.size(); ++i) {
    docs.push_back({names[i], KindName(kOptions[i].kind), kOptions[i].meaning});
  }
  return docs;
}

}  // namespace tensorfs
