#include "core/options/mount_options.h"

#include <arpa/inet.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <limits>
#include <regex>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/options/memory_limit.h"
#include "core/safetensors/layers.h"

namespace tensorfs {
namespace {

Status ParseNumber(std::string_view name, std::string_view value, double min, double max, double& out) {
  double v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || v < min || v > max) {
    return InvalidArgumentError("option " + std::string(name) + "=" + std::string(value) +
                                ": expected a number from " + std::to_string(min) + " to " +
                                std::to_string(max));
  }
  out = v;
  return OkStatus();
}

// A number of seconds, or "inf".
Status ParseSeconds(std::string_view name, std::string_view value, double& out) {
  if (value == "inf") {
    out = std::numeric_limits<double>::infinity();
    return OkStatus();
  }
  double v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || !(v >= 0 && v <= 1e9)) {
    return InvalidArgumentError("option " + std::string(name) + "=" + std::string(value) +
                                ": expected seconds (0 to 1e9, fractions allowed) or inf");
  }
  out = v;
  return OkStatus();
}

// "8M", "2G", "512MiB", "1048576": bytes.
Status ParseSize(std::string_view name, std::string_view value, uint64_t& out) {
  uint64_t n = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
  std::string_view unit(ptr, value.data() + value.size() - ptr);
  uint64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "K" || unit == "KiB") scale = 1ull << 10;
  if (unit == "M" || unit == "MiB") scale = 1ull << 20;
  if (unit == "G" || unit == "GiB") scale = 1ull << 30;
  if (ec != std::errc() || ptr == value.data() || scale == 0 || n > (UINT64_MAX >> 30)) {
    return InvalidArgumentError("option " + std::string(name) + "=" + std::string(value) +
                                ": expected a size such as 512M or 2G (units K, M, G)");
  }
  out = n * scale;
  return OkStatus();
}

// A user or group id: a whole number below 2^32 - 1 (which means "none").
Status ParseId(std::string_view name, std::string_view value, std::optional<uint32_t>& out) {
  uint32_t id = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), id);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || id == UINT32_MAX) {
    return InvalidArgumentError(std::string(name) + "=" + std::string(value) + ": expected a numeric id such as 1000");
  }
  out = id;
  return OkStatus();
}

// Permission bits in octal, as chmod takes them: "644", "0755".
Status ParseMode(std::string_view name, std::string_view value, uint32_t& out) {
  uint32_t mode = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), mode, 8);
  if (value.empty() || ec != std::errc() || ptr != value.data() + value.size() || mode > 0777) {
    return InvalidArgumentError(std::string(name) + "=" + std::string(value) +
                                ": expected permission bits in octal, from 0 to 777, such as 644");
  }
  out = mode;
  return OkStatus();
}

Status SetFlag(bool& field, std::string_view value) {
  if (!value.empty()) return InvalidArgumentError("takes no value");
  field = true;
  return OkStatus();
}

// Grouped by topic, in the order of kAllOptionGroups; --help and the man page
// list them in this order.
const std::array kOptions = {
    // Source and credentials.
    OptionSpec{.name = "endpoint", .value_name = "URL", .group = OptionGroup::kSource,
               .help = "gs:// JSON API endpoint; s3:// an S3-compatible store's URL",
               .default_value = "gs:// $STORAGE_EMULATOR_HOST, else GCS; s3:// $AWS_ENDPOINT_URL_S3, "
                                "$AWS_ENDPOINT_URL, the profile's, else AWS",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a URL");
                 o.endpoint = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{.name = "key_file", .value_name = "PATH", .group = OptionGroup::kSource,
               .help = "gs:// service-account or authorized_user JSON key",
               .default_value = "ADC",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a path");
                 o.key_file = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{.name = "anonymous", .group = OptionGroup::kSource,
               .help = "gs:// without credentials (public buckets)",
               .apply = [](MountOptions& o, std::string_view v) { return SetFlag(o.anonymous, v); }},
    OptionSpec{.name = "ca_file", .value_name = "PATH", .group = OptionGroup::kSource,
               .help = "PEM CA certificates to verify https with",
               .default_value = "the system's; s3:// $AWS_CA_BUNDLE first",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a path to a PEM file of CA certificates");
                 o.ca_file = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{.name = "user_agent_prefix", .value_name = "TEXT", .group = OptionGroup::kSource,
               .help = "put TEXT before tensorfs/VERSION in the User-Agent of every request",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs the text to put before tensorfs/VERSION");
                 o.user_agent_prefix = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{.name = "retry_deadline", .value_name = "SECONDS", .group = OptionGroup::kSource,
               .help = "retry a read's transient errors this long, then EIO",
               .default_value = "120",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseNumber("retry_deadline", v, 1, 86400, o.retry_deadline_s);
               }},
    OptionSpec{.name = "stall_timeout", .value_name = "SECONDS", .group = OptionGroup::kSource,
               .help = "retry a response that delivers no byte this long",
               .default_value = "30",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseNumber("stall_timeout", v, 1, 3600, o.stall_timeout_s);
               }},
    OptionSpec{.name = "region", .value_name = "REGION", .group = OptionGroup::kSource,
               .help = "s3:// the bucket's region (auto for Cloudflare R2)",
               .default_value = "$AWS_REGION, $AWS_DEFAULT_REGION, the profile's, else found from the bucket",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a region name such as eu-west-1");
                 o.region = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{.name = "force_path_style", .group = OptionGroup::kSource,
               .help = "s3:// the bucket in the path (https://host/bucket/key), as MinIO needs",
               .default_value = "virtual-hosted where possible",
               .apply = [](MountOptions& o, std::string_view v) { return SetFlag(o.force_path_style, v); }},
    OptionSpec{.name = "profile", .value_name = "NAME", .group = OptionGroup::kSource,
               .help = "s3:// credentials, region and endpoint from this profile of ~/.aws only",
               .default_value = "the AWS credential chain ($AWS_PROFILE or default)",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a profile name");
                 o.profile = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{.name = "no_sign_request", .group = OptionGroup::kSource,
               .help = "s3:// unsigned requests, no credentials (public buckets)",
               .apply = [](MountOptions& o, std::string_view v) { return SetFlag(o.no_sign_request, v); }},
    OptionSpec{.name = "requester_pays", .group = OptionGroup::kSource,
               .help = "s3:// a requester-pays bucket, billed to these credentials' account",
               .apply = [](MountOptions& o, std::string_view v) { return SetFlag(o.requester_pays, v); }},
    OptionSpec{.name = "expected_bucket_owner", .value_name = "ACCOUNT_ID", .group = OptionGroup::kSource,
               .help = "s3:// the 12-digit account that must own the bucket",
               .default_value = "not checked",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a 12-digit AWS account ID");
                 o.expected_bucket_owner = std::string(v);
                 return OkStatus();
               }},

    // Cache and fetching.
    OptionSpec{.name = "metadata_ttl", .value_name = "SECONDS", .group = OptionGroup::kSource,
               .help = "list a directory again after this long: new objects appear, replaced ones reach new "
                       "opens (0: at every lookup and open; inf: never)",
               .default_value = "60",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseSeconds("metadata_ttl", v, o.metadata_ttl_s);
               }},
    OptionSpec{.name = "negative_ttl", .value_name = "SECONDS", .group = OptionGroup::kSource,
               .help = "look for a name not found again after this long (at most metadata_ttl)",
               .default_value = "5",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseSeconds("negative_ttl", v, o.negative_ttl_s);
               }},
    OptionSpec{.name = "cache_size", .value_name = "SIZE", .group = OptionGroup::kCache,
               .help = "memory for cached chunks",
               .default_value = "2G; less under a cgroup limit",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseSize("cache_size", v, o.engine.cache_size);
               }},
    OptionSpec{.name = "chunk_size", .value_name = "SIZE", .group = OptionGroup::kCache,
               .help = "largest range request",
               .default_value = "8M",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseSize("chunk_size", v, o.engine.chunk_size);
               }},
    OptionSpec{.name = "max_fetches", .value_name = "N", .group = OptionGroup::kCache,
               .help = "range requests in flight",
               .default_value = "32; local dir: 2/CPU, 4-32",
               .apply = [](MountOptions& o, std::string_view v) {
                 double n = 0;
                 RETURN_IF_ERROR(ParseNumber("max_fetches", v, 1, 1024, n));
                 o.engine.max_fetches = static_cast<int>(n);
                 return OkStatus();
               }},
    OptionSpec{.name = "prefetch_window", .value_name = "SIZE", .group = OptionGroup::kCache,
               .help = "prefetch distance of a sequential reader",
               .default_value = "256M; local: less",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseSize("prefetch_window", v, o.engine.prefetch_window);
               }},
    OptionSpec{.name = "shard", .value_name = "R/N", .group = OptionGroup::kCache,
               .help = "this host reads dim-0 slice R of N of every tensor",
               .default_value = "learned",
               .apply = [](MountOptions& o, std::string_view v) {
                 const size_t slash = v.find('/');
                 double rank = 0, world = 0;
                 if (slash == std::string_view::npos) {
                   return InvalidArgumentError("shard=" + std::string(v) +
                                               ": write shard=R/N, e.g. shard=3/8 for host 3 of 8");
                 }
                 RETURN_IF_ERROR(ParseNumber("shard world size N", v.substr(slash + 1), 1, 1024, world));
                 RETURN_IF_ERROR(ParseNumber("shard rank R", v.substr(0, slash), 0, world - 1, rank));
                 if (rank != static_cast<uint64_t>(rank) || world != static_cast<uint64_t>(world)) {
                   return InvalidArgumentError("shard=" + std::string(v) + ": R and N must be whole numbers");
                 }
                 o.engine.shard_rank = static_cast<uint64_t>(rank);
                 o.engine.shard_world = static_cast<uint64_t>(world);
                 return OkStatus();
               }},

    // Views.
    OptionSpec{.name = "views", .value_name = "LIST", .group = OptionGroup::kViews,
               .help = "views shown: all, none, or names joined by ':'",
               .default_value = "all",
               .apply = [](MountOptions& o, std::string_view v) {
                 ASSIGN_OR_RETURN(o.views, ParseViewList(v));
                 return OkStatus();
               }},
    OptionSpec{.name = "layer_regex", .value_name = "REGEX", .group = OptionGroup::kViews,
               .help = "group tensors into layers by this regex",
               .default_value = "built-in rules",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a regular expression");
                 RETURN_IF_ERROR(CheckLayerRegex(v));
                 try {
                   std::regex re{std::string(v)};
                 } catch (const std::regex_error& e) {
                   return InvalidArgumentError("layer_regex '" + std::string(v) +
                                               "' is not a valid regular expression: " + e.what());
                 }
                 o.layer_regex = std::string(v);
                 return OkStatus();
               }},

    // Kernel and FUSE.
    OptionSpec{.name = "allow_other", .group = OptionGroup::kKernel,
               .help = "let users other than the one mounting read the files",
               .apply = [](MountOptions& o, std::string_view v) { return SetFlag(o.allow_other, v); }},
    OptionSpec{.name = "allow_root", .group = OptionGroup::kKernel,
               .help = "let only root and the user tensorfs runs as read the files",
               .apply = [](MountOptions& o, std::string_view v) { return SetFlag(o.allow_root, v); }},
    OptionSpec{.name = "ro", .group = OptionGroup::kKernel,
               .help = "read-only: always so; accepted for fstab lines",
               .apply = [](MountOptions&, std::string_view v) {
                 return v.empty() ? OkStatus() : InvalidArgumentError("takes no value");
               }},
    OptionSpec{.name = "uid", .value_name = "UID", .group = OptionGroup::kKernel,
               .help = "the owner every file and directory reports (numeric)",
               .default_value = "the user tensorfs runs as",
               .apply = [](MountOptions& o, std::string_view v) { return ParseId("uid", v, o.uid); }},
    OptionSpec{.name = "gid", .value_name = "GID", .group = OptionGroup::kKernel,
               .help = "the group every file and directory reports (numeric)",
               .default_value = "the group tensorfs runs as",
               .apply = [](MountOptions& o, std::string_view v) { return ParseId("gid", v, o.gid); }},
    OptionSpec{.name = "file_mode", .value_name = "MODE", .group = OptionGroup::kKernel,
               .help = "the permission bits files report, in octal",
               .default_value = "444",
               .apply = [](MountOptions& o, std::string_view v) { return ParseMode("file_mode", v, o.file_mode); }},
    OptionSpec{.name = "dir_mode", .value_name = "MODE", .group = OptionGroup::kKernel,
               .help = "the permission bits directories report, in octal",
               .default_value = "555",
               .apply = [](MountOptions& o, std::string_view v) { return ParseMode("dir_mode", v, o.dir_mode); }},
    OptionSpec{.name = "debug", .alias = "-d", .group = OptionGroup::kKernel,
               .help = "print every FUSE request; implies --foreground",
               .apply = [](MountOptions& o, std::string_view v) {
                 o.foreground = true;
                 return SetFlag(o.fuse_debug, v);
               }},
    OptionSpec{.name = "max_threads", .value_name = "N", .group = OptionGroup::kKernel,
               .help = "FUSE worker threads",
               .default_value = "16",
               .apply = [](MountOptions& o, std::string_view v) {
                 double n = 0;
                 RETURN_IF_ERROR(ParseNumber("max_threads", v, 1, 1024, n));
                 o.max_threads = static_cast<int>(n);
                 return OkStatus();
               }},
    OptionSpec{.name = "max_background", .value_name = "N", .group = OptionGroup::kKernel,
               .help = "readahead requests the kernel queues",
               .default_value = "4/CPU, 32 to 64",
               .apply = [](MountOptions& o, std::string_view v) {
                 double n = 0;
                 RETURN_IF_ERROR(ParseNumber("max_background", v, 1, 65535, n));
                 o.max_background = static_cast<int>(n);
                 return OkStatus();
               }},
    OptionSpec{.name = "congestion_threshold", .value_name = "N", .group = OptionGroup::kKernel,
               .help = "queue length that holds readahead back",
               .default_value = "3/4 max_background",
               .apply = [](MountOptions& o, std::string_view v) {
                 double n = 0;
                 RETURN_IF_ERROR(ParseNumber("congestion_threshold", v, 1, 65535, n));
                 o.congestion_threshold = static_cast<int>(n);
                 return OkStatus();
               }},
    OptionSpec{.name = "attr_timeout", .value_name = "SECONDS", .group = OptionGroup::kKernel,
               .help = "how long the kernel caches attributes",
               .default_value = "metadata_ttl, 3600 if inf",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseNumber("attr_timeout", v, 0, 1e9, o.attr_timeout_s);
               }},
    OptionSpec{.name = "entry_timeout", .value_name = "SECONDS", .group = OptionGroup::kKernel,
               .help = "how long the kernel caches names",
               .default_value = "metadata_ttl, 3600 if inf",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseNumber("entry_timeout", v, 0, 1e9, o.entry_timeout_s);
               }},
    OptionSpec{.name = "read_ahead", .value_name = "SIZE", .group = OptionGroup::kKernel,
               .help = "kernel readahead of every file, fixed",
               .default_value = "set by the readers",
               .apply = [](MountOptions& o, std::string_view v) {
                 RETURN_IF_ERROR(ParseSize("read_ahead", v, o.read_ahead));
                 if (o.read_ahead > (1ull << 30)) return InvalidArgumentError("read_ahead must be at most 1G");
                 return OkStatus();
               }},

    // Start-up.
    OptionSpec{.name = "foreground", .alias = "-f", .group = OptionGroup::kStartup,
               .help = "stay in the foreground until unmounted",
               .apply = [](MountOptions& o, std::string_view v) { return SetFlag(o.foreground, v); }},
    OptionSpec{.name = "startup_deadline", .value_name = "SECONDS", .group = OptionGroup::kStartup,
               .help = "keep trying to reach the source this long, then exit 1",
               .default_value = "60",
               .apply = [](MountOptions& o, std::string_view v) {
                 return ParseNumber("startup_deadline", v, 1, 3600, o.startup_deadline_s);
               }},
    OptionSpec{.name = "ready_file", .value_name = "PATH", .group = OptionGroup::kStartup,
               .help = "write PATH once the mount serves the source",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a path");
                 o.ready_file = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{.name = "error_file", .value_name = "PATH", .group = OptionGroup::kStartup,
               .help = "write the reason start-up failed to PATH too",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a path");
                 o.error_file = std::string(v);
                 return OkStatus();
               }},

    // Logging and metrics.
    OptionSpec{.name = "log_level", .value_name = "LEVEL", .group = OptionGroup::kLogging,
               .help = "trace, debug, info, warn, error or off",
               .default_value = "info",
               .apply = [](MountOptions& o, std::string_view v) {
                 for (std::string_view level : {"trace", "debug", "info", "warn", "error", "off"}) {
                   if (v == level) {
                     o.log_level = std::string(v);
                     return OkStatus();
                   }
                 }
                 return InvalidArgumentError("log_level=" + std::string(v) +
                                             ": use trace, debug, info, warn, error or off");
               }},
    OptionSpec{.name = "prometheus_port", .value_name = "PORT", .group = OptionGroup::kLogging,
               .help = "serve Prometheus metrics on this port",
               .default_value = "off",
               .apply = [](MountOptions& o, std::string_view v) {
                 double port = 0;
                 RETURN_IF_ERROR(ParseNumber("prometheus_port", v, 1, 65535, port));
                 if (port != static_cast<int>(port)) return InvalidArgumentError("a port is a whole number");
                 o.prometheus_port = static_cast<int>(port);
                 return OkStatus();
               }},
    OptionSpec{.name = "prometheus_address", .value_name = "ADDRESS", .group = OptionGroup::kLogging,
               .help = "address the metrics listen on, 0.0.0.0 for all",
               .default_value = "127.0.0.1",
               .apply = [](MountOptions& o, std::string_view v) {
                 const std::string address(v);
                 in6_addr buf;
                 if (::inet_pton(AF_INET, address.c_str(), &buf) != 1 &&
                     ::inet_pton(AF_INET6, address.c_str(), &buf) != 1) {
                   return InvalidArgumentError("prometheus_address=" + address +
                                               ": give an IPv4 or IPv6 address such as 127.0.0.1, 0.0.0.0 or ::");
                 }
                 o.prometheus_address = address;
                 return OkStatus();
               }},
    OptionSpec{.name = "prometheus_socket", .value_name = "PATH", .group = OptionGroup::kLogging,
               .help = "also serve the metrics on a Unix socket, at every path",
               .apply = [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a path");
                 o.prometheus_socket = std::string(v);
                 return OkStatus();
               }},
};

}  // namespace

std::string_view OptionGroupTitle(OptionGroup group) {
  switch (group) {
    case OptionGroup::kSource: return "Source and credentials";
    case OptionGroup::kCache: return "Cache and fetching";
    case OptionGroup::kViews: return "Views";
    case OptionGroup::kKernel: return "Kernel and FUSE";
    case OptionGroup::kStartup: return "Start-up";
    case OptionGroup::kLogging: return "Logging and metrics";
  }
  return "Other";
}

std::span<const OptionSpec> AllMountOptions() { return kOptions; }

Status ApplyMountOption(MountOptions& options, std::string_view name,
                        std::optional<std::string_view> value) {
  for (const OptionSpec& spec : kOptions) {
    if (spec.name != name) continue;
    if (!spec.value_name.empty() && !value) {
      return InvalidArgumentError("option " + std::string(name) + " needs a value: " +
                                  std::string(name) + "=" + std::string(spec.value_name));
    }
    RETURN_IF_ERROR(spec.apply(options, value.value_or("")).WithContext("option " + std::string(name)));
    options.given.emplace(name);
    return OkStatus();
  }
  if (name == "rw") return InvalidArgumentError("tensorfs is read-only: remove the 'rw' option");
  return InvalidArgumentError("unknown option '" + std::string(name) +
                              "' (run tensorfs --help for the list)");
}

Status ApplyMountOptionList(MountOptions& options, std::string_view list) {
  std::string item;
  auto flush = [&]() -> Status {
    if (item.empty()) return OkStatus();
    size_t eq = item.find('=');
    Status s = eq == std::string::npos
                   ? ApplyMountOption(options, item, std::nullopt)
                   : ApplyMountOption(options, std::string_view(item).substr(0, eq),
                                      std::string_view(item).substr(eq + 1));
    item.clear();
    return s;
  };
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i] == '\\' && i + 1 < list.size() && list[i + 1] == ',') {
      item += ',';
      ++i;
    } else if (list[i] == ',') {
      RETURN_IF_ERROR(flush());
    } else {
      item += list[i];
    }
  }
  return flush();
}

namespace {

constexpr uint64_t kMinChunkSize = 64ull << 10;  // EngineOptions::Validate's lower bound

// A size as an option value: "8M", "512K", or bytes.
std::string SizeValue(uint64_t bytes) {
  if (bytes != 0 && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes != 0 && bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

uint64_t FloorPowerOfTwo(uint64_t n) {
  uint64_t p = 1;
  while (p <= n / 2) p *= 2;
  return p;
}

}  // namespace

StatusOr<std::string> FitEngineToCache(MountOptions& options) {
  EngineOptions& e = options.engine;
  // Values out of range are EngineOptions::Validate's to report.
  if (e.chunk_size < kMinChunkSize || e.chunk_size > (1ull << 30) || e.max_fetches < 1 || e.max_fetches > 1024) {
    return std::string();
  }
  const bool fetches_free = !options.given.contains("max_fetches");
  const bool chunk_free = !options.given.contains("chunk_size");
  const uint64_t cache = e.cache_size;
  uint64_t fetches = static_cast<uint64_t>(e.max_fetches);
  uint64_t chunk = e.chunk_size;
  auto fits = [&] { return 2 * fetches * chunk <= cache; };
  if (!fits() && fetches_free) {
    fetches = std::min(fetches, std::max<uint64_t>(kMinFittedFetches, cache / (2 * chunk)));
  }
  if (!fits() && chunk_free) {
    chunk = std::min(chunk, std::max(kMinChunkSize, FloorPowerOfTwo(std::max<uint64_t>(1, cache / (2 * fetches)))));
  }
  if (!fits() && fetches_free) fetches = std::max<uint64_t>(1, cache / (2 * chunk));
  if (!fits()) {
    std::string set;
    std::string lower;
    if (!fetches_free) {
      set = "max_fetches=" + std::to_string(e.max_fetches);
      if (cache / (2 * chunk) >= 1) lower = "max_fetches to " + std::to_string(cache / (2 * chunk));
    }
    if (!chunk_free) {
      set += (set.empty() ? "" : " and ") + ("chunk_size=" + SizeValue(e.chunk_size));
      const uint64_t most = cache / (2 * fetches) / kMinChunkSize * kMinChunkSize;
      if (most >= kMinChunkSize) lower += (lower.empty() ? "" : " or ") + ("chunk_size to " + SizeValue(most));
    }
    if (set.empty()) {
      return InvalidArgumentError("cache_size=" + SizeValue(cache) + " is too small: it must hold at least 2 x " +
                                  std::to_string(fetches) + " chunks of " + SizeValue(chunk) +
                                  "; raise cache_size to at least " + SizeValue(2 * fetches * chunk));
    }
    return InvalidArgumentError(
        "cache_size=" + SizeValue(cache) + " cannot hold 2 x max_fetches x chunk_size = 2 x " +
        std::to_string(fetches) + " x " + SizeValue(chunk) + " = " + SizeValue(2 * fetches * chunk) +
        " with the " + set + " you set: raise cache_size to at least " + SizeValue(2 * fetches * chunk) +
        (lower.empty() ? "" : ", or lower " + lower) + " (or leave them unset to have them fitted)");
  }
  std::string note;
  auto add = [&note](const std::string& what) { note += (note.empty() ? "" : ", ") + what; };
  if (fetches != static_cast<uint64_t>(e.max_fetches)) {
    add("max_fetches=" + std::to_string(fetches) + " (default " + std::to_string(e.max_fetches) + ")");
    e.max_fetches = static_cast<int>(fetches);
  }
  if (chunk != e.chunk_size) {
    add("chunk_size=" + SizeValue(chunk) + " (default " + SizeValue(e.chunk_size) + ")");
    e.chunk_size = chunk;
  }
  if (e.prefetch_window > cache / 2 && !options.given.contains("prefetch_window")) {
    add("prefetch_window=" + SizeValue(cache / 2) + " (default " + SizeValue(e.prefetch_window) + ")");
    e.prefetch_window = cache / 2;
  }
  if (note.empty()) return note;
  return "cache_size=" + SizeValue(cache) + ": using " + note +
         ", so that it holds 2 x max_fetches x chunk_size and twice prefetch_window; set these options to "
         "choose other values";
}

bool IsObjectStoreSource(std::string_view source) {
  return source.starts_with("gs://") || source.starts_with("s3://");
}

Status ValidateMountOptions(MountOptions& options) {
  if (options.source.empty()) {
    return InvalidArgumentError("missing SOURCE: give a local directory, gs://bucket[/prefix] or s3://bucket[/prefix]");
  }
  const bool gcs = options.source.starts_with("gs://");
  const bool s3 = options.source.starts_with("s3://");
  if (!gcs && !s3 && (!options.endpoint.empty() || !options.ca_file.empty())) {
    return InvalidArgumentError("the endpoint and ca_file options apply to gs:// and s3:// sources only");
  }
  if (!gcs && (!options.key_file.empty() || options.anonymous)) {
    return InvalidArgumentError(std::string("the key_file and anonymous options apply to gs:// sources only") +
                                (s3 ? "; for s3:// use profile=NAME or no_sign_request" : ""));
  }
  for (const char* name :
       {"region", "force_path_style", "profile", "no_sign_request", "requester_pays", "expected_bucket_owner"}) {
    if (!s3 && options.given.contains(name)) {
      return InvalidArgumentError("option " + std::string(name) + " applies to s3:// sources only" +
                                  (gcs && std::string_view(name) == "no_sign_request" ? "; for gs:// use anonymous"
                                                                                      : ""));
    }
  }
  if (options.no_sign_request && !options.profile.empty()) {
    return InvalidArgumentError("give either no_sign_request or profile=" + options.profile + ", not both");
  }
  if (options.anonymous && !options.key_file.empty()) {
    return InvalidArgumentError("give either anonymous or key_file, not both");
  }
  if (options.allow_other && options.allow_root) {
    return InvalidArgumentError("give either allow_other (every user) or allow_root (root and the user tensorfs "
                                "runs as), not both");
  }
  if (options.given.contains("prometheus_address") && options.prometheus_port == 0) {
    return InvalidArgumentError("prometheus_address needs prometheus_port: add -o prometheus_port=PORT");
  }
  if (options.mountpoint.empty()) {
    return InvalidArgumentError("missing MOUNTPOINT: give an existing empty directory to mount on");
  }
  // A local directory's files are read by copying from the page cache (or a
  // disk or a network file system under it): more copies at once than CPUs
  // only share the CPUs, and each holds a chunk's buffer.
  // Nor does a reader of one need a window past what those copies fill twice
  // over: its reads wait on CPUs, not on a link's latency, and each chunk held
  // ahead is a buffer mapped, and zeroed by the kernel, afresh. Chunks the
  // kernel received in full are kept for re-reads through other files (views)
  // only as far as one chunk: fetching them again is a copy from the page
  // cache, and each one kept is a buffer the next fetch cannot reuse.
  if (!IsObjectStoreSource(options.source)) {
    if (!options.given.contains("max_fetches")) options.engine.max_fetches = DefaultLocalFetches(UsableCpus());
    if (!options.given.contains("prefetch_window")) {
      options.engine.prefetch_window = DefaultLocalPrefetchWindow(options.engine);
    }
    options.engine.consumed_keep = std::min(options.engine.consumed_keep, options.engine.chunk_size);
  }
  // In a container, the default cache follows its memory limit (memory_limit.h).
  ASSIGN_OR_RETURN(const std::string from_limit, FitCacheToMemoryLimit(options, FindCgroupMemoryLimit()));
  if (!from_limit.empty()) spdlog::info("{}", from_limit);
  ASSIGN_OR_RETURN(const std::string fitted, FitEngineToCache(options));
  if (!fitted.empty()) spdlog::warn("{}", fitted);
  RETURN_IF_ERROR(options.engine.Validate());
  // The kernel's caches follow the metadata TTL, so that after it a lookup
  // reaches the mount, which lists the directory again.
  const double kernel_timeout = std::isinf(options.metadata_ttl_s) ? 3600 : options.metadata_ttl_s;
  if (!options.given.contains("attr_timeout")) options.attr_timeout_s = kernel_timeout;
  if (!options.given.contains("entry_timeout")) options.entry_timeout_s = kernel_timeout;
  if (options.max_background == 0) options.max_background = DefaultMaxBackground(UsableCpus());
  if (options.congestion_threshold == 0) {
    options.congestion_threshold = std::max(1, options.max_background * 3 / 4);
  } else if (options.congestion_threshold > options.max_background) {
    return InvalidArgumentError("congestion_threshold=" + std::to_string(options.congestion_threshold) +
                                " is above max_background=" + std::to_string(options.max_background) +
                                ": the kernel would never hold readahead back; lower it or raise max_background");
  }
  return OkStatus();
}

double NegativeEntryTimeout(const MountOptions& options) {
  if (std::isinf(options.metadata_ttl_s)) return options.entry_timeout_s;
  return std::min(options.negative_ttl_s, options.metadata_ttl_s);
}

int DefaultLocalFetches(unsigned cpus) { return static_cast<int>(std::clamp<unsigned>(2 * cpus, 4, 32)); }

uint64_t DefaultLocalPrefetchWindow(const EngineOptions& engine) {
  return std::min(engine.prefetch_window, 2 * static_cast<uint64_t>(engine.max_fetches) * engine.chunk_size);
}

int DefaultMaxBackground(unsigned cpus) { return static_cast<int>(std::clamp<unsigned>(4 * cpus, 32, 64)); }

unsigned UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

Status CheckMountPointDirectory(const std::string& mountpoint) {
  struct stat st;
  if (::stat(mountpoint.c_str(), &st) != 0) {
    return InvalidArgumentError("mount point " + mountpoint +
                                " does not exist (or is a dead mount: fusermount3 -u it): create it "
                                "with mkdir -p " + mountpoint);
  }
  if (!S_ISDIR(st.st_mode)) return InvalidArgumentError("mount point " + mountpoint + " is not a directory");
  return OkStatus();
}

std::optional<int> FuseFdOfMountPoint(std::string_view mountpoint) {
  constexpr std::string_view kPrefix = "/dev/fd/";
  if (!mountpoint.starts_with(kPrefix)) return std::nullopt;
  std::string_view digits = mountpoint.substr(kPrefix.size());
  int fd = -1;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), fd);
  if (digits.empty() || ec != std::errc() || ptr != digits.data() + digits.size() || fd < 0) return std::nullopt;
  return fd;
}

}  // namespace tensorfs
