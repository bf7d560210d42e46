// MountOptions: every option tensorfs takes, defined once.
//
// The same table feeds `-o name=value` (fstab style), `--name value` flags,
// `--help` and the tensorfs(8) man page, so an option cannot exist in one form
// and not the other. Options
// are parsed into one MountOptions, validated once at start-up, and handed down
// by const&; nothing reads options from globals.
//
// Thread-safety: a MountOptions is a plain value; after validation it is only read.
#ifndef TENSORFS_CORE_OPTIONS_MOUNT_OPTIONS_H_
#define TENSORFS_CORE_OPTIONS_MOUNT_OPTIONS_H_

#include <functional>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/engine/read_engine.h"
#include "core/views/views.h"
#include "core/util/status.h"

namespace tensorfs {

struct MountOptions {
  std::string source;      // local directory, gs://bucket[/prefix] or s3://bucket[/prefix]
  // An existing directory, or /dev/fd/N: a /dev/fuse descriptor that a parent
  // has already mounted and hands over (see FuseFdOfMountPoint).
  std::string mountpoint;

  bool foreground = false;   // -f: stay in the foreground
  bool fuse_debug = false;   // -d: libfuse's request trace (implies foreground)
  bool allow_other = false;  // let other users see the mount
  // Let only root and the user tensorfs runs as use the mount: the kernel lets
  // every user in (allow_other) and libfuse refuses the others (EACCES).
  bool allow_root = false;
  int max_threads = 16;      // FUSE worker threads
  // FUSE INIT's max_background and congestion_threshold; 0: derived (see
  // FuseQueueLimits).
  int max_background = 0;
  int congestion_threshold = 0;
  // What the mount reports as every node's owner and permission bits (the
  // kernel checks them: default_permissions). nullopt: the user tensorfs runs as.
  std::optional<uint32_t> uid;
  std::optional<uint32_t> gid;
  uint32_t file_mode = 0444;
  uint32_t dir_mode = 0555;
  // Freshness (docs/FRESHNESS.md): a directory's listing is taken again once
  // it is older than metadata_ttl (infinity: listed once, nothing looked at
  // again); a name looked up and not found is looked for again after
  // negative_ttl.
  double metadata_ttl_s = 60;
  double negative_ttl_s = 5;
  // The kernel's attribute and dentry cache lifetimes; unless given, set by
  // ValidateMountOptions to metadata_ttl (3600 when it is infinite).
  double attr_timeout_s = 3600;
  double entry_timeout_s = 3600;
  std::string layer_regex;        // overrides the built-in layer grouping rules
  std::vector<ViewKind> views{kAllViews.begin(), kAllViews.end()};  // shown in checkpoint directories
  EngineOptions engine;           // chunk size, cache size, parallelism, prefetch
  // The options the user set (by -o or --flag), by name. Engine values not
  // named here are defaults that ValidateMountOptions may lower to fit cache_size.
  std::set<std::string, std::less<>> given;
  uint64_t read_ahead = 0;  // the mount's kernel readahead (bdi read_ahead_kb); 0: kernel default
  std::string log_level = "info";
  // Start-up: how long the first listing of the source may keep retrying before
  // tensorfs gives up (exit status 1); shorter than systemd's start timeouts.
  double startup_deadline_s = 60;
  std::string ready_file;  // written once the source has been reached ("" = none)
  std::string error_file;  // a start-up failure's reason is written here too ("" = none)
  int prometheus_port = 0;  // serve GET /metrics on prometheus_address:port; 0: off
  std::string prometheus_address = "127.0.0.1";  // IPv4 or IPv6 literal the metrics listen on
  std::string prometheus_socket;  // also (or instead) serve them on this Unix socket ("" = none)

  // gs:// and s3:// sources.
  // gs://: the JSON API endpoint (else STORAGE_EMULATOR_HOST, else GCS); s3://:
  // an S3-compatible store (else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's, else AWS).
  std::string endpoint;
  double retry_deadline_s = 120;  // how long a request keeps retrying transient failures
  double stall_timeout_s = 30;    // a response delivering no bytes this long is abandoned and retried
  std::string ca_file;            // PEM CA bundle that https endpoints are verified against ("" = system CAs)
  std::string user_agent_prefix;  // put before "tensorfs/VERSION" in every request's User-Agent

  // gs:// sources only.
  std::string key_file;          // service-account or authorized_user JSON key
  bool anonymous = false;        // no credentials: public buckets

  // s3:// sources only (see core/store/s3/s3_options.h).
  std::string region;                 // "" = AWS_REGION, AWS_DEFAULT_REGION, the profile's, else discovered
  bool force_path_style = false;      // https://host/bucket/key rather than https://bucket.host/key
  std::string profile;                // the only credentials source, and the profile read for settings
  bool no_sign_request = false;       // unsigned requests: public buckets
  bool requester_pays = false;        // x-amz-request-payer: requester
  std::string expected_bucket_owner;  // x-amz-expected-bucket-owner
};

// The topics options are grouped under, in this order, in --help, the man page
// and docs/CONFIGURATION.md.
enum class OptionGroup {
  kSource,   // where the bytes come from, credentials, how requests retry
  kCache,    // the chunk cache and what is fetched ahead
  kViews,    // the virtual views and the layer grouping
  kKernel,   // the FUSE session and the kernel's caches
  kStartup,  // foreground or background, readiness, start-up failures
  kLogging,  // log level and metrics
};
inline constexpr OptionGroup kAllOptionGroups[] = {OptionGroup::kSource, OptionGroup::kCache,  OptionGroup::kViews,
                                                   OptionGroup::kKernel, OptionGroup::kStartup, OptionGroup::kLogging};
// "Source and credentials", "Cache and fetching", ...: a heading.
std::string_view OptionGroupTitle(OptionGroup group);

// One row of the option table.
struct OptionSpec {
  std::string_view name;        // "-o name" and "--name" (with '_' spelled '-')
  std::string_view alias;       // a short flag ("-f"), or ""
  std::string_view value_name;  // "" for a flag that takes no value
  OptionGroup group;
  // What it does, in a few words that fit one --help line beside the default;
  // docs/CONFIGURATION.md has the details.
  std::string_view help;
  // The default, as --help and the man page show it ("8M", "learned from the
  // reads"); "" where there is none to show (a flag is off unless given).
  std::string_view default_value;
  Status (*apply)(MountOptions& options, std::string_view value);
};

std::span<const OptionSpec> AllMountOptions();

// Applies one option by name. `value` is nullopt when given without "=value".
Status ApplyMountOption(MountOptions& options, std::string_view name,
                        std::optional<std::string_view> value);

// Applies a comma-separated -o list ("allow_other,log_level=debug"). A comma
// inside a value is written "\,".
Status ApplyMountOptionList(MountOptions& options, std::string_view list);

// The engine needs cache_size >= 2 x max_fetches x chunk_size and
// prefetch_window <= cache_size / 2. Lowers the engine values the user did not
// set (see `given`) until they fit: max_fetches first, down to
// kMinFittedFetches, then chunk_size (a power of two, down to 64 KiB), then
// max_fetches below that floor; prefetch_window to half of cache_size. Returns
// a one-line note naming the new values, "" when nothing changed, or an error
// saying what to change when only values the user set could make them fit.
inline constexpr int kMinFittedFetches = 8;
StatusOr<std::string> FitEngineToCache(MountOptions& options);

// True for an object-store source (gs:// or s3://), as opposed to a local directory.
bool IsObjectStoreSource(std::string_view source);

// Checks the whole struct (source and mount point given, values in range),
// after FitEngineToCache, whose note it logs as a warning (a second call finds
// nothing to change). The message says what to fix. It does not look at the
// mount point: start-up must not touch it before mounting (an automount there
// would wait for this very mount); see CheckMountPointDirectory.
Status ValidateMountOptions(MountOptions& options);

// How long the kernel keeps a negative entry (a name looked up and not
// found): negative_ttl (at most metadata_ttl), or entry_timeout when
// metadata_ttl is infinite (nothing is looked for again).
double NegativeEntryTimeout(const MountOptions& options);

// The default max_background for a machine with `cpus` CPUs (chosen by
// measurement, scaled to the CPUs: docs/design/readahead.md).
int DefaultMaxBackground(unsigned cpus);
// The default max_fetches over a local directory (docs/CONFIGURATION.md).
int DefaultLocalFetches(unsigned cpus);
// The default prefetch_window over a local directory: 2 x max_fetches x
// chunk_size, at most the engine's default (docs/CONFIGURATION.md).
uint64_t DefaultLocalPrefetchWindow(const EngineOptions& engine);
// The CPUs this process may run on (its affinity mask, as a container's
// cpuset limits it), at least 1.
unsigned UsableCpus();

// Why `mountpoint` cannot be mounted on (missing, not a directory), or OK. Used
// to explain a failed mount, and by `mount -f`, which mounts nothing.
Status CheckMountPointDirectory(const std::string& mountpoint);

// N when `mountpoint` is "/dev/fd/N": the caller holds a /dev/fuse descriptor
// that it has mounted itself, and tensorfs serves it without mounting.
std::optional<int> FuseFdOfMountPoint(std::string_view mountpoint);

}  // namespace tensorfs

#endif  // TENSORFS_CORE_OPTIONS_MOUNT_OPTIONS_H_
