#include "core/options/mount_options.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <charconv>
#include <regex>

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

Status SetFlag(bool& field, std::string_view value) {
  if (!value.empty()) return InvalidArgumentError("takes no value");
  field = true;
  return OkStatus();
}

const std::array kOptions = {
    OptionSpec{"foreground", "", "stay in the foreground (also -f)",
               [](MountOptions& o, std::string_view v) { return SetFlag(o.foreground, v); }},
    OptionSpec{"debug", "", "print every FUSE request; implies foreground (also -d)",
               [](MountOptions& o, std::string_view v) {
                 o.foreground = true;
                 return SetFlag(o.fuse_debug, v);
               }},
    OptionSpec{"allow_other", "", "let users other than the one mounting read the files",
               [](MountOptions& o, std::string_view v) { return SetFlag(o.allow_other, v); }},
    OptionSpec{"ro", "", "read-only (always; accepted for fstab)",
               [](MountOptions&, std::string_view v) {
                 return v.empty() ? OkStatus() : InvalidArgumentError("takes no value");
               }},
    OptionSpec{"max_threads", "N", "FUSE worker threads (default 16)",
               [](MountOptions& o, std::string_view v) {
                 double n = 0;
                 RETURN_IF_ERROR(ParseNumber("max_threads", v, 1, 1024, n));
                 o.max_threads = static_cast<int>(n);
                 return OkStatus();
               }},
    OptionSpec{"attr_timeout", "SECONDS", "how long the kernel caches attributes (default 3600)",
               [](MountOptions& o, std::string_view v) {
                 return ParseNumber("attr_timeout", v, 0, 1e9, o.attr_timeout_s);
               }},
    OptionSpec{"entry_timeout", "SECONDS", "how long the kernel caches names (default 3600)",
               [](MountOptions& o, std::string_view v) {
                 return ParseNumber("entry_timeout", v, 0, 1e9, o.entry_timeout_s);
               }},
    OptionSpec{"layer_regex", "REGEX",
               "group tensors into layers by this ECMAScript regex; its first capture group (or the "
               "whole match) names the layer (default: built-in rules for Llama, GPT-2, T5 and alike)",
               [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a regular expression");
                 try {
                   std::regex re{std::string(v)};
                 } catch (const std::regex_error& e) {
                   return InvalidArgumentError("layer_regex '" + std::string(v) +
                                               "' is not a valid regular expression: " + e.what());
                 }
                 o.layer_regex = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{"views", "LIST",
               "virtual views shown in each checkpoint directory: all, none, or names joined by ':' from "
               "tensors, splitted_model, splitted_model.4bit, splitted_model.8bit, bnb-nf4, bnb-int8, bf16, "
               "f16 (default all)",
               [](MountOptions& o, std::string_view v) {
                 ASSIGN_OR_RETURN(o.views, ParseViewList(v));
                 return OkStatus();
               }},
    OptionSpec{"cache_size", "SIZE",
               "memory for cached chunks, e.g. 4G; the whole mount stays within it plus ~128 MiB "
               "(default 2G)",
               [](MountOptions& o, std::string_view v) { return ParseSize("cache_size", v, o.engine.cache_size); }},
    OptionSpec{"chunk_size", "SIZE",
               "largest range request; small tensors are fetched together up to it, larger ones in "
               "parallel pieces (default 8M)",
               [](MountOptions& o, std::string_view v) { return ParseSize("chunk_size", v, o.engine.chunk_size); }},
    OptionSpec{"max_fetches", "N", "range requests in flight at once (default 32)",
               [](MountOptions& o, std::string_view v) {
                 double n = 0;
                 RETURN_IF_ERROR(ParseNumber("max_fetches", v, 1, 1024, n));
                 o.engine.max_fetches = static_cast<int>(n);
                 return OkStatus();
               }},
    OptionSpec{"prefetch_window", "SIZE",
               "how far ahead of a sequential reader to fetch, in storage order (default 256M)",
               [](MountOptions& o, std::string_view v) {
                 return ParseSize("prefetch_window", v, o.engine.prefetch_window);
               }},
    OptionSpec{"log_level", "LEVEL", "trace, debug, info, warn, error or off (default info)",
               [](MountOptions& o, std::string_view v) {
                 for (std::string_view level : {"trace", "debug", "info", "warn", "error", "off"}) {
                   if (v == level) {
                     o.log_level = std::string(v);
                     return OkStatus();
                   }
                 }
                 return InvalidArgumentError("log_level=" + std::string(v) +
                                             ": use trace, debug, info, warn, error or off");
               }},
    OptionSpec{"prometheus_port", "PORT",
               "serve the mount's metrics in the Prometheus text format at "
               "http://127.0.0.1:PORT/metrics (default: off)",
               [](MountOptions& o, std::string_view v) {
                 double port = 0;
                 RETURN_IF_ERROR(ParseNumber("prometheus_port", v, 1, 65535, port));
                 if (port != static_cast<int>(port)) return InvalidArgumentError("a port is a whole number");
                 o.prometheus_port = static_cast<int>(port);
                 return OkStatus();
               }},
    OptionSpec{"endpoint", "URL",
               "gs:// only: the JSON API endpoint, e.g. http://127.0.0.1:4443 (default: "
               "$STORAGE_EMULATOR_HOST if set, else https://storage.googleapis.com)",
               [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a URL");
                 o.endpoint = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{"key_file", "PATH",
               "gs:// only: a service-account (or authorized_user) JSON key; default: Application "
               "Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud, the metadata server)",
               [](MountOptions& o, std::string_view v) {
                 if (v.empty()) return InvalidArgumentError("needs a path");
                 o.key_file = std::string(v);
                 return OkStatus();
               }},
    OptionSpec{"anonymous", "", "gs:// only: send no credentials (public buckets)",
               [](MountOptions& o, std::string_view v) { return SetFlag(o.anonymous, v); }},
    OptionSpec{"retry_deadline", "SECONDS",
               "gs:// only: how long a request retries transient errors before the read fails with "
               "EIO (default 120)",
               [](MountOptions& o, std::string_view v) {
                 return ParseNumber("retry_deadline", v, 1, 86400, o.retry_deadline_s);
               }},
    OptionSpec{"stall_timeout", "SECONDS",
               "gs:// only: abandon (and retry) a response that delivers no bytes for this long "
               "(default 30)",
               [](MountOptions& o, std::string_view v) {
                 return ParseNumber("stall_timeout", v, 1, 3600, o.stall_timeout_s);
               }},
};

}  // namespace

std::span<const OptionSpec> AllMountOptions() { return kOptions; }

Status ApplyMountOption(MountOptions& options, std::string_view name,
                        std::optional<std::string_view> value) {
  for (const OptionSpec& spec : kOptions) {
    if (spec.name != name) continue;
    if (!spec.value_name.empty() && !value) {
      return InvalidArgumentError("option " + std::string(name) + " needs a value: " +
                                  std::string(name) + "=" + std::string(spec.value_name));
    }
    return spec.apply(options, value.value_or("")).WithContext("option " + std::string(name));
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

Status ValidateMountOptions(const MountOptions& options) {
  if (options.source.empty()) {
    return InvalidArgumentError("missing SOURCE: give a local directory or gs://bucket[/prefix]");
  }
  if (!options.source.starts_with("gs://") &&
      (!options.endpoint.empty() || !options.key_file.empty() || options.anonymous)) {
    return InvalidArgumentError("the endpoint, key_file and anonymous options apply to gs:// sources only");
  }
  if (options.anonymous && !options.key_file.empty()) {
    return InvalidArgumentError("give either anonymous or key_file, not both");
  }
  if (options.mountpoint.empty()) {
    return InvalidArgumentError("missing MOUNTPOINT: give an existing empty directory to mount on");
  }
  RETURN_IF_ERROR(options.engine.Validate());
  struct stat st;
  if (::stat(options.mountpoint.c_str(), &st) != 0) {
    return InvalidArgumentError("mount point " + options.mountpoint +
                                " does not exist (or is a dead mount: fusermount3 -u it): create it "
                                "with mkdir -p " + options.mountpoint);
  }
  if (!S_ISDIR(st.st_mode)) {
    return InvalidArgumentError("mount point " + options.mountpoint + " is not a directory");
  }
  return OkStatus();
}

}  // namespace tensorfs
