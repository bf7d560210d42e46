#include "fs/startup.h"

#include <nlohmann/json.hpp>
#include <pthread.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "core/engine/read_engine.h"
#include "core/metrics/metrics.h"
#include "core/metrics/prometheus.h"
#include "core/store/open_store.h"
#include "core/util/log_limiter.h"
#include "core/util/thread_annotations.h"
#include "core/vfs/namespace.h"
#include "core/views/gguf_view.h"
#include "fs/daemon.h"
#include "fs/fuse_server.h"
#include "fs/mount_recovery.h"
#include "fs/service_notifier.h"
#include "core/util/process.h"

namespace tensorfs {
namespace {

// Written whole or not at all: a probe never reads half a file.
Status WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) return UnavailableError("cannot write " + tmp + ": " + std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return UnavailableError("cannot rename " + tmp + " to " + path + ": " + std::strerror(errno));
  }
  return OkStatus();
}

// "14 retries (connect 14)": what start-up met while the source did not answer.
std::string RetrySummary(const Metrics& metrics) {
  const uint64_t total = metrics.retries.total();
  if (total == 0) return "the first request has not been answered";
  const nlohmann::json by_cause = metrics.retries.ByCauseJson();
  std::string causes;
  for (auto it = by_cause.begin(); it != by_cause.end(); ++it) {
    causes += (causes.empty() ? "" : ", ") + it.key() + " " + it.value().dump();
  }
  return std::to_string(total) + (total == 1 ? " retry (" : " retries (") + causes + ")";
}

// True for gs://bucket/prefix or s3://bucket/prefix with a prefix.
bool HasBucketPrefix(const std::string& source) {
  if (!IsObjectStoreSource(source)) return false;
  size_t slash = source.find('/', 5);
  return slash != std::string::npos && source.find_first_not_of('/', slash) != std::string::npos;
}

// Lists the source's root, giving up after startup_deadline. The listing runs
// on its own thread: the store retries a transient failure for its own
// retry_deadline, and start-up must not wait that long.
Status ReachSource(Namespace& ns, const MountOptions& options, const Metrics& metrics) {
  const auto start = std::chrono::steady_clock::now();
  auto result = std::make_shared<std::promise<Status>>();
  std::future<Status> done = result->get_future();
  std::thread([result, &ns] { result->set_value(ns.CheckReachable()); }).detach();
  const auto deadline = std::chrono::duration<double>(options.startup_deadline_s);
  if (done.wait_for(deadline) != std::future_status::ready) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%.0f", waited);
    return UnavailableError("gave up after " + std::string(seconds) + " s (startup_deadline): " + options.source +
                            " did not answer: " + RetrySummary(metrics));
  }
  RETURN_IF_ERROR(done.get());
  if (HasBucketPrefix(options.source)) {
    StatusOr<Namespace::Directory> root = ns.ReadDir(kRootNode);  // listed above: no request
    if (root.ok() && root->entries.empty()) {
      return NotFoundError(options.source + " holds no objects: check the prefix in the URL");
    }
  }
  return OkStatus();
}

// A TTL option's seconds (inf: forever).
std::chrono::nanoseconds Ttl(double seconds) {
  if (std::isinf(seconds)) return Freshness::kForever;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(seconds));
}

// The start-up check's outcome, shared by the thread that checks and main.
struct StartupState {
  enum class Phase { kChecking, kServing, kFailed, kStopped };
  Mutex mu;
  Phase phase GUARDED_BY(mu) = Phase::kChecking;
  ExitStatus exit_status GUARDED_BY(mu) = ExitStatus::kOk;
  Status failure GUARDED_BY(mu);
};

void BlockSignalsInThisThread() {
  sigset_t all;
  sigfillset(&all);
  ::pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

}  // namespace

int FailStartup(const MountOptions& options, ExitStatus exit_status, const Status& status) {
  if (!options.error_file.empty()) {
    if (Status s = WriteFileAtomically(options.error_file, status.message() + "\n"); !s.ok()) {
      spdlog::warn("error_file: {}", s.message());
    }
  }
  FlushHeldBackWarnings();
  spdlog::default_logger()->flush();
  PrintFatal(status.message());  // the last line
  return static_cast<int>(exit_status);
}

int MountAndServe(const MountOptions& options) {
  const bool adopt = FuseFdOfMountPoint(options.mountpoint).has_value();
  if (!adopt) {
    // A mount point left dead by a tensorfs that was killed would fail to mount.
    if (StatusOr<bool> recovered = RecoverDeadMountPoint(options.mountpoint); !recovered.ok()) {
      return FailStartup(options, ExitStatus::kMountPoint, recovered.status());
    }
  }
  Daemon daemon;
  if (!options.foreground) daemon.Start();  // before any thread exists
  auto fail = [&](ExitStatus exit_status, const Status& status) {
    if (options.foreground) return FailStartup(options, exit_status, status);
    if (!options.error_file.empty()) (void)WriteFileAtomically(options.error_file, status.message() + "\n");
    daemon.Failed(exit_status, status.message());  // the waiting parent prints it
    return static_cast<int>(exit_status);
  };

  // Nothing here sends a storage request or looks at the mount point.
  Metrics metrics;  // outlives the store and the engine, which count into it
  StatusOr<std::unique_ptr<ObjectStore>> store = OpenStore(options, &metrics);
  if (!store.ok()) return fail(SourceExitStatus(store.status()), store.status());
  EngineOptions engine_options = options.engine;
  // The readahead the mount's files get, by kind of reader (readahead_policy.h);
  // in descriptor mode the parent sets it once (--print-mount-params) and the
  // engine takes the kernel's default for its margins.
  if (!FuseFdOfMountPoint(options.mountpoint)) {
    engine_options.readahead = ReadaheadPolicy::ForMount(options.given.contains("read_ahead"), options.read_ahead,
                                                         options.engine.shard_world);
  }
  if (const char* trace = std::getenv("TENSORFS_TRACE_READS")) engine_options.trace_reads = trace;  // see read_trace.h
  ReadEngine engine(**store, engine_options, metrics);
  StatusOr<LayerGrouper> grouper = LayerGrouper::Create(options.layer_regex);
  if (!grouper.ok()) return fail(ExitStatus::kUsage, grouper.status());
  Namespace ns(**store, engine,
               ViewOptions{.kinds = options.views,
                           .grouper = std::make_shared<const LayerGrouper>(std::move(*grouper)),
                           .prefetch_window = options.engine.prefetch_window,
                           .root_name = GgufNameOfSource(options.source)},
               Freshness{.metadata_ttl = Ttl(options.metadata_ttl_s), .negative_ttl = Ttl(options.negative_ttl_s)});

  StatusOr<std::unique_ptr<FuseServer>> server = FuseServer::Mount(ns, options, metrics);
  if (!server.ok()) return fail(ExitStatus::kMountPoint, server.status());
  std::unique_ptr<PrometheusServer> prometheus;
  if (options.prometheus_port != 0) {
    StatusOr<std::unique_ptr<PrometheusServer>> started = PrometheusServer::Start(metrics, options.prometheus_port,
                                                                                  options.prometheus_address);
    if (!started.ok()) {
      server->reset();  // unmount before the waiting parent reports the failure
      return fail(ExitStatus::kTransient, started.status());  // the port may be free again later
    }
    prometheus = std::move(*started);
    spdlog::info("serving metrics at http://{}:{}/metrics", options.prometheus_address, prometheus->port());
  }
  std::unique_ptr<PrometheusServer> prometheus_unix;
  if (!options.prometheus_socket.empty()) {
    StatusOr<std::unique_ptr<PrometheusServer>> started =
        PrometheusServer::StartUnix(metrics, options.prometheus_socket);
    if (!started.ok()) {
      server->reset();
      return fail(ExitStatus::kTransient, started.status());
    }
    prometheus_unix = std::move(*started);
    spdlog::info("serving metrics on the Unix socket {}", options.prometheus_socket);
  }
  if (!(*server)->adopted_fd()) {
    FuseServer* mounted = server->get();
    engine.SetReadaheadSink([mounted](uint64_t bytes) { mounted->SetReadahead(bytes); });
  }
  ServiceNotifier notifier(options.source, options.mountpoint);  // systemd: READY=1, STOPPING=1
  (*server)->OnStopping([&notifier] { notifier.Stopping(); });

  // The source is reached while the session already answers the kernel. The
  // thread is never joined: it may still wait on the network when an unmount
  // or a signal ends the session, and the process exits without it. What it
  // uses lives until then (this function never returns past this point).
  auto state = std::make_shared<StartupState>();
  FuseServer& serving = **server;
  std::thread([&, state] {
    BlockSignalsInThisThread();  // SIGTERM is for the thread running the FUSE loop
    Status reached = ReachSource(ns, options, metrics);
    MutexLock lock(state->mu);
    if (state->phase != StartupState::Phase::kChecking) return;  // the session ended meanwhile
    if (!reached.ok()) {
      state->phase = StartupState::Phase::kFailed;
      state->exit_status = SourceExitStatus(reached);
      state->failure = reached;
      serving.Stop();
      return;
    }
    state->phase = StartupState::Phase::kServing;
    if (!options.ready_file.empty()) {
      if (Status s = WriteFileAtomically(options.ready_file, "ready\n"); !s.ok()) spdlog::warn("ready_file: {}", s.message());
    }
    daemon.Ready();  // first: in the background, the caller's terminal hears nothing when all is well
    spdlog::info("{} {} on {}: the source answers", adopt ? "serving" : "mounted", options.source,
                 options.mountpoint);
    notifier.NotifyWhenServing(/*probe_mount_point=*/!adopt);
  }).detach();

  Status status = serving.Run();
  ExitStatus exit_status = status.ok() ? ExitStatus::kOk : ExitStatus::kTransient;
  Status failure;
  {
    MutexLock lock(state->mu);
    if (state->phase == StartupState::Phase::kChecking) state->phase = StartupState::Phase::kStopped;
    if (state->phase == StartupState::Phase::kFailed) {
      exit_status = state->exit_status;
      failure = state->failure;
    } else if (state->phase == StartupState::Phase::kStopped && !options.foreground) {
      // Stopped (a signal, an unmount) before the source answered: the waiting
      // parent must not report a mount that is gone.
      failure = UnavailableError("stopped before " + options.source + " was reached");
      exit_status = ExitStatus::kTransient;
    }
  }
  if (!failure.ok()) ExitNow(fail(exit_status, failure));
  if (!status.ok()) spdlog::error("{}", status.message());
  // Unmounted. Fetches still retrying against a slow server hold nothing worth
  // waiting for (the mount is read-only): leave without joining them, after
  // reporting the warnings the rate limiters held back.
  FlushHeldBackWarnings();
  spdlog::default_logger()->flush();
  ExitNow(static_cast<int>(exit_status));
}

}  // namespace tensorfs
