#include "fs/stats.h"

#include <sys/resource.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

namespace tensorfs {

StatusOr<nlohmann::json> ReadMountStats(const std::string& mountpoint) {
  std::vector<char> buf(1 << 20);
  ssize_t n = ::getxattr(mountpoint.c_str(), kStatsXattr, buf.data(), buf.size());
  if (n < 0) {
    return InvalidArgumentError(mountpoint + " is not a tensorfs mount point (" + std::strerror(errno) +
                                "): give the directory tensorfs is mounted on");
  }
  nlohmann::json stats = nlohmann::json::parse(buf.data(), buf.data() + n, nullptr, /*allow_exceptions=*/false);
  if (stats.is_discarded()) return InternalError("the counters of " + mountpoint + " are not valid JSON");
  return stats;
}

nlohmann::json MountSettingsJson(const MountOptions& options, uint32_t uid, uint32_t gid) {
  auto octal = [](uint32_t mode) {
    char text[8];
    std::snprintf(text, sizeof text, "%o", mode);
    return std::string(text);
  };
  nlohmann::json views = nlohmann::json::array();
  for (ViewKind kind : options.views) views.push_back(std::string(ViewOptionName(kind)));
  const EngineOptions& e = options.engine;
  nlohmann::json j = {{"source", options.source},
                      {"cache_size", e.cache_size},
                      {"chunk_size", e.chunk_size},
                      {"max_fetches", e.max_fetches},
                      {"prefetch_window", e.prefetch_window},
                      {"views", std::move(views)},
                      {"uid", uid},
                      {"gid", gid},
                      {"file_mode", octal(options.file_mode)},
                      {"dir_mode", octal(options.dir_mode)}};
  if (e.shard_world > 0) j["shard"] = std::to_string(e.shard_rank) + "/" + std::to_string(e.shard_world);
  // Seconds, or "inf" (which JSON has no number for).
  auto seconds = [](double s) { return std::isinf(s) ? nlohmann::json("inf") : nlohmann::json(s); };
  j["metadata_ttl"] = seconds(options.metadata_ttl_s);
  j["negative_ttl"] = seconds(options.negative_ttl_s);
  return j;
}

nlohmann::json ProcessCpuJson() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return {{"user", seconds(usage.ru_utime)}, {"system", seconds(usage.ru_stime)}};
}

namespace {

std::string Bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return out;
}

}  // namespace

std::string RenderStatsText(const nlohmann::json& s) {
  auto u = [&](const char* key) { return s.value(key, uint64_t{0}); };
  std::ostringstream out;
  if (const auto mount = s.find("mount"); mount != s.end() && mount->is_object()) {
    out << "mount                   " << mount->value("source", "") << ": cache "
        << Bytes(static_cast<double>(mount->value("cache_size", uint64_t{0}))) << ", chunks "
        << Bytes(static_cast<double>(mount->value("chunk_size", uint64_t{0}))) << ", "
        << mount->value("max_fetches", 0) << " fetches at once";
    if (mount->contains("shard")) out << ", shard " << mount->value("shard", "");
    out << "\n";
  }
  const uint64_t served = u("bytes_served");
  const uint64_t fetched = u("bytes_fetched");
  const uint64_t hits = u("cache_hits");
  const uint64_t misses = u("cache_misses");
  out << "reads from the kernel   " << u("read_requests") << " (" << Bytes(static_cast<double>(served)) << ")\n";
  out << "range requests issued   " << u("fetches") << " (" << u("prefetches") << " prefetch), " << u("fetches_in_flight")
      << " in flight\n";
  out << "bytes fetched           " << Bytes(static_cast<double>(fetched));
  if (served > 0) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, " (%.2fx the bytes served)", static_cast<double>(fetched) / static_cast<double>(served));
    out << ratio;
  }
  out << "\n";
  // What each GB served cost: the daemon's CPU, and how many FUSE reads and
  // range requests carried it (more, smaller ones cost more CPU per byte).
  if (served > 0) {
    const double gb = static_cast<double>(served) / 1e9;
    char cost[160];
    if (const auto cpu = s.find("cpu_seconds"); cpu != s.end() && cpu->is_object()) {
      const double user = cpu->value("user", 0.0), system = cpu->value("system", 0.0);
      std::snprintf(cost, sizeof cost, "cpu of the mount        %.2f s user + %.2f s system: %.2f CPU-s per GB served\n",
                    user, system, (user + system) / gb);
      out << cost;
    }
    std::snprintf(cost, sizeof cost, "per GB served           %.0f reads from the kernel (%s each), %.1f range requests\n",
                  static_cast<double>(u("read_requests")) / gb,
                  Bytes(static_cast<double>(served) / static_cast<double>(std::max<uint64_t>(1, u("read_requests"))))
                      .c_str(),
                  static_cast<double>(u("fetches")) / gb);
    out << cost;
  }
  out << "cache                   " << Bytes(static_cast<double>(u("cache_bytes"))) << " held; " << hits << " hits, " << misses
      << " misses, " << u("cache_evictions") << " evictions\n";
  out << "chunk buffers           " << u("buffers_reused") << " reused, " << u("buffers_mapped") << " mapped fresh\n";
  out << "metadata requests       " << u("metadata_requests") << "\n";
  out << "listings                " << u("listings");
  if (const auto mount = s.find("mount"); mount != s.end() && mount->contains("metadata_ttl")) {
    const nlohmann::json& ttl = (*mount)["metadata_ttl"];
    char seconds[32] = "inf";
    if (ttl.is_number()) std::snprintf(seconds, sizeof seconds, "%g s", ttl.get<double>());
    out << ", metadata_ttl " << seconds;
  }
  out << " (" << u("listings_changed") << " found a change: "
      << u("versions_replaced") << " objects replaced, " << u("entries_removed") << " entries gone); "
      << u("kernel_invalidations") << " kernel invalidations sent\n";
  out << "nodes                   " << u("nodes") << "\n";
  const auto& lat = s.value("fetch_latency", nlohmann::json::object());
  char line[128];
  std::snprintf(line, sizeof line, "fetch latency           p50 <= %.3f s, p90 <= %.3f s, p99 <= %.3f s over %llu fetches\n",
                lat.value("p50", 0.0), lat.value("p90", 0.0), lat.value("p99", 0.0),
                static_cast<unsigned long long>(lat.value("count", uint64_t{0})));
  out << line;
  const auto& retries = s.value("retries", nlohmann::json::object());
  out << "retries                 " << retries.value("total", uint64_t{0});
  const auto& causes = retries.value("by_cause", nlohmann::json::object());
  if (!causes.empty()) {
    out << " (";
    const char* sep = "";
    for (const auto& [cause, n] : causes.items()) {
      out << sep << cause << " " << n.get<uint64_t>();
      sep = ", ";
    }
    out << ")";
  }
  out << "; " << Bytes(static_cast<double>(retries.value("resumed_bytes", uint64_t{0})))
      << " kept by resumed reads; " << retries.value("exhausted", uint64_t{0}) << " gave up at retry_deadline\n";
  out << "reads failed with EIO   " << u("reads_failed_eio") << "\n";
  const auto& errors = s.value("errors", nlohmann::json::object());
  out << "errors                  ";
  if (errors.empty()) out << "none";
  for (const auto& [code, n] : errors.items()) out << code << " " << n << "  ";
  out << "\n";
  return out.str();
}

}  // namespace tensorfs
