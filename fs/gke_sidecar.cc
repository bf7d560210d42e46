#include "fs/gke_sidecar.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/options/memory_limit.h"
#include "core/options/mount_options.h"
#include "core/util/thread_annotations.h"
#include "fs/exit_status.h"
#include "core/util/process.h"

namespace tensorfs {
namespace {

constexpr std::string_view kIncorrectUsage = "Incorrect Usage: ";

// Why a gcsfuse option has no effect here, by its name or the start of it.
std::string WhyIgnored(std::string_view key) {
  if (key == "implicit-dirs") return "tensorfs always shows the directories that object names imply";
  if (key.starts_with("file-cache:")) {
    return "tensorfs caches in memory, within the container's memory limit: size it with tensorfs:cache_size:SIZE";
  }
  if (key.starts_with("metadata-cache:")) return "tensorfs keeps every name it listed, however many";
  if (key.starts_with("logging:")) return "tensorfs logs to the container's output; set tensorfs:log_level:debug";
  if (key == "ro" || key == "rw") return "tensorfs serves every volume read-only";
  return "gcsfuse's, with no tensorfs equivalent";
}

// gcsfuse's metadata-cache:ttl-secs:N and metadata-cache:negative-ttl-secs:N (volume attribute
// metadataCacheTTLSeconds, ...) as metadata_ttl and negative_ttl; -1, gcsfuse's "never expires", is inf.
std::optional<std::string> MetadataTtlItem(std::string_view key) {
  for (auto [gcsfuse, tensorfs] : {std::pair{std::string_view("metadata-cache:ttl-secs:"), "metadata_ttl="},
                                   std::pair{std::string_view("metadata-cache:negative-ttl-secs:"), "negative_ttl="}}) {
    if (!key.starts_with(gcsfuse)) continue;
    const std::string_view value = key.substr(gcsfuse.size());
    return std::string(tensorfs) + (value == "-1" ? "inf" : std::string(value));
  }
  return std::nullopt;
}

bool IsBucketName(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

// tensorfs:NAME[:VALUE] as one -o item, checked against the option table.
StatusOr<std::optional<std::string>> TensorfsOption(std::string_view option) {
  std::string_view rest = option.substr(std::string_view("tensorfs:").size());
  const size_t colon = rest.find(':');
  std::string name(rest.substr(0, colon));
  std::replace(name.begin(), name.end(), '-', '_');
  const std::optional<std::string_view> value =
      colon == std::string_view::npos ? std::nullopt : std::optional(rest.substr(colon + 1));
  const auto specs = AllMountOptions();
  const auto spec = std::find_if(specs.begin(), specs.end(), [&](const OptionSpec& s) { return s.name == name; });
  if (name.empty() || spec == specs.end()) {
    return InvalidArgumentError(std::string(kIncorrectUsage) + "unknown tensorfs option '" + name + "' in " +
                                std::string(option) + " (the names are those of tensorfs --help)");
  }
  if (spec->value_name.empty()) {  // a flag
    if (!value || *value == "true") return std::optional<std::string>(name);
    if (*value == "false") return std::optional<std::string>();
    return InvalidArgumentError(std::string(kIncorrectUsage) + std::string(option) + ": " + name +
                                " takes no value; write tensorfs:" + name + " or tensorfs:" + name + ":true");
  }
  if (!value || value->empty()) {
    return InvalidArgumentError(std::string(kIncorrectUsage) + std::string(option) + ": " + name +
                                " needs a value: tensorfs:" + name + ":" + std::string(spec->value_name));
  }
  return std::optional<std::string>(name + "=" + std::string(*value));
}

// A child's line: is it an error? Its logger writes "DATE LEVEL message"
// (logging.h, with stderr on a pipe); a line of any other shape is its last
// word ("tensorfs: reason") or libfuse's, both about a failure.
bool IsErrorLine(const std::string& line) {
  const size_t space = line.find(' ');
  const bool stamped = space == 23 && line.size() > 24 && line[4] == '-' && line[10] == 'T';
  if (!stamped) return true;
  const std::string_view level = std::string_view(line).substr(24, line.find(' ', 24) - 24);
  if (level == "trace" || level == "debug" || level == "info" || level == "warning") return false;
  return true;
}

// Appends `line` to the volume's error file in one write (the node plugin may
// read it at any time) and logs it as an error.
void ReportError(const std::string& error_file, const std::string& volume, const std::string& line) {
  spdlog::error("[{}] {}", volume, line);
  const int fd = ::open(error_file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return spdlog::error("[{}] cannot write {}: {}", volume, error_file, std::strerror(errno));
  const std::string text = line + "\n";
  if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    spdlog::error("[{}] cannot write {}: {}", volume, error_file, std::strerror(errno));
  }
  ::close(fd);
}

// Every TMP/.volumes/VOL/socket, sorted.
std::vector<std::string> VolumeSockets(const std::string& volumes_dir) {
  std::vector<std::string> sockets;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(volumes_dir, ec)) {
    const std::string socket = (entry.path() / "socket").string();
    struct stat st;
    if (::lstat(socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) sockets.push_back(socket);
  }
  std::sort(sockets.begin(), sockets.end());
  return sockets;
}

// The volumes being served and whether the sidecar is stopping. Thread-safe.
class Volumes {
 public:
  explicit Volumes(sigset_t child_mask) : child_mask_(child_mask) {}

  // Starts the child, unless stopping (then closes `fd` and returns nullopt).
  StatusOr<std::optional<ServingChild>> Start(const GkeMount& mount, int fd) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    if (stopping_) {
      ::close(fd);
      return std::optional<ServingChild>();
    }
    ASSIGN_OR_RETURN(ServingChild child, StartServingChild(mount.source, mount.options, fd, child_mask_));
    children_.Add(child.pid);
    ++running_;
    return std::optional(child);
  }

  bool stopping() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return stopping_;
  }

  // A child has ended and been reported.
  void Ended() EXCLUDES(mu_) {
    MutexLock lock(mu_);
    --running_;
    ended_.NotifyAll();
  }

  // Stops every child: SIGTERM, then SIGKILL to those left after `grace`.
  void StopAll(std::chrono::milliseconds grace) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    stopping_ = true;
    children_.Signal(SIGTERM);
    if (ended_.WaitFor(mu_, grace, [this]() REQUIRES(mu_) { return running_ == 0; })) return;
    spdlog::warn("{} mount(s) still running {} ms after SIGTERM: killing them", running_, grace.count());
    children_.Signal(SIGKILL);
    ended_.WaitFor(mu_, std::chrono::seconds(1), [this]() REQUIRES(mu_) { return running_ == 0; });
  }

  ChildProcesses& children() { return children_; }

 private:
  const sigset_t child_mask_;
  ChildProcesses children_;
  Mutex mu_;
  CondVar ended_;
  bool stopping_ GUARDED_BY(mu_) = false;
  int running_ GUARDED_BY(mu_) = 0;
};

// One volume, on its own thread: receive, serve, report.
void ServeVolume(const std::string& socket, size_t volume_count, Volumes& volumes) {
  const std::filesystem::path dir = std::filesystem::path(socket).parent_path();
  const std::string volume = dir.filename().string();
  const std::string error_file = (dir / "error").string();
  StatusOr<DescriptorMessage> received = ReceiveDescriptor(socket);
  if (!received.ok()) {
    return ReportError(error_file, volume,
                       "failed to receive the volume from the socket " + socket + ": " + received.status().message());
  }
  // Received: the socket has served its purpose (the driver's sidecar deletes it too).
  if (::unlink(socket.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("[{}] cannot delete {}: {}", volume, socket, std::strerror(errno));
  }
  StatusOr<GkeMount> mount = [&]() -> StatusOr<GkeMount> {
    ASSIGN_OR_RETURN(GkeVolumeMessage message, ParseGkeMessage(received->bytes));
    ASSIGN_OR_RETURN(GkeMount translated, TranslateGkeVolume(message));
    RETURN_IF_ERROR(ShareMemoryLimit(translated, FindCgroupMemoryLimit(), volume_count));
    return translated;
  }();
  if (!mount.ok()) {
    ::close(received->fd);
    return ReportError(error_file, volume, mount.status().message());
  }
  for (const std::string& line : mount->notes) spdlog::info("[{}] {}", volume, line);
  if (mount->metrics) {
    const std::string socket_option = "prometheus_socket=" + (dir / "metrics.sock").string();
    mount->options += (mount->options.empty() ? "" : ",") + OptionListItem(socket_option);
  }
  // What an earlier run reported is not about this mount.
  if (::unlink(error_file.c_str()) != 0 && errno != ENOENT) {
    spdlog::warn("[{}] cannot delete the stale {}: {}", volume, error_file, std::strerror(errno));
  }
  spdlog::info("[{}] serving {}{}", volume, mount->source, mount->options.empty() ? "" : " -o " + mount->options);
  StatusOr<std::optional<ServingChild>> child = volumes.Start(*mount, received->fd);
  if (!child.ok()) return ReportError(error_file, volume, "cannot start tensorfs: " + child.status().message());
  if (!child->has_value()) return;  // stopping
  const std::string prefix = "[" + volume + "] ";
  const ChildEnd end = WatchServingChild(**child, volumes.children(), [&prefix](const std::string& line) {
    std::fprintf(IsErrorLine(line) ? stderr : stdout, "%s%s\n", prefix.c_str(), line.c_str());
  });
  // Reported before the sidecar hears that the child has ended: it may exit then.
  if (end.clean()) {
    spdlog::info("[{}] the mount of {} has ended", volume, mount->source);
  } else if (volumes.stopping() && (end.signal == SIGTERM || end.signal == SIGKILL)) {
    spdlog::info("[{}] tensorfs {} as the sidecar stopped", volume, end.How());
  } else {
    ReportError(error_file, volume, GkeErrorLine(end, mount->source));
  }
  volumes.Ended();
}

// The flags of klog, which the driver's sidecar parses (the webhook passes
// --v=5). Like Go's flag package, one that is no boolean takes its value from
// the next argument when written without '='.
enum class KlogFlag { kNone, kBool, kValue };
KlogFlag KlogFlagOf(std::string_view arg) {
  if (!arg.starts_with('-')) return KlogFlag::kNone;
  while (arg.starts_with('-')) arg.remove_prefix(1);
  arg = arg.substr(0, arg.find('='));
  for (std::string_view flag : {"logtostderr", "alsologtostderr", "skip_headers", "skip_log_headers",
                                "add_dir_header", "one_output"}) {
    if (arg == flag) return KlogFlag::kBool;
  }
  for (std::string_view flag : {"v", "vmodule", "stderrthreshold", "log_dir", "log_file", "log_file_max_size",
                                "log_backtrace_at", "log-flush-frequency"}) {
    if (arg == flag) return KlogFlag::kValue;
  }
  return KlogFlag::kNone;
}

}  // namespace

GkeSidecarOptions GkeSidecarOptionsFrom(std::string tmp_dir, std::vector<std::string> args,
                                        const char* native_sidecar_env) {
  GkeSidecarOptions options;
  options.tmp_dir = std::move(tmp_dir);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    if (KlogFlagOf(arg) == KlogFlag::kValue && arg.find('=') == std::string::npos && i + 1 < args.size()) {
      arg += " " + args[++i];  // "--v 5"
    }
    options.ignored_args.push_back(std::move(arg));
  }
  if (native_sidecar_env != nullptr && *native_sidecar_env != '\0') {
    const std::optional<bool> native = ParseGoBool(native_sidecar_env);
    if (!native) spdlog::warn("gke-sidecar: NATIVE_SIDECAR={} is not a boolean: taken as false", native_sidecar_env);
    options.native = native.value_or(false);
  }
  return options;
}

StatusOr<GkeVolumeMessage> ParseGkeMessage(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  const std::string shown(json.substr(0, 200));
  if (!j.is_object()) return InvalidArgumentError("the node plugin's message is not a JSON object: " + shown);
  GkeVolumeMessage message;
  for (const char* key : {"bucketName", "bucket_name"}) {  // bucket_name: drivers before 2023
    if (auto it = j.find(key); it != j.end() && it->is_string() && !it->get<std::string>().empty()) {
      message.bucket = it->get<std::string>();
      break;
    }
  }
  if (message.bucket.empty()) {
    return InvalidArgumentError("the node plugin's message names no bucket (no \"bucketName\"): " + shown);
  }
  if (auto options = j.find("options"); options != j.end() && !options->is_null()) {
    if (!options->is_array()) return InvalidArgumentError("\"options\" is not an array of strings: " + shown);
    for (const nlohmann::json& item : *options) {
      if (!item.is_string()) return InvalidArgumentError("\"options\" is not an array of strings: " + shown);
      message.options.push_back(item.get<std::string>());
    }
  }
  return message;
}

StatusOr<GkeMount> TranslateGkeVolume(const GkeVolumeMessage& message) {
  if (message.bucket == "_") {
    return InvalidArgumentError(std::string(kIncorrectUsage) +
                                "bucket \"_\" asks for every bucket the pod can reach (a dynamic mount), which "
                                "tensorfs does not serve: name one bucket in the volume's bucketName");
  }
  if (!IsBucketName(message.bucket)) {
    return InvalidArgumentError(std::string(kIncorrectUsage) + "\"" + message.bucket +
                                "\" is not a bucket name: give the bucket alone in bucketName and the "
                                "directory in the mount option only-dir=DIR");
  }
  GkeMount mount;
  std::string prefix;
  std::vector<std::string> items;
  for (const std::string& option : message.options) {
    if (option.empty()) continue;
    if (option.starts_with("tensorfs:")) {
      ASSIGN_OR_RETURN(std::optional<std::string> item, TensorfsOption(option));
      if (item) items.push_back(*item);
      continue;
    }
    const size_t eq = option.find('=');
    const std::string key = eq == std::string::npos ? option : option.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : option.substr(eq + 1);
    if (key == "only-dir") {
      const size_t first = value.find_first_not_of('/');
      const size_t last = value.find_last_not_of('/');
      prefix = first == std::string::npos ? "" : value.substr(first, last - first + 1);
    } else if (const std::optional<std::string> ttl = MetadataTtlItem(key); ttl) {
      items.push_back(*ttl);
    } else if (key.starts_with("disable-metrics-for-gke:")) {
      mount.metrics = key != "disable-metrics-for-gke:true";
    } else if (key == "uid" || key == "gid") {
      items.push_back(key + "=" + value);
    } else if (key == "file-mode" || key == "dir-mode") {
      items.push_back((key == "file-mode" ? "file_mode=" : "dir_mode=") + value);
    } else {
      mount.notes.push_back("ignoring option " + option + ": " + WhyIgnored(key));
    }
  }
  for (const std::string& item : items) mount.options += (mount.options.empty() ? "" : ",") + OptionListItem(item);
  // Checked here, to name the volume's option in the error rather than fail in the child.
  MountOptions check;
  if (Status s = ApplyMountOptionList(check, mount.options); !s.ok()) {
    return InvalidArgumentError(std::string(kIncorrectUsage) + s.message());
  }
  mount.source = "gs://" + message.bucket + (prefix.empty() ? "" : "/" + prefix);
  return mount;
}

Status ShareMemoryLimit(GkeMount& mount, const std::optional<MemoryLimit>& limit, size_t volumes) {
  if (!limit || volumes < 2) return OkStatus();
  MountOptions options;
  RETURN_IF_ERROR(ApplyMountOptionList(options, mount.options));
  const MemoryLimit share{limit->bytes / volumes, limit->file + " shared by " + std::to_string(volumes) + " volumes"};
  StatusOr<std::string> fitted = FitCacheToMemoryLimit(options, share);
  if (!fitted.ok()) {
    return InvalidArgumentError(std::string(kIncorrectUsage) + fitted.status().message() +
                                " (the pod's annotation gke-gcsfuse/memory-limit)");
  }
  if (fitted->empty()) return OkStatus();
  mount.options += (mount.options.empty() ? "" : ",") + ("cache_size=" + std::to_string(options.engine.cache_size));
  mount.notes.push_back(*fitted);
  return OkStatus();
}

std::string GkeErrorLine(const ChildEnd& end, const std::string& source) {
  std::string reason = end.last_line;
  if (reason.starts_with("tensorfs: ")) reason.erase(0, std::string_view("tensorfs: ").size());
  const std::string about = "tensorfs serving " + source + " " + end.How() + (reason.empty() ? "" : ": " + reason);
  if (end.signal == SIGKILL) {
    return "tensorfs serving " + source + " was killed (signal: killed): out of memory? Raise the pod's "
           "gke-gcsfuse/memory-limit annotation or lower tensorfs:cache_size";
  }
  if (end.signal != 0) return about;
  switch (static_cast<ExitStatus>(end.exit_code)) {
    case ExitStatus::kSourceNotFound:
      if (reason.find("bucket gs://") != std::string::npos) return "bucket doesn't exist: " + reason;
      return about;
    case ExitStatus::kAccessDenied:
      return "googleapi: Error 403: " + reason;
    case ExitStatus::kUsage:
      return std::string(kIncorrectUsage) + reason;
    default:
      return about;
  }
}

std::optional<bool> ParseGoBool(std::string_view text) {
  for (std::string_view yes : {"1", "t", "T", "TRUE", "true", "True"}) {
    if (text == yes) return true;
  }
  for (std::string_view no : {"0", "f", "F", "FALSE", "false", "False"}) {
    if (text == no) return false;
  }
  return std::nullopt;
}

int RunGkeSidecar(const GkeSidecarOptions& options) {
  struct stat st;
  if (::stat(options.tmp_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    spdlog::error("gke-sidecar: --tmp-dir {} is not a directory (the pod's gke-gcsfuse-tmp emptyDir)",
                  options.tmp_dir);
    return static_cast<int>(ExitStatus::kUsage);
  }
  for (const std::string& arg : options.ignored_args) {
    const bool klog = KlogFlagOf(arg) != KlogFlag::kNone;
    spdlog::info("gke-sidecar: ignoring argument {}: {}", arg,
                 klog ? "a klog flag of gcsfuse's sidecar (the mounts' log level is tensorfs:log_level)"
                      : "not an argument of tensorfs gke-sidecar");
  }
  const std::string volumes_dir = options.tmp_dir + "/.volumes";
  const std::string exit_file = volumes_dir + "/exit";
  // Signals are taken by this thread alone; the children get the old mask back.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);

  // Never destroyed: volume threads may still use it when the process exits.
  auto* volumes = new Volumes(old_mask);
  const std::vector<std::string> sockets = VolumeSockets(volumes_dir);
  spdlog::info("gke-sidecar: {} volume(s) under {}; a {} sidecar", sockets.size(), volumes_dir,
               options.native ? "native (SIGTERM stops it)" : "regular (the exit file stops it)");
  for (const std::string& socket : sockets) {
    std::thread([socket, count = sockets.size(), volumes] { ServeVolume(socket, count, *volumes); }).detach();
  }

  const timespec period{static_cast<time_t>(kExitFilePollPeriod.count()), 0};
  while (true) {
    siginfo_t info;
    const int sig = ::sigtimedwait(&stop_signals, &info, &period);
    if (sig == SIGINT) {
      spdlog::info("gke-sidecar: SIGINT: stopping");
      break;
    }
    if (sig == SIGTERM && options.native) {
      spdlog::info("gke-sidecar: SIGTERM: stopping");
      break;
    }
    if (sig == SIGTERM) {
      spdlog::info("gke-sidecar: SIGTERM: a regular sidecar keeps serving until {} appears "
                   "(NATIVE_SIDECAR=TRUE makes SIGTERM stop it)", exit_file);
      continue;
    }
    if (!options.native && ::access(exit_file.c_str(), F_OK) == 0) {
      spdlog::info("gke-sidecar: {}: the pod's other containers have ended; stopping", exit_file);
      if (::unlink(exit_file.c_str()) != 0) spdlog::error("gke-sidecar: cannot delete {}: {}", exit_file,
                                                          std::strerror(errno));
      break;
    }
  }
  volumes->StopAll(kStopGrace);
  spdlog::info("gke-sidecar: stopped");
  spdlog::default_logger()->flush();
  std::fflush(stdout);
  std::fflush(stderr);
  ExitNow(0);  // volume threads may still be receiving: nothing to wait for
}

}  // namespace tensorfs
