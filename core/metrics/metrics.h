// Metrics: the counters a mount keeps about itself. The read engine and the
// stores update them; `tensorfs stats` (JSON through the mount) and the
// Prometheus endpoint (-o prometheus_port) read them.
//
// Thread-safety: every member is updated with relaxed atomics from any thread;
// Snapshot() gives a consistent-enough copy (each value read once) for display.
#ifndef TENSORFS_CORE_METRICS_METRICS_H_
#define TENSORFS_CORE_METRICS_METRICS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/util/status.h"

namespace tensorfs {

// Fixed buckets (seconds) suited to object-store fetches: 1 ms .. 60 s.
class LatencyHistogram {
 public:
  static constexpr std::array<double, 16> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                                     0.5,   1,      2.5,   5,    10,    20,   30,  60};
  void Observe(double seconds);

  struct Snapshot {
    std::array<uint64_t, kBounds.size() + 1> counts{};  // last: above the largest bound
    uint64_t count = 0;
    double sum_seconds = 0;
    // The q-quantile (0..1) estimated from the buckets (upper bound of the bucket).
    double Quantile(double q) const;
  };
  Snapshot Take() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> counts_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_micros_{0};
};

struct Metrics {
  // Kernel side.
  std::atomic<uint64_t> read_requests{0};  // FUSE reads answered
  std::atomic<uint64_t> bytes_served{0};   // bytes returned to the kernel
  // Cache.
  std::atomic<uint64_t> cache_hits{0};       // chunk lookups answered from memory
  std::atomic<uint64_t> cache_misses{0};     // chunk lookups that had to fetch (or join a fetch)
  std::atomic<uint64_t> cache_evictions{0};  // chunks dropped to stay within cache_size
  std::atomic<uint64_t> cache_bytes{0};      // bytes held by the cache now
  // Store side.
  std::atomic<uint64_t> fetches{0};            // ranged reads issued to the store
  std::atomic<uint64_t> prefetches{0};         // of which started by prefetch
  std::atomic<uint64_t> bytes_fetched{0};      // bytes read from the store
  std::atomic<uint64_t> fetches_in_flight{0};  // now
  std::atomic<uint64_t> metadata_requests{0};  // listings and stats
  std::array<std::atomic<uint64_t>, 10> errors_by_code{};  // index: ErrorCode
  LatencyHistogram fetch_latency;

  void CountError(ErrorCode code) { errors_by_code[static_cast<size_t>(code)].fetch_add(1, std::memory_order_relaxed); }

  // {"read_requests": .., ..., "errors": {"UNAVAILABLE": n, ...},
  //  "fetch_latency": {"count", "sum_seconds", "p50", "p90", "p99", "buckets": [[le, n], ...]}}
  nlohmann::json ToJson() const;
};

}  // namespace tensorfs

#endif  // TENSORFS_CORE_METRICS_METRICS_H_
